//! The CustomResourceDefinition objects the twin pre-creates, one per custom row of the registry, so that
//! `kubectl get crd` and discovery agree, and the one place custom resources' printer columns live ([`super::table`]
//! reads them from here, as the API server reads them from the CRD).
//!
//! Ours are exactly what `gpuclaim crds` prints: `GPUClass::crd()` and its siblings, generated from
//! `gpuclaim_engine::api`. KubeVirt's and cert-manager's are stand-ins: the names, scope, version, `status`
//! subresource and printer columns of the real CRDs (KubeVirt's `virt-operator` CRD generator, cert-manager's
//! `deploy/crds`), with a schema that keeps every field (`x-kubernetes-preserve-unknown-fields`), since the twin does not
//! validate those kinds' objects. The names come from the registry row, so the two cannot disagree; only the v1
//! version is listed, the one the twin serves (KubeVirt's CRDs also list the deprecated `v1alpha3`).
//!
//! ```
//! use gpuclaim_sim::served::{crds, resources};
//!
//! let vmis = resources::find("kubevirt.io", "v1", "virtualmachineinstances").unwrap();
//! let columns = crds::printer_columns(vmis);
//! assert_eq!(columns[1]["name"], "Phase");
//! assert_eq!(crds::builtin().len(), resources::RESOURCES.iter().filter(|row| row.is_custom()).count());
//! ```

use std::sync::OnceLock;

use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
use kube_core::CustomResourceExt;
use serde_json::{Value, json};

use super::resources::{RESOURCES, Resource};

/// The description cert-manager's CRDs give their Age columns (ObjectMeta's `creationTimestamp` doc, first part).
const CREATION_TIMESTAMP_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object \
     was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not \
     set this value. It is represented in RFC3339 form and is in UTC.";

/// One printer column of a stand-in CRD.
struct Column {
    name: &'static str,
    type_: &'static str,
    json_path: &'static str,
    description: Option<&'static str>,
    priority: u32,
}

const fn column(name: &'static str, type_: &'static str, json_path: &'static str) -> Column {
    Column { name, type_, json_path, description: None, priority: 0 }
}

/// What a stand-in CRD holds beyond the registry row's names.
struct StandIn {
    group: &'static str,
    plural: &'static str,
    /// The CRD object's labels (KubeVirt labels its CRDs `kubevirt.io: ""`; cert-manager's Helm chart `app`).
    labels: &'static [(&'static str, &'static str)],
    columns: &'static [Column],
}

const KUBEVIRT_LABELS: &[(&str, &str)] = &[("kubevirt.io", "")];
const CERT_MANAGER_LABELS: &[(&str, &str)] = &[("app", "cert-manager")];

const AGE: Column = column("Age", "date", ".metadata.creationTimestamp");
const CERT_MANAGER_AGE: Column = Column { description: Some(CREATION_TIMESTAMP_DOC), ..AGE };
const KUBEVIRT_READY: Column = column("Ready", "string", ".status.conditions[?(@.type=='Ready')].status");
const CERT_MANAGER_READY: Column = column("Ready", "string", ".status.conditions[?(@.type == \"Ready\")].status");
const CERT_MANAGER_STATUS: Column =
    Column { priority: 1, ..column("Status", "string", ".status.conditions[?(@.type == \"Ready\")].message") };

/// The stand-ins, with the printer columns of kubevirt/kubevirt `pkg/virt-operator/resource/generate/components/
/// crds.go` and of cert-manager's CRDs (cert-manager/cert-manager `deploy/crds/cert-manager.io_certificates.yaml`,
/// `cert-manager.io_issuers.yaml`).
const STAND_INS: &[StandIn] = &[
    StandIn {
        group: "kubevirt.io",
        plural: "virtualmachines",
        labels: KUBEVIRT_LABELS,
        columns: &[
            AGE,
            Column {
                description: Some("Human Readable Status"),
                ..column("Status", "string", ".status.printableStatus")
            },
            KUBEVIRT_READY,
        ],
    },
    StandIn {
        group: "kubevirt.io",
        plural: "virtualmachineinstances",
        labels: KUBEVIRT_LABELS,
        columns: &[
            AGE,
            column("Phase", "string", ".status.phase"),
            column("IP", "string", ".status.interfaces[0].ipAddress"),
            column("NodeName", "string", ".status.nodeName"),
            KUBEVIRT_READY,
            Column {
                priority: 1,
                ..column("Live-Migratable", "string", ".status.conditions[?(@.type=='LiveMigratable')].status")
            },
            Column { priority: 1, ..column("Paused", "string", ".status.conditions[?(@.type=='Paused')].status") },
        ],
    },
    StandIn {
        group: "kubevirt.io",
        plural: "virtualmachineinstancemigrations",
        labels: KUBEVIRT_LABELS,
        columns: &[
            Column {
                description: Some("The current phase of VM instance migration"),
                ..column("Phase", "string", ".status.phase")
            },
            Column {
                description: Some("The name of the VMI to perform the migration on"),
                ..column("VMI", "string", ".spec.vmiName")
            },
        ],
    },
    StandIn {
        group: "cert-manager.io",
        plural: "certificates",
        labels: CERT_MANAGER_LABELS,
        columns: &[
            CERT_MANAGER_READY,
            column("Secret", "string", ".spec.secretName"),
            Column { priority: 1, ..column("Issuer", "string", ".spec.issuerRef.name") },
            CERT_MANAGER_STATUS,
            CERT_MANAGER_AGE,
        ],
    },
    StandIn {
        group: "cert-manager.io",
        plural: "issuers",
        labels: CERT_MANAGER_LABELS,
        columns: &[CERT_MANAGER_READY, CERT_MANAGER_STATUS, CERT_MANAGER_AGE],
    },
];

