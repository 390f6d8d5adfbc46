//! The Table format `kubectl get` asks for, as the API server answers it: column definitions and one row of cells
//! per object, ages counted from the twin's virtual now.
//!
//! kubectl asks for a Table on every get, list and watch (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io,
//! ...`; [`wants_table`]); the answer's Content-Type names the Table's version ([`TableVersion::content_type`]).
//! The API server prints with its built-in printers (k8s.io/kubernetes `pkg/printers/internalversion`) for built-in
//! kinds and with the CRD's `additionalPrinterColumns` for custom resources (apiextensions-apiserver
//! `tableconvertor`). It always prints wide: the cells of priority-1 columns are there, and kubectl shows them with
//! `-o wide`. Ages use apimachinery's `duration.HumanDuration` ([`human_duration`]) against the twin's clock, not the
//! wall clock: the twin's objects carry virtual timestamps and time runs at `--speed`, so kubectl's own ages
//! (a plain list's fallback) would read `<invalid>`.
//!
//! A watch asked for a Table is sent, for each event, a Table of the one object; the first carries the column
//! definitions and later ones none (the API server's watch encoder sets `noHeaders` after the first event; it
//! writes them as `null`, the twin as `[]`, which every client reads the same). `Status` objects (an `ERROR`
//! event) are sent as they are.
//!
//! Printers here: pods, nodes, namespaces, configmaps, secrets, core events, services, deployments, leases, service
//! accounts, role bindings, webhook configurations, and `NAME CREATED AT` (the API server's default convertor) for
//! roles, cluster roles and CRDs. Any other built-in resource prints `NAME AGE`.
//!
//! ```
//! use gpuclaim_sim::served::{resources, table};
//! use serde_json::json;
//!
//! let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,\
//!               application/json";
//! let version = table::wants_table(accept).unwrap();
//! let pods = resources::find("", "v1", "pods").unwrap();
//! let pod = json!({"metadata": {"name": "p1", "creationTimestamp": "2027-01-15T08:00:00Z"},
//!                  "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}});
//! let now = "2027-01-15T08:03:02Z".parse().unwrap();
//! let options = table::TableOptions { version, ..Default::default() };
//! let answer = table::table(pods, &[&pod], now, &options);
//! let cells = answer["rows"][0]["cells"].as_array().unwrap();
//! assert_eq!(cells[..5], [json!("p1"), json!("0/1"), json!("Pending"), json!("0"), json!("3m2s")]);
//! ```

use gpuclaim_engine::model::Time;
use k8s_openapi::jiff::SignedDuration;
use serde_json::{Value, json};

use super::crds;
use super::list::Page;
use super::media::{self, MediaRange};
use super::resources::Resource;

/// The Content-Type of a `meta.k8s.io/v1` Table answer.
pub const TABLE_CONTENT_TYPE_V1: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
/// The Content-Type of a `meta.k8s.io/v1beta1` Table answer.
pub const TABLE_CONTENT_TYPE_V1BETA1: &str = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";

/// The versions of `meta.k8s.io` a Table is served in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableVersion {
    #[default]
    V1,
    V1beta1,
}

impl TableVersion {
    /// The `apiVersion` the Table and its rows' metadata objects carry.
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }

    /// The Content-Type of the answer.
    pub fn content_type(self) -> &'static str {
        match self {
            TableVersion::V1 => TABLE_CONTENT_TYPE_V1,
            TableVersion::V1beta1 => TABLE_CONTENT_TYPE_V1BETA1,
        }
    }
}

/// What a row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object (`"object": null`).
    None,
    /// The object's metadata, as a `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

/// A Table request the API server refuses (400 `BadRequest`, with this text as its message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error(
        "Unable to convert to Table as requested: includeObject: Invalid value: {0:?}: must be 'Metadata', 'Object', \
         'None', or empty"
    )]
    IncludeObject(String),
}

/// How a Table is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    pub version: TableVersion,
    pub include: IncludeObject,
    /// Leave the column definitions out (a watch's events after the first).
    pub no_headers: bool,
}

