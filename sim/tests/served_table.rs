//! Tables as the API server answers `kubectl get`: ages in apimachinery's `HumanDuration` on the twin's clock, the
//! Accept header and `includeObject` read as the API server reads them, the built-in printers' cells for the
//! twin's own renders (a gated pod, a running pod, cordoned and lost nodes), the CRDs' printer columns (ours from
//! the engine, KubeVirt's), the Table's exact shape, and one pre-created CRD per custom registry row.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
use gpuclaim_engine::model::{Node, Pod, PodPhase, Time};
use gpuclaim_sim::apiserver::objects::{Manifest, node, pod};
use gpuclaim_sim::served::crds;
use gpuclaim_sim::served::list::Page;
use gpuclaim_sim::served::resources::{self, RESOURCES, Resource};
use gpuclaim_sim::served::table::{self, IncludeObject, TableError, TableOptions, TableVersion};
use k8s_openapi::jiff::SignedDuration;
use kube_core::CustomResourceExt;
use serde::Deserialize;
use serde_json::{Value, json};

/// kubectl 1.37's Accept on get, list and watch (docs/plans/issue39-kubectl-probe.md).
const KUBECTL_ACCEPT: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

const CREATED: &str = "2027-01-15T08:00:00Z";

fn at(text: &str) -> Time {
    text.parse().unwrap()
}

fn row(group: &str, version: &str, plural: &str) -> &'static Resource {
    resources::find(group, version, plural).unwrap_or_else(|| panic!("{group}/{version}/{plural} is served"))
}

fn options() -> TableOptions {
    TableOptions::default()
}

/// The cells of each row.
fn cells(answer: &Value) -> Vec<Vec<Value>> {
    answer["rows"].as_array().unwrap().iter().map(|row| row["cells"].as_array().unwrap().clone()).collect()
}