/// One CRD object per custom row of the registry, in the registry's order.
pub fn builtin() -> Vec<Value> {
    cached().to_vec()
}

/// The CRDs, made once: ours are generated from the engine's types (schemars) at every call of `crd()`, and a
/// table for a custom resource reads its columns here on every request.
fn cached() -> &'static [Value] {
    static CRDS: OnceLock<Vec<Value>> = OnceLock::new();
    CRDS.get_or_init(|| RESOURCES.iter().filter(|row| row.is_custom()).filter_map(crd_of).collect())
}

/// The CRD object of a custom row (none for a row no CRD describes).
fn crd_of(row: &Resource) -> Option<Value> {
    let ours = match (row.group, row.plural) {
        ("gpu.cozystack.io", "gpuclasses") => Some(GPUClass::crd()),
        ("gpu.cozystack.io", "gpuclaims") => Some(GPUClaim::crd()),
        ("gpu.cozystack.io", "gpuusages") => Some(GPUUsage::crd()),
        _ => None,
    };
    if let Some(crd) = ours {
        return serde_json::to_value(crd).ok();
    }
    let stand_in = STAND_INS.iter().find(|stand_in| stand_in.group == row.group && stand_in.plural == row.plural)?;
    Some(stand_in_crd(row, stand_in))
}

fn stand_in_crd(row: &Resource, stand_in: &StandIn) -> Value {
    let columns: Vec<Value> = stand_in.columns.iter().map(column_json).collect();
    let mut version = json!({
        "name": row.version,
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        "additionalPrinterColumns": columns,
    });
    if row.subresource("status").is_some() {
        version["subresources"] = json!({"status": {}});
    }
    let mut names = json!({
        "kind": row.kind,
        "listKind": row.list_kind(),
        "plural": row.plural,
        "singular": row.singular,
    });
    if !row.short_names.is_empty() {
        names["shortNames"] = json!(row.short_names);
    }
    if !row.categories.is_empty() {
        names["categories"] = json!(row.categories);
    }
    let labels: serde_json::Map<String, Value> =
        stand_in.labels.iter().map(|(key, value)| ((*key).to_owned(), Value::from(*value))).collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", row.plural, row.group), "labels": labels},
        "spec": {
            "group": row.group,
            "names": names,
            "scope": row.scope(),
            "versions": [version],
        },
    })
}

fn column_json(column: &Column) -> Value {
    let mut value = json!({"name": column.name, "type": column.type_, "jsonPath": column.json_path});
    if let Some(description) = column.description {
        value["description"] = description.into();
    }
    if column.priority > 0 {
        value["priority"] = column.priority.into();
    }
    value
}

/// The `additionalPrinterColumns` of `resource`'s CRD at its served version, as the CRD lists them (empty for a
/// resource no CRD describes, or a CRD that lists none: the table then shows an Age column, as the API server
/// serves such a CRD).
pub fn printer_columns(resource: &Resource) -> Vec<Value> {
    let name = format!("{}.{}", resource.plural, resource.group);
    let Some(crd) = cached().iter().find(|crd| crd.pointer("/metadata/name").and_then(Value::as_str) == Some(&name))
    else {
        return Vec::new();
    };
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    versions
        .iter()
        .find(|version| version.get("name").and_then(Value::as_str) == Some(resource.version))
        .and_then(|version| version.get("additionalPrinterColumns"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}