/// The Table version an Accept header asks for, as the API server negotiates it: the media ranges are taken by
/// descending `q` (stable), and the first one it can answer decides. `application/json;as=Table;g=meta.k8s.io` with
/// `v=v1` or `v=v1beta1` is a Table; `application/json` (or `*/*`, `application/*`) without `as`, `g` and `v` is the
/// plain object or list (`None`); other ranges (protobuf, YAML, other conversions) are skipped. No range it can
/// answer also reads `None`: the caller answers plain JSON.
pub fn wants_table(accept: &str) -> Option<TableVersion> {
    let ranges = media::ranges(accept);
    match ranges.iter().find_map(answer)? {
        Answer::Table(version) => Some(version),
        Answer::Plain => None,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Plain,
    Table(TableVersion),
}

/// What the server answers `range` with (`None`: not this range).
fn answer(range: &MediaRange<'_>) -> Option<Answer> {
    if !range.takes_json() {
        return None;
    }
    match (range.parameter("as"), range.parameter("g"), range.parameter("v")) {
        (None, None, None) => Some(Answer::Plain),
        (Some("Table"), Some("meta.k8s.io"), Some("v1")) if range.is_json() => Some(Answer::Table(TableVersion::V1)),
        (Some("Table"), Some("meta.k8s.io"), Some("v1beta1")) if range.is_json() => {
            Some(Answer::Table(TableVersion::V1beta1))
        }
        _ => None,
    }
}

/// The `includeObject` query parameter: absent or empty is `Metadata`.
pub fn include_object(query_value: Option<&str>) -> Result<IncludeObject, TableError> {
    match query_value.unwrap_or_default() {
        "" | "Metadata" => Ok(IncludeObject::Metadata),
        "Object" => Ok(IncludeObject::Object),
        "None" => Ok(IncludeObject::None),
        other => Err(TableError::IncludeObject(other.to_owned())),
    }
}

/// The Table of `objects` (all of `resource`) at `now`, with empty list metadata: see [`of_page`] and [`of_object`]
/// for the answers to a list and to a get or a watch event.
pub fn table(resource: &Resource, objects: &[&Value], now: Time, options: &TableOptions) -> Value {
    let printer = Printer::of(resource);
    let columns: Vec<Value> = match options.no_headers {
        true => Vec::new(),
        false => printer.columns(),
    };
    let rows: Vec<Value> = objects.iter().map(|object| row(&printer, object, now, options)).collect();
    json!({
        "kind": "Table",
        "apiVersion": options.version.api_version(),
        "metadata": {},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// The Table answering a list: the page's objects, its revision and its continue token.
pub fn of_page(resource: &Resource, page: &Page, now: Time, options: &TableOptions) -> Value {
    let objects: Vec<&Value> = page.items.iter().map(|item| item.as_ref()).collect();
    let mut answer = table(resource, &objects, now, options);
    answer["metadata"]["resourceVersion"] = page.revision.to_string().into();
    if let Some(token) = &page.continue_token {
        answer["metadata"]["continue"] = token.clone().into();
    }
    answer
}

/// The Table answering a get, or sent as a watch event's object: the one object, and its resourceVersion.
pub fn of_object(resource: &Resource, object: &Value, now: Time, options: &TableOptions) -> Value {
    let mut answer = table(resource, &[object], now, options);
    if let Some(version) = object.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
        answer["metadata"]["resourceVersion"] = version.into();
    }
    answer
}

fn row(printer: &Printer, object: &Value, now: Time, options: &TableOptions) -> Value {
    let (cells, conditions) = printer.cells(object, now);
    let embedded = match options.include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => object.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": options.version.api_version(),
            "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    };
    let mut row = json!({"cells": cells, "object": embedded});
    if let Some(conditions) = conditions {
        row["conditions"] = conditions;
    }
    row
}

/// apimachinery's `duration.HumanDuration`: about two significant figures (`45s`, `3m2s`, `65m`, `3h4m`, `2d3h`,
/// `8d`, `3y45d`, `9y`). Less than two seconds in the future reads `0s` (clock skew); further is `<invalid>`.
pub fn human_duration(elapsed: SignedDuration) -> String {
    let seconds = elapsed.as_secs();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return with_rest(minutes, "m", seconds % 60, "s");
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with_rest(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    if hours < 24 * 365 * 8 {
        return with_rest(days / 365, "y", days % 365, "d");
    }
    format!("{}y", days / 365)
}

/// `5m` or `5m2s`: the rest is written only when it is not zero.
fn with_rest(whole: i64, unit: &str, rest: i64, rest_unit: &str) -> String {
    match rest {
        0 => format!("{whole}{unit}"),
        rest => format!("{whole}{unit}{rest}{rest_unit}"),
    }
}

/// A timestamp's age at `now`, as the printers write it: `<unknown>` when there is none.
fn age(now: Time, timestamp: Option<&str>) -> String {
    match timestamp.and_then(|text| text.parse::<Time>().ok()) {
        Some(at) => human_duration(now.duration_since(at)),
        None => "<unknown>".to_owned(),
    }
}

/// An object's age: from `metadata.creationTimestamp`.
fn object_age(object: &Value, now: Time) -> String {
    age(now, text(object, "/metadata/creationTimestamp"))
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str).filter(|text| !text.is_empty())
}

fn items<'a>(object: &'a Value, pointer: &str) -> &'a [Value] {
    object.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The number of entries of a map or a list field (`data`, `webhooks`).
fn entries(object: &Value, pointer: &str) -> i64 {
    let count = match object.pointer(pointer) {
        Some(Value::Object(map)) => map.len(),
        Some(Value::Array(list)) => list.len(),
        _ => 0,
    };
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn name(object: &Value) -> Value {
    text(object, "/metadata/name").unwrap_or_default().into()
}

/// The status of the condition of `type_` in the list at `pointer`.
fn condition<'a>(object: &'a Value, pointer: &str, type_: &str) -> Option<&'a Value> {
    items(object, pointer).iter().find(|condition| condition.get("type").and_then(Value::as_str) == Some(type_))
}

fn condition_true(object: &Value, type_: &str) -> bool {
    condition(object, "/status/conditions", type_).and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True")
}

/// One column definition of a built-in printer.
struct Definition {
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    description: &'static str,
    priority: u32,
}

const fn def(name: &'static str, description: &'static str) -> Definition {
    Definition { name, type_: "string", format: "", description, priority: 0 }
}

const fn wide(name: &'static str, description: &'static str) -> Definition {
    Definition { priority: 1, ..def(name, description) }
}

const fn typed(name: &'static str, type_: &'static str, description: &'static str) -> Definition {
    Definition { type_, ..def(name, description) }
}

/// ObjectMeta's `name` doc, the description of every Name column.
const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some \
     resources may allow a client to request the generation of a name automatically. Name is primarily intended for \
     creation idempotence and configuration definition. Cannot be updated. More info: \
     https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
/// ObjectMeta's `creationTimestamp` doc, the description of every Age column.
const CREATED_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was \
     created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set \
     this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for \
     lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

const NAME: Definition = Definition { format: "name", ..def("Name", NAME_DOC) };
const AGE: Definition = def("Age", CREATED_DOC);

const POD_COLUMNS: &[Definition] = &[
    NAME,
    def("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    def("Status", "The aggregate status of the containers in this pod."),
    def(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in this pod \
         has restarted.",
    ),
    AGE,
    wide("IP", "podIP address allocated to the pod."),
    wide("Node", "NodeName indicates in which node this pod is scheduled."),
    wide("Nominated Node", "nominatedNodeName is set when this pod preempts other pods on the node."),
    wide("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness."),
];
const NODE_COLUMNS: &[Definition] = &[
    NAME,
    def("Status", "The status of the node"),
    def("Roles", "The roles of the node"),
    AGE,
    def("Version", "Kubelet Version reported by the node."),
    wide("Internal-IP", "List of addresses reachable to the node."),
    wide("External-IP", "List of addresses reachable to the node."),
    wide("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    wide("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API."),
];
const NAMESPACE_COLUMNS: &[Definition] = &[NAME, def("Status", "The status of the namespace"), AGE];
const CONFIGMAP_COLUMNS: &[Definition] = &[NAME, def("Data", "Data contains the configuration data."), AGE];
const SECRET_COLUMNS: &[Definition] = &[
    NAME,
    def("Type", "Used to facilitate programmatic handling of secret data."),
    def("Data", "Data contains the secret data."),
    AGE,
];
const EVENT_COLUMNS: &[Definition] = &[
    def("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
    def("Type", "Type of this event (Normal, Warning), new types could be added in the future"),
    def("Reason", "This should be a short, machine understandable string that gives the reason for the transition."),
    def("Object", "The object that this event is about."),
    wide("Subobject", "The field of the object this event is about."),
    wide("Source", "The component reporting this event."),
    def("Message", "A human-readable description of the status of this operation."),
    wide("First Seen", "The time at which the event was first recorded."),
    wide("Count", "The number of times this event has occurred."),
    Definition { format: "name", ..wide("Name", NAME_DOC) },
];
const SERVICE_COLUMNS: &[Definition] = &[
    NAME,
    def("Type", "type determines how the Service is exposed."),
    def("Cluster-IP", "clusterIP is the IP address of the service."),
    def(
        "External-IP",
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic.",
    ),
    def("Port(s)", "The list of ports that are exposed by this service."),
    AGE,
    wide("Selector", "Route service traffic to pods with label keys and values matching this selector."),
];
const DEPLOYMENT_COLUMNS: &[Definition] = &[
    NAME,
    def("Ready", "Number of the pod with ready state"),
    def(
        "Up-to-date",
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
    ),
    def(
        "Available",
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    wide("Containers", "Names of each container in the template."),
    wide("Images", "Images referenced by each container in the template."),
    wide("Selector", "Label selector for pods."),
];
const LEASE_COLUMNS: &[Definition] =
    &[NAME, def("Holder", "holderIdentity contains the identity of the holder of a current lease."), AGE];
const SERVICE_ACCOUNT_COLUMNS: &[Definition] = &[
    NAME,
    def(
        "Secrets",
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are \
         allowed to use.",
    ),
    AGE,
];
const ROLE_BINDING_COLUMNS: &[Definition] = &[
    NAME,
    def("Role", "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace."),
    AGE,
    wide("Users", "Users in the roleBinding"),
    wide("Groups", "Groups in the roleBinding"),
    wide("ServiceAccounts", "ServiceAccounts in the roleBinding"),
];
const WEBHOOK_COLUMNS: &[Definition] = &[
    NAME,
    typed("Webhooks", "integer", "Webhooks is a list of webhooks and the affected resources and operations."),
    AGE,
];
const CREATED_AT_COLUMNS: &[Definition] = &[NAME, typed("Created At", "date", CREATED_DOC)];
const DEFAULT_COLUMNS: &[Definition] = &[NAME, AGE];

/// How one resource's rows are printed.
enum Printer {
    Pod,
    Node,
    Namespace,
    ConfigMap,
    Secret,
    Event,
    Service,
    Deployment,
    Lease,
    ServiceAccount,
    RoleBinding,
    Webhooks,
    /// The API server's default convertor: the name and the creation time as RFC 3339.
    CreatedAt,
    /// Name and age.
    Default,
    /// A CRD's columns after the name.
    Custom(Vec<CustomColumn>),
}

impl Printer {
    fn of(resource: &Resource) -> Printer {
        if resource.is_custom() {
            return Printer::Custom(custom_columns(resource));
        }
        match (resource.group, resource.plural) {
            ("", "pods") => Printer::Pod,
            ("", "nodes") => Printer::Node,
            ("", "namespaces") => Printer::Namespace,
            ("", "configmaps") => Printer::ConfigMap,
            ("", "secrets") => Printer::Secret,
            ("", "events") => Printer::Event,
            ("", "services") => Printer::Service,
            ("", "serviceaccounts") => Printer::ServiceAccount,
            ("apps", "deployments") => Printer::Deployment,
            ("coordination.k8s.io", "leases") => Printer::Lease,
            ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => Printer::RoleBinding,
            ("rbac.authorization.k8s.io", "roles" | "clusterroles") => Printer::CreatedAt,
            ("apiextensions.k8s.io", "customresourcedefinitions") => Printer::CreatedAt,
            ("admissionregistration.k8s.io", "mutatingwebhookconfigurations" | "validatingwebhookconfigurations") => {
                Printer::Webhooks
            }
            _ => Printer::Default,
        }
    }

    fn columns(&self) -> Vec<Value> {
        let definitions = match self {
            Printer::Pod => POD_COLUMNS,
            Printer::Node => NODE_COLUMNS,
            Printer::Namespace => NAMESPACE_COLUMNS,
            Printer::ConfigMap => CONFIGMAP_COLUMNS,
            Printer::Secret => SECRET_COLUMNS,
            Printer::Event => EVENT_COLUMNS,
            Printer::Service => SERVICE_COLUMNS,
            Printer::Deployment => DEPLOYMENT_COLUMNS,
            Printer::Lease => LEASE_COLUMNS,
            Printer::ServiceAccount => SERVICE_ACCOUNT_COLUMNS,
            Printer::RoleBinding => ROLE_BINDING_COLUMNS,
            Printer::Webhooks => WEBHOOK_COLUMNS,
            Printer::CreatedAt => CREATED_AT_COLUMNS,
            Printer::Default => DEFAULT_COLUMNS,
            Printer::Custom(columns) => {
                let mut all = vec![definition_json(&NAME)];
                all.extend(columns.iter().map(|column| column.definition.clone()));
                return all;
            }
        };
        definitions.iter().map(definition_json).collect()
    }

    /// The cells of one object, and the row's conditions (a finished pod's).
    fn cells(&self, object: &Value, now: Time) -> (Vec<Value>, Option<Value>) {
        let age = || Value::from(object_age(object, now));
        let cells = match self {
            Printer::Pod => return pod_cells(object, now),
            Printer::Node => node_cells(object, now),
            Printer::Namespace => {
                vec![name(object), text(object, "/status/phase").unwrap_or_default().into(), age()]
            }
            Printer::ConfigMap => {
                vec![name(object), (entries(object, "/data") + entries(object, "/binaryData")).into(), age()]
            }
            Printer::Secret => {
                vec![
                    name(object),
                    text(object, "/type").unwrap_or_default().into(),
                    entries(object, "/data").into(),
                    age(),
                ]
            }
            Printer::Event => event_cells(object, now),
            Printer::Service => service_cells(object, now),
            Printer::Deployment => deployment_cells(object, now),
            Printer::Lease => {
                vec![name(object), text(object, "/spec/holderIdentity").unwrap_or_default().into(), age()]
            }
            Printer::ServiceAccount => vec![name(object), entries(object, "/secrets").into(), age()],
            Printer::RoleBinding => role_binding_cells(object, now),
            Printer::Webhooks => vec![name(object), entries(object, "/webhooks").into(), age()],
            Printer::CreatedAt => vec![name(object), created_at(object).into()],
            Printer::Default => vec![name(object), age()],
            Printer::Custom(columns) => {
                let mut cells = vec![name(object)];
                cells.extend(columns.iter().map(|column| column.cell(object, now)));
                cells
            }
        };
        (cells, None)
    }
}

fn definition_json(definition: &Definition) -> Value {
    json!({
        "name": definition.name,
        "type": definition.type_,
        "format": definition.format,
        "description": definition.description,
        "priority": definition.priority,
    })
}

/// The creation time in RFC 3339, UTC, as the default convertor writes it (Go's zero time when there is none).
fn created_at(object: &Value) -> String {
    match text(object, "/metadata/creationTimestamp").and_then(|text| text.parse::<Time>().ok()) {
        Some(at) => at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => "0001-01-01T00:00:00Z".to_owned(),
    }
}

/// The pod printer's cells, and the row conditions of a finished pod.
///
/// The printer's reading of container statuses is kept (waiting and terminated reasons, ready running containers,
/// restarts), but for init containers, which the twin's pods never have. The twin's own pods carry no container
/// statuses: a pod without any counts all its containers ready while it is `Running`, as a real pod whose
/// containers started would, rather than the printer's `0/N`.
fn pod_cells(pod: &Value, now: Time) -> (Vec<Value>, Option<Value>) {
    let containers = items(pod, "/spec/containers").len();
    let phase = text(pod, "/status/phase").unwrap_or_default();
    let mut reason = text(pod, "/status/reason").unwrap_or(phase).to_owned();
    let gated = items(pod, "/status/conditions").iter().any(|condition| {
        condition.get("type").and_then(Value::as_str) == Some("PodScheduled")
            && condition.get("reason").and_then(Value::as_str) == Some("SchedulingGated")
    });
    if gated {
        reason = "SchedulingGated".to_owned();
    }
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let mut last_restart: Option<Time> = None;
    match pod.pointer("/status/containerStatuses").and_then(Value::as_array) {
        None => {
            if phase == "Running" {
                ready = containers;
            }
        }
        Some(statuses) => {
            let mut running = false;
            let mut error_reason = None;
            for status in statuses.iter().rev() {
                restarts += status.get("restartCount").and_then(Value::as_i64).unwrap_or_default();
                let finished = text(status, "/lastState/terminated/finishedAt").and_then(|at| at.parse::<Time>().ok());
                last_restart = last_restart.max(finished);
                if let Some(waiting) = text(status, "/state/waiting/reason") {
                    reason = waiting.to_owned();
                } else if let Some(terminated) = status.pointer("/state/terminated") {
                    let exit_code = terminated.get("exitCode").and_then(Value::as_i64).unwrap_or_default();
                    let signal = terminated.get("signal").and_then(Value::as_i64).unwrap_or_default();
                    reason = match text(terminated, "/reason") {
                        Some(text) => text.to_owned(),
                        None if signal != 0 => format!("Signal:{signal}"),
                        None => format!("ExitCode:{exit_code}"),
                    };
                    if exit_code != 0 {
                        error_reason = Some(reason.clone());
                    }
                } else if status.get("ready").and_then(Value::as_bool) == Some(true)
                    && status.pointer("/state/running").is_some()
                {
                    running = true;
                    ready += 1;
                }
            }
            if reason == "Completed" {
                if running && condition_true(pod, "Ready") {
                    reason = "Running".to_owned();
                } else if let Some(error) = error_reason {
                    reason = error;
                } else if running {
                    reason = "NotReady".to_owned();
                }
            }
        }
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        if text(pod, "/status/reason") == Some("NodeLost") {
            reason = "Unknown".to_owned();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_owned();
        }
    }
    let restarts_text = match last_restart {
        Some(at) if restarts != 0 => format!("{restarts} ({} ago)", human_duration(now.duration_since(at))),
        _ => restarts.to_string(),
    };
    let ip = items(pod, "/status/podIPs")
        .first()
        .and_then(|first| text(first, "/ip"))
        .or_else(|| text(pod, "/status/podIP"))
        .unwrap_or("<none>");
    let gates = items(pod, "/spec/readinessGates");
    let gates_text = match gates.len() {
        0 => "<none>".to_owned(),
        total => {
            let met = gates
                .iter()
                .filter_map(|gate| gate.get("conditionType").and_then(Value::as_str))
                .filter(|type_| condition_true(pod, type_))
                .count();
            format!("{met}/{total}")
        }
    };
    let cells = vec![
        name(pod),
        format!("{ready}/{containers}").into(),
        reason.into(),
        restarts_text.into(),
        object_age(pod, now).into(),
        ip.into(),
        text(pod, "/spec/nodeName").unwrap_or("<none>").into(),
        text(pod, "/status/nominatedNodeName").unwrap_or("<none>").into(),
        gates_text.into(),
    ];
    let finished = match phase {
        "Succeeded" => Some("The pod has completed successfully."),
        "Failed" => Some("The pod failed."),
        _ => None,
    };
    let conditions =
        finished.map(|message| json!([{"type": "Completed", "status": "True", "reason": phase, "message": message}]));
    (cells, conditions)
}

fn node_cells(node: &Value, now: Time) -> Vec<Value> {
    let mut status: Vec<&str> = Vec::new();
    match condition(node, "/status/conditions", "Ready").and_then(|c| c.get("status")).and_then(Value::as_str) {
        Some("True") => status.push("Ready"),
        Some(_) => status.push("NotReady"),
        None => status.push("Unknown"),
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<&str> = Vec::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (key, value) in labels {
            let role = match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) => role,
                None if key == "kubernetes.io/role" => value.as_str().unwrap_or_default(),
                None => "",
            };
            if !role.is_empty() && !roles.contains(&role) {
                roles.push(role);
            }
        }
    }
    roles.sort_unstable();
    let roles = match roles.is_empty() {
        true => "<none>".to_owned(),
        false => roles.join(","),
    };
    let address = |type_: &str| {
        items(node, "/status/addresses")
            .iter()
            .find(|address| address.get("type").and_then(Value::as_str) == Some(type_))
            .and_then(|address| address.get("address"))
            .and_then(Value::as_str)
            .unwrap_or("<none>")
            .to_owned()
    };
    let info = |field: &str| text(node, &format!("/status/nodeInfo/{field}")).unwrap_or("<unknown>").to_owned();
    vec![
        name(node),
        status.join(",").into(),
        roles.into(),
        object_age(node, now).into(),
        text(node, "/status/nodeInfo/kubeletVersion").unwrap_or_default().into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        info("osImage").into(),
        info("kernelVersion").into(),
        info("containerRuntimeVersion").into(),
    ]
}

fn event_cells(event: &Value, now: Time) -> Vec<Value> {
    let first = match text(event, "/firstTimestamp") {
        Some(at) => age(now, Some(at)),
        None => age(now, text(event, "/eventTime")),
    };
    let mut last = match text(event, "/lastTimestamp") {
        Some(at) => age(now, Some(at)),
        None => first.clone(),
    };
    let mut count = event.get("count").and_then(Value::as_i64).unwrap_or_default();
    if let Some(series) = event.get("series").filter(|series| series.is_object()) {
        last = age(now, text(series, "/lastObservedTime"));
        count = series.get("count").and_then(Value::as_i64).unwrap_or_default();
    } else if count == 0 {
        // A singleton event of the events.k8s.io API has no count.
        count = 1;
    }
    let kind = text(event, "/involvedObject/kind").unwrap_or_default().to_lowercase();
    let target = match text(event, "/involvedObject/name") {
        Some(involved) => format!("{kind}/{involved}"),
        None => kind,
    };
    let component = text(event, "/source/component").or_else(|| text(event, "/reportingComponent")).unwrap_or_default();
    let source = match text(event, "/source/host").or_else(|| text(event, "/reportingInstance")) {
        Some(instance) => format!("{component}, {instance}"),
        None => component.to_owned(),
    };
    vec![
        last.into(),
        text(event, "/type").unwrap_or_default().into(),
        text(event, "/reason").unwrap_or_default().into(),
        target.into(),
        text(event, "/involvedObject/fieldPath").unwrap_or_default().into(),
        source.into(),
        text(event, "/message").unwrap_or_default().trim().into(),
        first.into(),
        count.into(),
        name(event),
    ]
}

fn service_cells(service: &Value, now: Time) -> Vec<Value> {
    let type_ = text(service, "/spec/type").unwrap_or("ClusterIP");
    let cluster_ip = items(service, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .or_else(|| text(service, "/spec/clusterIP"))
        .unwrap_or("<none>");
    let external: Vec<&str> = items(service, "/spec/externalIPs").iter().filter_map(Value::as_str).collect();
    let external_ip = match type_ {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_owned(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let mut all: Vec<&str> = items(service, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|ingress| text(ingress, "/ip").or_else(|| text(ingress, "/hostname")))
                .collect();
            all.extend(&external);
            match all.is_empty() {
                true => "<pending>".to_owned(),
                false => all.join(","),
            }
        }
        "ExternalName" => text(service, "/spec/externalName").unwrap_or_default().to_owned(),
        _ => "<unknown>".to_owned(),
    };
    let ports: Vec<String> = items(service, "/spec/ports")
        .iter()
        .map(|port| {
            let number = port.get("port").and_then(Value::as_i64).unwrap_or_default();
            let protocol = text(port, "/protocol").unwrap_or("TCP");
            match port.get("nodePort").and_then(Value::as_i64).filter(|node_port| *node_port > 0) {
                Some(node_port) => format!("{number}:{node_port}/{protocol}"),
                None => format!("{number}/{protocol}"),
            }
        })
        .collect();
    let ports = match ports.is_empty() {
        true => "<none>".to_owned(),
        false => ports.join(","),
    };
    let selector = labels_text(service.pointer("/spec/selector"));
    vec![
        name(service),
        type_.into(),
        cluster_ip.into(),
        external_ip.into(),
        ports.into(),
        object_age(service, now).into(),
        match selector.is_empty() {
            true => "<none>".into(),
            false => selector.into(),
        },
    ]
}

/// A label map as `labels.FormatLabels` writes it without the `<none>`: `k=v` pairs sorted by key, comma-separated.
fn labels_text(labels: Option<&Value>) -> String {
    let Some(labels) = labels.and_then(Value::as_object) else { return String::new() };
    let mut pairs: Vec<(&String, &str)> =
        labels.iter().map(|(key, value)| (key, value.as_str().unwrap_or_default())).collect();
    // Sorted by key as FormatLabels sorts them, whatever order the map keeps.
    pairs.sort_unstable();
    pairs.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>().join(",")
}

/// A label selector as `metav1.LabelSelectorAsSelector(...).String()` writes it: requirements sorted by key.
fn selector_text(selector: Option<&Value>) -> String {
    let Some(selector) = selector else { return String::new() };
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            requirements.push((key.clone(), format!("{key}={}", value.as_str().unwrap_or_default())));
        }
    }
    for expression in items(selector, "/matchExpressions") {
        let key = text(expression, "/key").unwrap_or_default();
        let mut values: Vec<&str> = items(expression, "/values").iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let written = match text(expression, "/operator").unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key.to_owned(), written));
    }
    requirements.sort();
    requirements.into_iter().map(|(_, written)| written).collect::<Vec<_>>().join(",")
}