/// The column names, with their priorities.
fn columns(answer: &Value) -> Vec<(String, i64)> {
    answer["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|column| (column["name"].as_str().unwrap().to_owned(), column["priority"].as_i64().unwrap()))
        .collect()
}

fn names(columns: &[(String, i64)]) -> Vec<&str> {
    columns.iter().map(|(name, _)| name.as_str()).collect()
}

#[test]
fn ages_are_human_durations_case_by_case() {
    let cases: &[(i64, &str)] = &[
        (-3, "<invalid>"),
        (-2, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (599, "9m59s"),
        (600, "10m"),
        (65 * 60, "65m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 4 * 60, "3h4m"),
        (8 * 3600 - 1, "7h59m"),
        (8 * 3600, "8h"),
        (47 * 3600 + 59 * 60, "47h"),
        (48 * 3600, "2d"),
        (51 * 3600, "2d3h"),
        (8 * 86400 - 1, "7d23h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        ((3 * 365 + 45) * 86400, "3y45d"),
        (8 * 365 * 86400 - 1, "7y364d"),
        (8 * 365 * 86400, "8y"),
        (9 * 365 * 86400 + 100 * 86400, "9y"),
    ];
    for (seconds, expected) in cases {
        assert_eq!(table::human_duration(SignedDuration::from_secs(*seconds)), *expected, "{seconds}s");
    }
    // Go truncates toward zero: 1.5s in the future is still "now", 2.5s is not.
    assert_eq!(table::human_duration(SignedDuration::from_millis(-1500)), "0s");
    assert_eq!(table::human_duration(SignedDuration::from_millis(-2500)), "<invalid>");
    assert_eq!(table::human_duration(SignedDuration::from_millis(119_999)), "119s");
}

#[test]
fn kubectls_accept_asks_for_a_v1_table_and_plain_json_for_none() {
    assert_eq!(table::wants_table(KUBECTL_ACCEPT), Some(TableVersion::V1));
    assert_eq!(table::wants_table("application/json"), None);
    assert_eq!(table::wants_table("*/*"), None);
    assert_eq!(table::wants_table(""), None);
    assert_eq!(
        table::wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json"),
        Some(TableVersion::V1beta1)
    );
    // The first range the server can answer decides, by quality first.
    assert_eq!(table::wants_table("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"), None);
    assert_eq!(
        table::wants_table("application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io"),
        Some(TableVersion::V1)
    );
    assert_eq!(
        table::wants_table("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json"),
        None
    );
    assert_eq!(table::wants_table("application/json;as=Table;v=v2;g=meta.k8s.io"), None);
    assert_eq!(table::wants_table("application/json;as=Table;v=v1;g=meta.k8s.io;q=0, application/json"), None);
    assert_eq!(TableVersion::V1.content_type(), table::TABLE_CONTENT_TYPE_V1);
    assert_eq!(table::TABLE_CONTENT_TYPE_V1, "application/json;as=Table;v=v1;g=meta.k8s.io");
    assert_eq!(TableVersion::V1beta1.content_type(), "application/json;as=Table;v=v1beta1;g=meta.k8s.io");
}

#[test]
fn include_object_reads_as_the_api_server_reads_it() {
    assert_eq!(table::include_object(None), Ok(IncludeObject::Metadata));
    assert_eq!(table::include_object(Some("")), Ok(IncludeObject::Metadata));
    assert_eq!(table::include_object(Some("Metadata")), Ok(IncludeObject::Metadata));
    assert_eq!(table::include_object(Some("Object")), Ok(IncludeObject::Object));
    assert_eq!(table::include_object(Some("None")), Ok(IncludeObject::None));
    let refused = table::include_object(Some("metadata")).unwrap_err();
    assert_eq!(refused, TableError::IncludeObject("metadata".into()));
    assert_eq!(
        refused.to_string(),
        "Unable to convert to Table as requested: includeObject: Invalid value: \"metadata\": must be 'Metadata', \
         'Object', 'None', or empty"
    );
}

/// A pod as the twin's actors make it, created at [`CREATED`].
fn twin_pod(name: &str) -> Pod {
    Pod { namespace: "tenant".into(), name: name.into(), uid: "uid-1".into(), created: at(CREATED), ..Pod::default() }
}

#[test]
fn a_gated_pod_prints_scheduling_gated_and_a_bound_one_its_node() {
    let mut gated = twin_pod("gated");
    gated.scheduling_gates = vec!["gpu.cozystack.io/placement".into()];
    let mut running = twin_pod("running");
    running.node_name = Some("gpu-1".into());
    running.phase = PodPhase::Running;
    let mut terminating = pod::render(&running, None);
    terminating["metadata"]["name"] = "terminating".into();
    terminating["metadata"]["deletionTimestamp"] = "2027-01-15T09:00:00Z".into();
    let mut done = twin_pod("done");
    done.node_name = Some("gpu-1".into());
    done.phase = PodPhase::Succeeded;
    let (gated, running, done) = (pod::render(&gated, None), pod::render(&running, None), pod::render(&done, None));

    let pods = row("", "v1", "pods");
    let answer = table::table(pods, &[&gated, &running, &terminating, &done], at("2027-01-15T09:05:00Z"), &options());
    let listed = columns(&answer);
    assert_eq!(
        names(&listed),
        ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    );
    assert_eq!(listed.iter().map(|(_, priority)| *priority).collect::<Vec<_>>(), [0, 0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(answer["columnDefinitions"][0]["format"], "name");
    let rows = cells(&answer);
    let none = json!("<none>");
    assert_eq!(
        rows[0],
        [
            json!("gated"),
            json!("0/1"),
            json!("SchedulingGated"),
            json!("0"),
            json!("65m"),
            none.clone(),
            none.clone(),
            none.clone(),
            none.clone()
        ]
    );
    assert_eq!(
        rows[1],
        [
            json!("running"),
            json!("1/1"),
            json!("Running"),
            json!("0"),
            json!("65m"),
            none.clone(),
            json!("gpu-1"),
            none.clone(),
            none.clone()
        ]
    );
    assert_eq!(rows[2][..3], [json!("terminating"), json!("1/1"), json!("Terminating")]);
    // A finished pod is not terminating when deleted, and its row says it completed.
    assert_eq!(rows[3][..3], [json!("done"), json!("0/1"), json!("Succeeded")]);
    assert_eq!(answer["rows"][3]["conditions"][0]["type"], "Completed");
    assert_eq!(answer["rows"][3]["conditions"][0]["reason"], "Succeeded");
    assert!(answer["rows"][1].get("conditions").is_none());
}

#[test]
fn container_statuses_decide_readiness_restarts_and_reasons_as_the_printer_does() {
    let pod = json!({
        "metadata": {"name": "p", "creationTimestamp": CREATED},
        "spec": {
            "containers": [{"name": "a"}, {"name": "b"}],
            "readinessGates": [{"conditionType": "www.example.com/gate"}],
        },
        "status": {
            "phase": "Running",
            "podIPs": [{"ip": "10.0.0.7"}],
            "conditions": [{"type": "www.example.com/gate", "status": "True"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2027-01-15T08:58:00Z"}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ],
        },
    });
    let answer = table::table(row("", "v1", "pods"), &[&pod], at("2027-01-15T09:00:00Z"), &options());
    assert_eq!(
        cells(&answer)[0],
        [
            json!("p"),
            json!("1/2"),
            json!("CrashLoopBackOff"),
            json!("3 (2m ago)"),
            json!("60m"),
            json!("10.0.0.7"),
            json!("<none>"),
            json!("<none>"),
            json!("1/1")
        ]
    );
}

/// A node as the twin's kubelets write it, created at [`CREATED`].
fn twin_node(name: &str, ready: bool, unschedulable: bool) -> Value {
    let node = Node { name: name.into(), resource_version: "7".into(), ready, unschedulable, ..Node::default() };
    let manifest = Manifest { created: Some(at(CREATED)), ..Manifest::default() };
    node::render(&node, Some(&manifest))
}

#[test]
fn nodes_print_ready_not_ready_and_scheduling_disabled() {
    let mut worker = twin_node("gpu-1", true, false);
    worker["metadata"]["labels"] = json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": "",
                                         "kubernetes.io/role": "gpu"});
    let lost = twin_node("gpu-2", false, false);
    let cordoned = twin_node("gpu-3", true, true);
    let mut unknown = json!({"metadata": {"name": "bare"}});
    unknown["status"]["nodeInfo"] = json!({"kubeletVersion": "v1.37.0", "osImage": "Talos"});
    unknown["status"]["addresses"] = json!([{"type": "InternalIP", "address": "10.0.0.1"}]);
    let answer = table::table(
        row("", "v1", "nodes"),
        &[&worker, &lost, &cordoned, &unknown],
        at("2027-01-17T11:00:00Z"),
        &options(),
    );
    assert_eq!(
        names(&columns(&answer)),
        [
            "Name",
            "Status",
            "Roles",
            "Age",
            "Version",
            "Internal-IP",
            "External-IP",
            "OS-Image",
            "Kernel-Version",
            "Container-Runtime"
        ]
    );
    let rows = cells(&answer);
    let status_roles: Vec<(&Value, &Value, &Value)> =
        rows.iter().map(|cells| (&cells[1], &cells[2], &cells[3])).collect();
    assert_eq!(
        status_roles,
        [
            (&json!("Ready"), &json!("gpu,worker"), &json!("2d3h")),
            // The lifecycle controller's Unknown reads NotReady, as the printer writes any Ready that is not True.
            (&json!("NotReady"), &json!("<none>"), &json!("2d3h")),
            (&json!("Ready,SchedulingDisabled"), &json!("<none>"), &json!("2d3h")),
            (&json!("Unknown"), &json!("<none>"), &json!("<unknown>")),
        ]
    );
    assert_eq!(rows[0][4], "");
    assert_eq!(
        rows[0][5..],
        [json!("<none>"), json!("<none>"), json!("<unknown>"), json!("<unknown>"), json!("<unknown>")]
    );
    assert_eq!(
        rows[3][4..],
        [json!("v1.37.0"), json!("10.0.0.1"), json!("<none>"), json!("Talos"), json!("<unknown>"), json!("<unknown>")]
    );
}

#[test]
fn gpuclaims_print_our_crds_columns_and_usages_age_their_dates_on_virtual_time() {
    let claim = json!({
        "apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
        "metadata": {"name": "c1", "namespace": "tenant", "creationTimestamp": CREATED},
        "spec": {"className": "h100", "count": 2},
        "status": {"phase": "Bound", "nodeName": "gpu-1"},
    });
    let pending = json!({"metadata": {"name": "c2"}, "spec": {"className": "h100", "count": 1}});
    let answer =
        table::table(row("gpu.cozystack.io", "v1alpha1", "gpuclaims"), &[&claim, &pending], at(CREATED), &options());
    // The CRD lists its columns, so the API server adds no Age (apiextensions' `serveDefaultColumnsIfEmpty`).
    assert_eq!(names(&columns(&answer)), ["Name", "Class", "Count", "Phase", "Node"]);
    assert_eq!(
        answer["columnDefinitions"][1]["description"],
        "Custom resource definition column (in JSONPath format): .spec.className"
    );
    assert_eq!(answer["columnDefinitions"][2]["type"], "integer");
    assert_eq!(
        cells(&answer),
        [
            vec![json!("c1"), json!("h100"), json!(2), json!("Bound"), json!("gpu-1")],
            vec![json!("c2"), json!("h100"), json!(1), Value::Null, Value::Null],
        ]
    );

    let usage = json!({
        "metadata": {"name": "u1", "creationTimestamp": CREATED},
        "spec": {"claim": "c1", "count": 2, "node": "gpu-1", "startTime": CREATED, "endTime": "not a time"},
    });
    let answer = table::table(
        row("gpu.cozystack.io", "v1alpha1", "gpuusages"),
        &[&usage],
        at("2027-01-15T11:04:00Z"),
        &options(),
    );
    assert_eq!(names(&columns(&answer)), ["Name", "Claim", "Count", "Node", "Start", "End"]);
    assert_eq!(
        cells(&answer)[0],
        [json!("u1"), json!("c1"), json!(2), json!("gpu-1"), json!("3h4m"), json!("<invalid>")]
    );

    let classes = table::table(row("gpu.cozystack.io", "v1alpha1", "gpuclasses"), &[], at(CREATED), &options());
    let listed = columns(&classes);
    assert_eq!(listed.last().unwrap(), &("Placement".to_owned(), 1));
}

#[test]
fn a_vmi_prints_kubevirts_columns() {
    let vmi = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm-1", "namespace": "tenant", "creationTimestamp": CREATED},
        "status": {
            "phase": "Running", "nodeName": "gpu-1",
            "interfaces": [{"ipAddress": "10.244.0.9"}, {"ipAddress": "10.244.0.10"}],
            "conditions": [{"type": "LiveMigratable", "status": "False"}, {"type": "Ready", "status": "True"}],
        },
    });
    let scheduling = json!({"metadata": {"name": "vm-2", "creationTimestamp": "2027-01-15T08:00:30Z"},
                            "status": {"phase": "Scheduling"}});
    let answer = table::table(
        row("kubevirt.io", "v1", "virtualmachineinstances"),
        &[&vmi, &scheduling],
        at("2027-01-15T08:01:00Z"),
        &options(),
    );
    let listed = columns(&answer);
    assert_eq!(names(&listed), ["Name", "Age", "Phase", "IP", "NodeName", "Ready", "Live-Migratable", "Paused"]);
    assert_eq!(listed.iter().map(|(_, priority)| *priority).collect::<Vec<_>>(), [0, 0, 0, 0, 0, 0, 1, 1]);
    assert_eq!(answer["columnDefinitions"][1]["type"], "date");
    assert_eq!(
        cells(&answer),
        [
            vec![
                json!("vm-1"),
                json!("60s"),
                json!("Running"),
                json!("10.244.0.9"),
                json!("gpu-1"),
                json!("True"),
                json!("False"),
                Value::Null
            ],
            vec![
                json!("vm-2"),
                json!("30s"),
                json!("Scheduling"),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null
            ],
        ]
    );

    let vm =
        json!({"metadata": {"name": "vm-1", "creationTimestamp": CREATED}, "status": {"printableStatus": "Stopped"}});
    let vms = table::table(row("kubevirt.io", "v1", "virtualmachines"), &[&vm], at(CREATED), &options());
    assert_eq!(names(&columns(&vms)), ["Name", "Age", "Status", "Ready"]);
    assert_eq!(cells(&vms)[0], [json!("vm-1"), json!("0s"), json!("Stopped"), Value::Null]);
}

/// `meta.k8s.io/v1` Table, field for field (k8s-openapi has no Table type): unknown fields are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct MetaTable {
    kind: String,
    api_version: String,
    metadata: ListMeta,
    column_definitions: Vec<ColumnDefinition>,
    rows: Vec<TableRow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ListMeta {
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    remaining_item_count: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ColumnDefinition {
    name: String,
    #[serde(rename = "type")]
    type_: String,
    format: String,
    description: String,
    priority: i32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct TableRow {
    cells: Vec<Value>,
    conditions: Option<Vec<Value>>,
    object: Value,
}

#[test]
fn a_list_answer_has_the_tables_exact_shape_and_its_pages_metadata() {
    let configmap = json!({"metadata": {"name": "settings", "namespace": "cozy", "resourceVersion": "41",
                                        "creationTimestamp": CREATED},
                           "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    let page = Page { revision: 42, items: vec![Arc::new(configmap.clone())], continue_token: Some("token".into()) };
    let answer = table::of_page(row("", "v1", "configmaps"), &page, at("2027-01-15T08:00:05Z"), &options());
    let parsed: MetaTable = serde_json::from_value(answer.clone()).unwrap();
    assert_eq!((parsed.kind.as_str(), parsed.api_version.as_str()), ("Table", "meta.k8s.io/v1"));
    assert_eq!(parsed.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(parsed.metadata.continue_token.as_deref(), Some("token"));
    assert_eq!(parsed.column_definitions.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["Name", "Data", "Age"]);
    assert_eq!(parsed.rows[0].cells, [json!("settings"), json!(3), json!("5s")]);
    // includeObject's default: the metadata, as a PartialObjectMetadata.
    assert_eq!(
        parsed.rows[0].object,
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": configmap["metadata"]})
    );

    let whole = TableOptions { include: IncludeObject::Object, ..options() };
    let answer = table::of_page(row("", "v1", "configmaps"), &page, at(CREATED), &whole);
    assert_eq!(answer["rows"][0]["object"], configmap);
    let bare = TableOptions { include: IncludeObject::None, version: TableVersion::V1beta1, no_headers: false };
    let answer = table::of_page(row("", "v1", "configmaps"), &page, at(CREATED), &bare);
    assert_eq!(answer["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(answer["rows"][0]["object"], Value::Null);
    let _: MetaTable = serde_json::from_value(answer).unwrap();
}

#[test]
fn a_watch_event_is_a_table_of_one_row_and_later_ones_carry_no_headers() {
    let namespace = json!({"metadata": {"name": "tenant", "resourceVersion": "9", "creationTimestamp": CREATED},
                           "status": {"phase": "Active"}});
    let namespaces = row("", "v1", "namespaces");
    let first = table::of_object(namespaces, &namespace, at(CREATED), &options());
    assert_eq!(first["metadata"], json!({"resourceVersion": "9"}));
    assert_eq!(names(&columns(&first)), ["Name", "Status", "Age"]);
    assert_eq!(cells(&first), [vec![json!("tenant"), json!("Active"), json!("0s")]]);
    let later = table::of_object(namespaces, &namespace, at(CREATED), &TableOptions { no_headers: true, ..options() });
    assert_eq!(later["columnDefinitions"], json!([]));
    assert_eq!(cells(&later), cells(&first));
    let _: MetaTable = serde_json::from_value(later).unwrap();
}

#[test]
fn other_built_in_kinds_print_their_printers_columns_or_name_and_age() {
    let now = at("2027-01-15T08:10:00Z");
    let secret = json!({"metadata": {"name": "tls", "creationTimestamp": CREATED}, "type": "kubernetes.io/tls",
                        "data": {"tls.crt": "", "tls.key": ""}});
    let answer = table::table(row("", "v1", "secrets"), &[&secret], now, &options());
    assert_eq!(cells(&answer)[0], [json!("tls"), json!("kubernetes.io/tls"), json!(2), json!("10m")]);

    let event = json!({
        "metadata": {"name": "c1.1"}, "type": "Warning", "reason": "NoCapacity", "message": " no node fits \n",
        "involvedObject": {"kind": "GPUClaim", "name": "c1"}, "source": {"component": "gpuclaim-controller"},
        "firstTimestamp": CREATED, "lastTimestamp": "2027-01-15T08:09:00Z", "count": 3,
    });
    let answer = table::table(row("", "v1", "events"), &[&event], now, &options());
    assert_eq!(
        names(&columns(&answer)),
        ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"]
    );
    assert_eq!(
        cells(&answer)[0],
        [
            json!("60s"),
            json!("Warning"),
            json!("NoCapacity"),
            json!("gpuclaim/c1"),
            json!(""),
            json!("gpuclaim-controller"),
            json!("no node fits"),
            json!("10m"),
            json!(3),
            json!("c1.1")
        ]
    );

    let deployment = json!({"metadata": {"name": "controller", "creationTimestamp": CREATED},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "gpuclaim"}},
                 "template": {"spec": {"containers": [{"name": "controller", "image": "gpuclaim:1"}]}}},
        "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1}});
    let answer = table::table(row("apps", "v1", "deployments"), &[&deployment], now, &options());
    assert_eq!(
        cells(&answer)[0],
        [
            json!("controller"),
            json!("1/2"),
            json!(2),
            json!(1),
            json!("10m"),
            json!("controller"),
            json!("gpuclaim:1"),
            json!("app=gpuclaim")
        ]
    );

    let service = json!({"metadata": {"name": "webhook", "creationTimestamp": CREATED},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 443, "protocol": "TCP"}],
                 "selector": {"app": "gpuclaim"}}});
    let answer = table::table(row("", "v1", "services"), &[&service], now, &options());
    assert_eq!(
        cells(&answer)[0],
        [
            json!("webhook"),
            json!("ClusterIP"),
            json!("10.96.0.10"),
            json!("<none>"),
            json!("443/TCP"),
            json!("10m"),
            json!("app=gpuclaim")
        ]
    );

    let crd = serde_json::to_value(GPUClaim::crd()).unwrap();
    let mut crd = crd;
    crd["metadata"]["creationTimestamp"] = CREATED.into();
    let answer = table::table(row("apiextensions.k8s.io", "v1", "customresourcedefinitions"), &[&crd], now, &options());
    assert_eq!(names(&columns(&answer)), ["Name", "Created At"]);
    assert_eq!(cells(&answer)[0], [json!("gpuclaims.gpu.cozystack.io"), json!(CREATED)]);

    let class = json!({"metadata": {"name": "fast", "creationTimestamp": CREATED}});
    let answer = table::table(row("storage.k8s.io", "v1", "storageclasses"), &[&class], now, &options());
    assert_eq!(names(&columns(&answer)), ["Name", "Age"]);
    assert_eq!(cells(&answer)[0], [json!("fast"), json!("10m")]);
}

#[test]
fn every_custom_row_has_exactly_one_crd_with_its_names() {
    let all = crds::builtin();
    let custom: Vec<&Resource> = RESOURCES.iter().filter(|row| row.is_custom()).collect();
    assert_eq!(all.len(), custom.len());
    for resource in custom {
        let matching: Vec<&Value> = all
            .iter()
            .filter(|crd| crd["spec"]["group"] == resource.group && crd["spec"]["names"]["plural"] == resource.plural)
            .collect();
        assert_eq!(matching.len(), 1, "{}", resource.qualified());
        let crd = matching[0];
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["metadata"]["name"], resource.qualified());
        let names = &crd["spec"]["names"];
        assert_eq!(names["kind"], resource.kind);
        assert_eq!(names["singular"], resource.singular);
        // kube-derive leaves `listKind` to the API server's defaulting (`<kind>List`).
        if let Some(list_kind) = names.get("listKind") {
            assert_eq!(list_kind, &json!(resource.list_kind()));
        }
        let listed = |field: &str| -> Vec<String> {
            names.get(field).map(|list| serde_json::from_value(list.clone()).unwrap()).unwrap_or_default()
        };
        assert_eq!(listed("shortNames"), resource.short_names, "{}", resource.plural);
        assert_eq!(listed("categories"), resource.categories, "{}", resource.plural);
        assert_eq!(crd["spec"]["scope"], resource.scope());
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let served: Vec<&Value> = versions.iter().filter(|v| v["served"] == true && v["storage"] == true).collect();
        assert_eq!(served.len(), 1, "{}", resource.plural);
        assert_eq!(served[0]["name"], resource.version);
        assert_eq!(served[0]["subresources"]["status"].is_object(), resource.subresource("status").is_some());
        // Every CRD reads back as k8s-openapi's type.
        let _: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_json::from_value(crd.clone()).unwrap();
    }
    let ours: BTreeMap<String, Value> = [GPUClass::crd(), GPUClaim::crd(), GPUUsage::crd()]
        .into_iter()
        .map(|crd| (crd.metadata.name.clone().unwrap(), serde_json::to_value(crd).unwrap()))
        .collect();
    for (name, crd) in &ours {
        let served = all.iter().find(|served| served["metadata"]["name"] == name.as_str()).unwrap();
        assert_eq!(served, crd, "ours are exactly what `gpuclaim crds` prints");
    }
}

#[test]
fn printer_columns_are_the_crds() {
    let vms = crds::printer_columns(row("kubevirt.io", "v1", "virtualmachines"));
    assert_eq!(vms[2]["jsonPath"], ".status.conditions[?(@.type=='Ready')].status");
    let migrations = crds::printer_columns(row("kubevirt.io", "v1", "virtualmachineinstancemigrations"));
    assert_eq!(migrations.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["Phase", "VMI"]);
    let certificates = crds::printer_columns(row("cert-manager.io", "v1", "certificates"));
    assert_eq!(
        certificates.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["Ready", "Secret", "Issuer", "Status", "Age"]
    );
    let issuers = crds::printer_columns(row("cert-manager.io", "v1", "issuers"));
    assert_eq!(issuers.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["Ready", "Status", "Age"]);
    assert!(crds::printer_columns(row("", "v1", "pods")).is_empty());

    let certificate = json!({"metadata": {"name": "webhook", "creationTimestamp": CREATED},
        "spec": {"secretName": "webhook-tls", "issuerRef": {"name": "selfsigned"}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "message": "Certificate is up to date"}]}});
    let answer = table::table(row("cert-manager.io", "v1", "certificates"), &[&certificate], at(CREATED), &options());
    assert_eq!(
        cells(&answer)[0],
        [
            json!("webhook"),
            json!("True"),
            json!("webhook-tls"),
            json!("selfsigned"),
            json!("Certificate is up to date"),
            json!("0s")
        ]
    );
}

#[test]
fn ages_in_the_future_are_invalid_and_missing_ones_unknown() {
    let lease = |name: &str, created: Option<&str>| {
        let mut lease = json!({"metadata": {"name": name}, "spec": {"holderIdentity": "controller-0"}});
        if let Some(created) = created {
            lease["metadata"]["creationTimestamp"] = created.into();
        }
        lease
    };
    let (skewed, ahead, unknown) = (
        lease("skewed", Some("2027-01-15T08:00:01Z")),
        lease("ahead", Some("2027-01-15T08:00:02Z")),
        lease("none", None),
    );
    let answer =
        table::table(row("coordination.k8s.io", "v1", "leases"), &[&skewed, &ahead, &unknown], at(CREATED), &options());
    assert_eq!(names(&columns(&answer)), ["Name", "Holder", "Age"]);
    assert_eq!(
        cells(&answer),
        [
            vec![json!("skewed"), json!("controller-0"), json!("0s")],
            vec![json!("ahead"), json!("controller-0"), json!("<invalid>")],
            vec![json!("none"), json!("controller-0"), json!("<unknown>")],
        ]
    );
}

#[test]
fn a_crd_that_lists_no_columns_prints_name_and_age() {
    // KubeVirt's own operator CRD: custom (its group is), but the twin pre-creates no CRD for it, so it lists none.
    let kubevirts = Resource {
        group: "kubevirt.io",
        version: "v1",
        plural: "kubevirts",
        singular: "kubevirt",
        kind: "KubeVirt",
        short_names: &[],
        categories: &[],
        namespaced: true,
        verbs: &[],
        subresources: &[],
        field_labels: &[],
        storage: resources::Storage::Generic,
    };
    assert!(kubevirts.is_custom() && crds::printer_columns(&kubevirts).is_empty());
    let object = json!({"metadata": {"name": "kubevirt", "creationTimestamp": CREATED}});
    let answer = table::table(&kubevirts, &[&object], at("2027-01-15T08:00:42Z"), &options());
    assert_eq!(names(&columns(&answer)), ["Name", "Age"]);
    assert_eq!(answer["columnDefinitions"][1]["type"], "date");
    assert_eq!(cells(&answer), [vec![json!("kubevirt"), json!("42s")]]);
}
