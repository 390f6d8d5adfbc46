//! The twin's compact objects as the API server serves them (JSON), for the rules admission evaluates over them.
//!
//! Only what the compact model holds is there: the twin keeps no deletion time (a deleting claim's
//! `deletionTimestamp` is its creation time), nor labels a claim's template mark does not make.

use std::borrow::Cow;
use std::collections::BTreeMap;

use gpuclaim_engine::api::VmiRef;
use gpuclaim_engine::keys::{self, kubevirt};
use gpuclaim_engine::model::{Claim, Pod, Usage, Vmi};
use serde_json::{Map, Value, json};

use super::request::Served;

fn metadata(namespace: &str, name: &str, uid: &str, version: &str) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    if !namespace.is_empty() {
        metadata.insert("namespace".into(), namespace.into());
    }
    if !uid.is_empty() {
        metadata.insert("uid".into(), uid.into());
    }
    if !version.is_empty() {
        metadata.insert("resourceVersion".into(), version.into());
    }
    metadata
}

fn owner(vmi: &VmiRef) -> Value {
    json!([{
        "apiVersion": kubevirt::API_VERSION,
        "kind": kubevirt::KIND_VMI,
        "name": vmi.name,
        "uid": vmi.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

fn labelled(metadata: &mut Map<String, Value>, key: &str, map: &BTreeMap<String, String>) {
    if !map.is_empty() {
        metadata.insert(key.into(), json!(map));
    }
}

/// A claim as served, with the labels its template mark makes (made only when read: most claim writes are the
/// controller's, which no rule reads).
pub struct ServedClaim<'a> {
    claim: &'a Claim,
}

impl<'a> ServedClaim<'a> {
    pub fn new(claim: &'a Claim) -> Self {
        ServedClaim { claim }
    }

    fn made_labels(&self) -> BTreeMap<String, String> {
        match self.claim.template {
            true => BTreeMap::from([(keys::LABEL_TEMPLATE_CLAIM.to_owned(), keys::TRUE.to_owned())]),
            false => BTreeMap::new(),
        }
    }
}

impl Served for ServedClaim<'_> {
    fn json(&self) -> Value {
        let claim = self.claim;
        let mut meta = metadata(&claim.namespace, &claim.name, &claim.uid, &claim.resource_version);
        meta.insert("creationTimestamp".into(), claim.created.to_string().into());
        labelled(&mut meta, "labels", &self.made_labels());
        if claim.finalizer {
            meta.insert("finalizers".into(), json!([keys::FINALIZER_RELEASE]));
        }
        if claim.deleting {
            meta.insert("deletionTimestamp".into(), claim.created.to_string().into());
        }
        if let Some(vmi) = &claim.owner_vmi {
            meta.insert("ownerReferences".into(), owner(vmi));
        }
        let mut status = Map::new();
        status.insert("phase".into(), json!(claim.phase));
        if let Some(node) = &claim.node {
            status.insert("nodeName".into(), node.as_str().into());
        }
        if let Some(vmi) = &claim.attached_to {
            status.insert("attachedTo".into(), json!(vmi));
        }
        if let Some(pending) = &claim.pending {
            let condition = json!({"type": keys::CONDITION_BOUND, "status": "False", "reason": pending.reason, "message": pending.message});
            status.insert("conditions".into(), json!([condition]));
        }
        json!({
            "apiVersion": keys::API_VERSION,
            "kind": keys::KIND_CLAIM,
            "metadata": meta,
            "spec": {"className": claim.class, "count": claim.count},
            "status": status,
        })
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Owned(self.made_labels())
    }
}

impl Served for Usage {
    fn json(&self) -> Value {
        let mut meta = metadata(&self.namespace, &self.name, "", &self.resource_version);
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": keys::API_VERSION, "kind": keys::KIND_CLAIM, "name": self.claim, "uid": self.claim_uid}]),
        );
        let mut spec = json!({
            "claim": self.claim,
            "className": self.class,
            "resourceName": self.resource_name,
            "count": self.count,
            "vmi": self.vmi,
            "node": self.node,
            "startTime": self.start.to_string(),
        });
        if let Some(end) = &self.end {
            spec["endTime"] = end.to_string().into();
        }
        json!({"apiVersion": keys::API_VERSION, "kind": keys::KIND_USAGE, "metadata": meta, "spec": spec})
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Owned(BTreeMap::new())
    }
}

impl Served for Pod {
    fn json(&self) -> Value {
        let mut meta = metadata(&self.namespace, &self.name, &self.uid, &self.resource_version);
        labelled(&mut meta, "labels", &self.labels);
        labelled(&mut meta, "annotations", &self.annotations);
        if let Some(vmi) = &self.owner_vmi {
            meta.insert("ownerReferences".into(), owner(vmi));
        }
        let mut spec = Map::new();
        if !self.scheduling_gates.is_empty() {
            let gates: Vec<Value> = self.scheduling_gates.iter().map(|gate| json!({"name": gate})).collect();
            spec.insert("schedulingGates".into(), gates.into());
        }
        if !self.node_selector.is_empty() {
            spec.insert("nodeSelector".into(), json!(*self.node_selector));
        }
        if let Some(node) = &self.node_name {
            spec.insert("nodeName".into(), node.as_str().into());
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": spec,
            "status": {"phase": format!("{:?}", self.phase)},
        })
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Borrowed(&self.labels)
    }
}

impl Served for Vmi {
    fn json(&self) -> Value {
        let mut meta = metadata(&self.namespace, &self.name, &self.uid, &self.resource_version);
        labelled(&mut meta, "labels", &self.labels);
        labelled(&mut meta, "annotations", &self.annotations);
        let gpus: Vec<Value> =
            self.gpus.iter().map(|gpu| json!({"name": gpu.name, "deviceName": gpu.device_name})).collect();
        let mut status = json!({"phase": format!("{:?}", self.phase)});
        if let Some(node) = &self.node_name {
            status["nodeName"] = node.as_str().into();
        }
        json!({
            "apiVersion": kubevirt::API_VERSION,
            "kind": kubevirt::KIND_VMI,
            "metadata": meta,
            "spec": {"domain": {"devices": {"gpus": gpus}}},
            "status": status,
        })
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Borrowed(&self.labels)
    }
}

/// A tenant's namespace: its name and the entitlement label the platform sets.
pub struct ServedNamespace {
    pub name: String,
    labels: BTreeMap<String, String>,
}

impl ServedNamespace {
    pub fn new(name: &str, vgpu_entitled: bool) -> Self {
        let mut labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), name.to_owned())]);
        if vgpu_entitled {
            labels.insert(keys::LABEL_VGPU_ENTITLED.to_owned(), keys::TRUE.to_owned());
        }
        ServedNamespace { name: name.to_owned(), labels }
    }
}

impl Served for ServedNamespace {
    fn json(&self) -> Value {
        let mut meta = metadata("", &self.name, "", "");
        labelled(&mut meta, "labels", &self.labels);
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Borrowed(&self.labels)
    }
}