fn deployment_cells(deployment: &Value, now: Time) -> Vec<Value> {
    // The API server defaults `spec.replicas` to 1; the generic store keeps what the client sent.
    let desired = deployment.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    let status = |field: &str| deployment.pointer(&format!("/status/{field}")).and_then(Value::as_i64).unwrap_or(0);
    let containers = items(deployment, "/spec/template/spec/containers");
    let joined = |field: &str| {
        containers.iter().map(|container| text(container, field).unwrap_or_default()).collect::<Vec<_>>().join(",")
    };
    vec![
        name(deployment),
        format!("{}/{desired}", status("readyReplicas")).into(),
        status("updatedReplicas").into(),
        status("availableReplicas").into(),
        object_age(deployment, now).into(),
        joined("/name").into(),
        joined("/image").into(),
        selector_text(deployment.pointer("/spec/selector")).into(),
    ]
}

fn role_binding_cells(binding: &Value, now: Time) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        text(binding, "/roleRef/kind").unwrap_or_default(),
        text(binding, "/roleRef/name").unwrap_or_default()
    );
    let (mut users, mut groups, mut accounts) = (Vec::new(), Vec::new(), Vec::new());
    for subject in items(binding, "/subjects") {
        let subject_name = text(subject, "/name").unwrap_or_default();
        match text(subject, "/kind").unwrap_or_default() {
            "User" => users.push(subject_name.to_owned()),
            "Group" => groups.push(subject_name.to_owned()),
            "ServiceAccount" => accounts.push(match text(subject, "/namespace") {
                Some(namespace) => format!("{namespace}/{subject_name}"),
                None => subject_name.to_owned(),
            }),
            _ => {}
        }
    }
    vec![
        name(binding),
        role.into(),
        object_age(binding, now).into(),
        users.join(", ").into(),
        groups.join(", ").into(),
        accounts.join(", ").into(),
    ]
}

