//! The events the GPU controller records (its `Action::Event`: a claim bound, moved or released, a pod placed or
//! waiting), as the API server serves them: core/v1 Events about the claim or pod, which `kubectl describe` lists
//! under the object. The in-process twin keeps none (nothing reads them); a served one keeps them for clients.

use gpuclaim_engine::controller::{EventKind, ObjectRef};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Name, Time};
use serde_json::{Value, json};

use super::{timestamp, uid_of};

/// One event the controller recorded, with the uid of the object it is about (empty when unknown).
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub kind: EventKind,
    pub object: ObjectRef,
    pub uid: Name,
    pub reason: &'static str,
    pub message: String,
}

/// The component events name as their source, as the live controller's recorder does.
pub const COMPONENT: &str = "gpuclaim";

/// The Event's name: the object's name and the revision it was written at, in hex (as client-go's recorder names
/// events: `<object>.<unique suffix>`).
pub fn name(recorded: &Recorded, revision: u64) -> String {
    format!("{}.{revision:x}", recorded.object.name)
}

/// The core/v1 Event of `recorded`, written at `revision` and `at`.
pub fn render(recorded: &Recorded, revision: u64, at: Time) -> Value {
    let (api_version, kind) = match recorded.kind {
        EventKind::Claim => (keys::API_VERSION, keys::KIND_CLAIM),
        EventKind::Pod => ("v1", "Pod"),
    };
    let name = name(recorded, revision);
    let namespace = recorded.object.namespace.as_str();
    let mut involved =
        json!({"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": recorded.object.name});
    if !recorded.uid.is_empty() {
        involved["uid"] = recorded.uid.as_str().into();
    }
    let time = timestamp(at);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid_of("Event", namespace, &name).as_str(),
            "resourceVersion": revision.to_string(),
            "creationTimestamp": time,
        },
        "involvedObject": involved,
        "reason": recorded.reason,
        "message": recorded.message,
        "type": "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
    })
}