/// One printer column of a CRD, with its path parsed.
struct CustomColumn {
    /// As the Table lists it.
    definition: Value,
    type_: String,
    /// `None` when the path is not one the evaluator reads: the cells are `null`.
    path: Option<Vec<Step>>,
}

/// The CRD's columns, or the Age column the API server serves for a CRD that lists none.
fn custom_columns(resource: &Resource) -> Vec<CustomColumn> {
    let mut listed = crds::printer_columns(resource);
    if listed.is_empty() {
        listed.push(json!({"name": "Age", "type": "date", "description": CREATED_DOC,
                           "jsonPath": ".metadata.creationTimestamp"}));
    }
    listed.iter().map(CustomColumn::of).collect()
}

impl CustomColumn {
    fn of(listed: &Value) -> CustomColumn {
        let field = |name: &str| listed.get(name).and_then(Value::as_str).unwrap_or_default();
        let json_path = field("jsonPath");
        let description = match field("description") {
            "" => format!("Custom resource definition column (in JSONPath format): {json_path}"),
            description => description.to_owned(),
        };
        let definition = json!({
            "name": field("name"),
            "type": field("type"),
            "format": field("format"),
            "description": description,
            "priority": listed.get("priority").and_then(Value::as_i64).unwrap_or_default(),
        });
        CustomColumn { definition, type_: field("type").to_owned(), path: parse_path(json_path) }
    }

    /// The cell of `object`, as apiextensions' `tableconvertor` writes it: the first value the path finds, typed by
    /// the column (`null` when there is none or it is not of the column's type).
    fn cell(&self, object: &Value, now: Time) -> Value {
        let Some(path) = &self.path else { return Value::Null };
        let Some(found) = evaluate(path, object).into_iter().next() else { return Value::Null };
        match (self.type_.as_str(), found) {
            (_, Value::Null) => Value::Null,
            // The JSONPath printer writes a scalar as text (objects here as JSON, where Go's writes `map[...]`).
            ("string", Value::String(text)) => text.as_str().into(),
            ("string", other) => other.to_string().into(),
            ("integer", Value::Number(number)) => match number.as_i64() {
                Some(integer) => integer.into(),
                // A float is truncated, as Go's `int64(float64)`.
                None => number.as_f64().map(|float| Value::from(float.trunc() as i64)).unwrap_or_default(),
            },
            ("number", Value::Number(number)) => number.as_f64().map(Value::from).unwrap_or_default(),
            ("boolean", Value::Bool(flag)) => (*flag).into(),
            ("date", Value::String(text)) => match text.as_str() {
                "" | "null" => "<unknown>".into(),
                text => match text.parse::<Time>() {
                    Ok(at) => human_duration(now.duration_since(at)).into(),
                    Err(_) => "<invalid>".into(),
                },
            },
            _ => Value::Null,
        }
    }
}

/// One step of the JSONPath subset printer columns use.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `[0]`.
    Index(usize),
    /// `[*]`: every element or value.
    All,
    /// `[?(@.a.b=='value')]`: the elements whose field at that path is `value`.
    Filter { path: Vec<String>, value: String },
}

/// Parses the subset of Kubernetes JSONPath printer columns use: `.a.b`, `.a[0].b`, `.a['b.c']`, `.a[*]` and the
/// one filter form `[?(@.key=='value')]` (either quote), optionally inside `{}`. Anything else is `None`.
fn parse_path(text: &str) -> Option<Vec<Step>> {
    let text = text.trim();
    let text = text.strip_prefix('{').and_then(|inner| inner.strip_suffix('}')).unwrap_or(text);
    let chars: Vec<char> = text.chars().collect();
    let mut steps = Vec::new();
    let mut at = 0;
    // Every turn consumes at least one character, so the loop ends within `chars.len()` turns.
    while at < chars.len() {
        match chars[at] {
            '.' => {
                let mut field = String::new();
                at += 1;
                while at < chars.len() && chars[at] != '.' && chars[at] != '[' {
                    if chars[at] == '\\' && at + 1 < chars.len() {
                        at += 1;
                    }
                    field.push(chars[at]);
                    at += 1;
                }
                if field.is_empty() {
                    // `..` (recursive descent) is not in the subset; a lone trailing `.` reads nothing.
                    return None;
                }
                steps.push(Step::Field(field));
            }
            '[' => {
                let end = closing_bracket(&chars, at)?;
                let inner: String = chars[at + 1..end].iter().collect();
                steps.push(bracket_step(inner.trim())?);
                at = end + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// The index of the `]` closing the bracket opened at `open`, outside quotes.
fn closing_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut quote = None;
    for (index, &char) in chars.iter().enumerate().skip(open + 1) {
        match (quote, char) {
            (Some(open_quote), char) if char == open_quote => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(char),
            (None, ']') => return Some(index),
            (None, _) => {}
        }
    }
    None
}

fn bracket_step(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Some(filter) = inner.strip_prefix("?(").and_then(|rest| rest.strip_suffix(')')) {
        let (left, right) = filter.split_once("==")?;
        let path: Vec<String> = left.trim().strip_prefix("@.")?.split('.').map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            return None;
        }
        return Some(Step::Filter { path, value: unquote(right.trim()).unwrap_or(right.trim()).to_owned() });
    }
    if let Some(field) = unquote(inner) {
        return Some(Step::Field(field.to_owned()));
    }
    inner.parse().ok().map(Step::Index)
}

/// The text inside `'...'` or `"..."`.
fn unquote(text: &str) -> Option<&str> {
    ['\'', '"'].into_iter().find_map(|quote| text.strip_prefix(quote).and_then(|rest| rest.strip_suffix(quote)))
}

/// Every value `path` finds in `root`, in order (a missing key finds nothing, as the API server allows).
fn evaluate<'a>(path: &[Step], root: &'a Value) -> Vec<&'a Value> {
    let mut current = vec![root];
    for step in path {
        let mut next = Vec::new();
        for value in current {
            match step {
                Step::Field(field) => next.extend(value.as_object().and_then(|object| object.get(field))),
                Step::Index(index) => next.extend(value.as_array().and_then(|list| list.get(*index))),
                Step::All => match value {
                    Value::Array(list) => next.extend(list),
                    Value::Object(object) => next.extend(object.values()),
                    _ => {}
                },
                Step::Filter { path, value: wanted } => {
                    let matching = value.as_array().into_iter().flatten().filter(|element| {
                        let found = path.iter().try_fold(*element, |at, field| at.get(field));
                        match found {
                            Some(Value::String(text)) => text == wanted,
                            Some(Value::Number(number)) => number.to_string() == *wanted,
                            Some(Value::Bool(flag)) => flag.to_string() == *wanted,
                            _ => false,
                        }
                    });
                    next.extend(matching);
                }
            }
        }
        current = next;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_into_the_subset_and_refuse_the_rest() {
        let field = |name: &str| Step::Field(name.to_owned());
        assert_eq!(parse_path(".status.phase"), Some(vec![field("status"), field("phase")]));
        assert_eq!(
            parse_path("{.status.interfaces[0].ipAddress}"),
            Some(vec![field("status"), field("interfaces"), Step::Index(0), field("ipAddress")])
        );
        assert_eq!(
            parse_path(".status.conditions[?(@.type=='Ready')].status"),
            Some(vec![
                field("status"),
                field("conditions"),
                Step::Filter { path: vec!["type".into()], value: "Ready".into() },
                field("status"),
            ])
        );
        assert_eq!(
            parse_path(".metadata.labels['app.kubernetes.io/name']"),
            Some(vec![field("metadata"), field("labels"), field("app.kubernetes.io/name")])
        );
        assert_eq!(parse_path(".metadata.labels.a\\.b"), Some(vec![field("metadata"), field("labels"), field("a.b")]));
        for refused in ["status.phase", "..status", ".a[", ".a[?(@.x>1)]", ".a[x]", ".a."] {
            assert_eq!(parse_path(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_filter_keeps_the_matching_elements() {
        let object = json!({"status": {"conditions": [
            {"type": "Paused", "status": "False"},
            {"type": "Ready", "status": "True"},
        ]}});
        // cert-manager's CRDs write the filter with spaces and double quotes.
        let path = parse_path(".status.conditions[?(@.type == \"Ready\")].status").unwrap();
        assert_eq!(evaluate(&path, &object), vec![&json!("True")]);
        let all = parse_path(".status.conditions[*].type").unwrap();
        assert_eq!(evaluate(&all, &object), vec![&json!("Paused"), &json!("Ready")]);
        let missing = parse_path(".status.conditions[?(@.type=='Gone')].status").unwrap();
        assert!(evaluate(&missing, &object).is_empty());
    }
}
