//! Writes of the kinds the twin models, each mapped onto the API server verb the twin's own actor uses, so a
//! client's write meets the same admission, rules and watch as an actor's, and the world reacts as it would to that
//! actor (plan §11). What a client wrote beside the modelled fields is kept as the object's manifest and served
//! back. A write of a modelled field that no verb changes is refused (422) with a message naming it.
//!
//! | kind | create | update / patch | delete |
//! |---|---|---|---|
//! | GPUClaim | `create_claim` | `update_claim` (spec, the mark, finalizers; `/status`) | `delete_claim` |
//! | GPUClass | `put_class` | `put_class` (status: the controller's) | `delete_class` |
//! | GPUUsage | `create_usage` | `update_usage` | `delete_usage` |
//! | ResourceQuota | `put_quota` | `put_quota` | `delete_quota` |
//! | the settings ConfigMap | `put_settings` | `put_settings` | `put_settings(None)` |
//! | Namespace | `create_namespace` | `label_namespace` (entitlement) | refused: the twin deletes no namespaces |
//! | Node | refused: nodes are the scenario's | labels, taints, `spec.unschedulable` (`kubectl cordon`) | refused |
//! | Pod | `create_pod`, then the scheduler (`pods/binding` for another scheduler's) | labels, annotations, scheduling gates; `/status`: the placement condition | `delete_pod` (a launcher: KubeVirt sees it go) |
//! | VirtualMachineInstance | refused: VMIs come from VirtualMachines | refused | refused (until VirtualMachines are served) |

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
use gpuclaim_engine::controller::Action;
use gpuclaim_engine::controller::runtime::ObjectKey;
use gpuclaim_engine::convert;
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Node, Usage};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::meta::{self, DeleteOptions};
use super::{Refused, Verb, WriteRequest, Written};
use crate::apiserver::objects::uid_of;
use crate::apiserver::{ApiError, Kind};
use crate::served::resource_of;
use crate::served::resources::Resource;
use crate::served::status::{self, Cause};
use crate::world::{Event, World};

/// The scheduler the twin's kube-scheduler is: pods naming another are left to it.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// A modelled field the twin has no verb for: 422, naming it.
fn not_modelled(resource: &Resource, name: &str, field: &str, why: &str) -> Refused {
    status::invalid(resource, name, vec![Cause::new("FieldValueForbidden", why, field)])
}

/// A body read as the kind's typed object, refused as the API server refuses what does not decode.
fn typed<T: DeserializeOwned>(resource: &Resource, object: &Value) -> Result<T, Refused> {
    serde_json::from_value(object.clone()).map_err(|error| {
        let message = format!(
            "{} in version {:?} cannot be handled as a {}: {error}",
            resource.kind, resource.version, resource.kind
        );
        status::bad_request(&message)
    })
}

/// A conversion into the compact model that failed (a fractional GPU budget, a bad quantity): 422, naming the field.
fn unconvertible(resource: &Resource, name: &str, error: convert::ConvertError) -> Refused {
    status::invalid(resource, name, vec![Cause::new("FieldValueInvalid", &error.reason, &error.field)])
}

impl World {
    pub(super) fn modelled_write(
        &mut self,
        kind: Kind,
        request: &WriteRequest,
        warnings: &mut Vec<String>,
    ) -> Result<Written, Refused> {
        let resource = request.resource;
        if kind == Kind::Pod && request.subresource.as_deref() == Some("binding") {
            return self.bind_from_client(request);
        }
        let namespace = request.namespace.clone().unwrap_or_default();
        let key_of = |name: &str| ObjectKey::new(kind, if resource.namespaced { namespace.as_str() } else { "" }, name);
        // The object as it is now, and the one the write proposes.
        let (name, current, mut object) = match request.verb {
            Verb::Create => {
                let (name, object) = self.created_object(request)?;
                if self.api.render(&key_of(&name)).is_some() {
                    return Err(status::already_exists(resource, &name));
                }
                (name, None, object)
            }
            Verb::Update | Verb::Patch | Verb::Delete => {
                let name =
                    request.name.clone().ok_or_else(|| status::bad_request("the name of the object is required"))?;
                let current = self.api.render(&key_of(&name)).ok_or_else(|| status::not_found(resource, &name))?;
                let object = match request.verb {
                    Verb::Patch => super::patched(request, &current)?,
                    Verb::Update => meta::body_object(request)?,
                    _ => current.clone(),
                };
                (name, Some(current), object)
            }
        };
        let key = key_of(&name);
        if let (Some(current), Verb::Update | Verb::Patch) = (&current, request.verb) {
            meta::identity(resource, request, &mut object, "")?;
            meta::check_precondition(resource, &name, &object, current)?;
            meta::keep_system_fields(resource, request.subresource.as_deref(), &mut object, current);
        }
        if request.verb == Verb::Delete {
            let current = current.as_ref().expect("read above");
            DeleteOptions::read(&request.body)?.check(resource, &name, current)?;
            let last = Arc::new(current.clone());
            self.delete_modelled(kind, resource, &namespace, &name)?;
            return Ok(match self.api.render(&key) {
                Some(_) => stored(kind, &namespace, &name, 200),
                None => Written::Gone(last),
            });
        }
        let creating = current.is_none();
        *warnings = meta::check_schema(request, &name, &mut object)?;
        match kind {
            Kind::Claim => self.write_claim(request, &namespace, &name, &object, creating)?,
            Kind::Class => self.write_class(request, &name, &object, creating)?,
            Kind::Usage => self.write_usage(request, &namespace, &name, &object, creating)?,
            Kind::Quota => {
                let budgets = convert::quota_budgets(&typed(resource, &object)?)
                    .map_err(|error| unconvertible(resource, &name, error))?;
                self.api.put_quota(&namespace, &name, budgets);
            }
            Kind::Settings => {
                let data: BTreeMap<String, String> = match object.get("data") {
                    None | Some(Value::Null) => BTreeMap::new(),
                    Some(data) => serde_json::from_value(data.clone()).map_err(|error| {
                        status::bad_request(&format!(
                            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: {error}"
                        ))
                    })?,
                };
                self.api.put_settings(Some(data));
            }
            Kind::Namespace => {
                let entitled = object
                    .pointer(&format!("/metadata/labels/{}", keys::LABEL_VGPU_ENTITLED.replace('/', "~1")))
                    .and_then(Value::as_str)
                    == Some(keys::TRUE);
                let result = match creating {
                    true => self.api.create_namespace(&name, &request.user, entitled).map(drop),
                    false => self.api.label_namespace(&name, &request.user, entitled),
                };
                result.map_err(|error| status::from_api_error(&error, resource, &name))?;
            }
            Kind::Node => self.write_node(resource, &name, &object, creating)?,
            Kind::Pod => self.write_pod(request, &namespace, &name, &object, creating)?,
            Kind::Vmi => {
                let why = "the twin runs the VirtualMachineInstances of VirtualMachines only: write the \
                           VirtualMachine";
                return Err(not_modelled(resource, &name, "spec", why));
            }
        }
        if self.api.render(&key).is_none() {
            // The write took the last finalizer off an object being deleted: it is gone, and the answer is its last
            // state at the deletion's revision, as the API server answers such an update.
            object["metadata"]["resourceVersion"] = self.api.revision().to_string().into();
            return Ok(Written::Gone(Arc::new(object)));
        }
        // What the client wrote beside the modelled fields is the object's manifest.
        let manifests = self.api.manifests_mut().expect("kept while serving");
        let manifest = manifests.entry(key.clone());
        if creating {
            manifest.generation = 1;
        } else if current.as_ref().is_some_and(|current| meta::spec_changed(current, &object)) {
            manifest.generation += 1;
        }
        object.as_object_mut().map(|map| map.remove("status"));
        manifest.json = object;
        let code = if creating { 201 } else { 200 };
        Ok(stored(kind, &namespace, &name, code))
    }

    fn write_claim(
        &mut self,
        request: &WriteRequest,
        namespace: &str,
        name: &str,
        object: &Value,
        creating: bool,
    ) -> Result<(), Refused> {
        let resource = request.resource;
        let mut claim = convert::claim_from_kube(&typed::<GPUClaim>(resource, object)?, namespace);
        let refused = |error: ApiError| status::from_api_error(&error, resource, name);
        if creating {
            let revision = self.api.revision() + 1;
            claim.uid = uid_of(Kind::Claim.name(), namespace, &format!("{name}@{revision}"));
            claim.created = self.time();
            // Status is the controller's: a created claim starts pending, whatever the body says.
            claim.phase = Default::default();
            claim.node = None;
            claim.attached_to = None;
            claim.pending = None;
            claim.deleting = false;
            return self.api.create_claim(claim, &request.user).map(drop).map_err(refused);
        }
        let status_write = request.subresource.as_deref() == Some("status");
        let subresource = if status_write { "status" } else { "" };
        self.api
            .update_claim(namespace, name, subresource, &request.user, |stored| {
                stored.class = claim.class;
                stored.count = claim.count;
                stored.template = claim.template;
                stored.finalizer = claim.finalizer;
                stored.owner_vmi = claim.owner_vmi;
                stored.phase = claim.phase;
                stored.node = claim.node;
                stored.attached_to = claim.attached_to;
                stored.pending = claim.pending;
            })
            .map_err(refused)
    }

    fn write_class(
        &mut self,
        request: &WriteRequest,
        name: &str,
        object: &Value,
        creating: bool,
    ) -> Result<(), Refused> {
        let resource = request.resource;
        let class = convert::class_from_kube(&typed::<GPUClass>(resource, object)?);
        if request.subresource.as_deref() == Some("status") {
            // What the GPU controller publishes, through the verb the twin's own controller uses (RBAC says who).
            let stored = self.api.store().class(name).ok_or_else(|| status::not_found(resource, name))?;
            let precondition = stored.resource_version.as_str().into();
            let action = Action::PublishClass { class: name.to_owned(), precondition, published: class.published };
            let now = self.time();
            let refused = |error: ApiError| status::from_api_error(&error, resource, name);
            return self.api.write(&action, now, &request.user).map(drop).map_err(refused);
        }
        if creating && self.api.store().class(name).is_some() {
            return Err(status::already_exists(resource, name));
        }
        self.api.put_class(class);
        Ok(())
    }

    fn write_usage(
        &mut self,
        request: &WriteRequest,
        namespace: &str,
        name: &str,
        object: &Value,
        creating: bool,
    ) -> Result<(), Refused> {
        let resource = request.resource;
        let usage = convert::usage_from_kube(&typed::<GPUUsage>(resource, object)?, namespace);
        let refused = |error: ApiError| status::from_api_error(&error, resource, name);
        if creating {
            return self.api.create_usage(usage, &request.user).map(drop).map_err(refused);
        }
        self.api
            .update_usage(namespace, name, &request.user, |stored| {
                *stored = Usage { resource_version: stored.resource_version.clone(), ..usage }
            })
            .map_err(refused)
    }

    fn write_node(&mut self, resource: &Resource, name: &str, object: &Value, creating: bool) -> Result<(), Refused> {
        if creating {
            let why = "the twin's nodes are the scenario's (its cluster and its node events)";
            return Err(not_modelled(resource, name, "metadata.name", why));
        }
        let proposed =
            convert::node_from_kube(&typed(resource, object)?).map_err(|error| unconvertible(resource, name, error))?;
        let current = self.api.store().node(name).cloned().ok_or_else(|| status::not_found(resource, name))?;
        let kubelets = Node {
            labels: current.labels.clone(),
            taints: current.taints.clone(),
            unschedulable: current.unschedulable,
            resource_version: current.resource_version.clone(),
            ..proposed.clone()
        };
        if kubelets != current {
            let why = "a node's status (allocatable resources, conditions) is the twin's kubelet's";
            return Err(not_modelled(resource, name, "status", why));
        }
        let cordon = proposed.unschedulable != current.unschedulable;
        let node = Node { labels: proposed.labels, taints: proposed.taints, ..current };
        self.api.put_node(node);
        let result = match cordon {
            // `kubectl cordon`: the operator's verb, as a scenario's cordon event runs it.
            true => self.cordon(name, proposed.unschedulable),
            false => self.scheduler_cluster_changed(),
        };
        result.map_err(status::internal_error)
    }

    fn write_pod(
        &mut self,
        request: &WriteRequest,
        namespace: &str,
        name: &str,
        object: &Value,
        creating: bool,
    ) -> Result<(), Refused> {
        let resource = request.resource;
        let mut pod =
            convert::pod_from_json(object, namespace).map_err(|error| unconvertible(resource, name, error))?;
        let refused = |error: ApiError| status::from_api_error(&error, resource, name);
        if creating {
            if pod.owner_vmi.is_some() {
                let why = "pods controlled by a VirtualMachineInstance are KubeVirt's to create";
                return Err(not_modelled(resource, name, "metadata.ownerReferences", why));
            }
            let revision = self.api.revision() + 1;
            pod.uid = uid_of(Kind::Pod.name(), namespace, &format!("{name}@{revision}"));
            pod.created = self.time();
            pod.node_name = None;
            pod.phase = Default::default();
            pod.waiting = None;
            self.api.create_pod(pod, &request.user).map_err(refused)?;
            // A pod for another scheduler waits for that scheduler's binding (`pods/binding`), as kube-scheduler
            // leaves it alone.
            let scheduler = object.pointer("/spec/schedulerName").and_then(Value::as_str).unwrap_or(DEFAULT_SCHEDULER);
            if scheduler != DEFAULT_SCHEDULER {
                return Ok(());
            }
            // As KubeVirt's launcher: the scheduler takes the pod now (a gated one waits at its gate).
            let event = Event::Schedule { namespace: namespace.into(), pod: name.into() };
            return self.schedule_at(self.now(), event).map_err(status::internal_error);
        }
        if request.subresource.as_deref() == Some("status") {
            return self.write_pod_status(request, namespace, name, object);
        }
        let ungated_before = self.api.store().pod(namespace, name).is_some_and(|p| p.scheduling_gates.is_empty());
        self.api
            .update_pod(namespace, name, &request.user, |stored| {
                stored.labels = pod.labels;
                stored.annotations = pod.annotations;
                stored.scheduling_gates = pod.scheduling_gates;
                stored.tolerations = pod.tolerations;
                stored.node_selector = pod.node_selector;
                stored.required_terms = pod.required_terms;
                stored.read_attachments();
            })
            .map_err(refused)?;
        let ungated = self.api.store().pod(namespace, name).is_some_and(|p| p.scheduling_gates.is_empty());
        if ungated && !ungated_before {
            // As a tenant removing a gate: the scheduler takes the pod now.
            let event = Event::Schedule { namespace: namespace.into(), pod: name.into() };
            self.schedule_at(self.now(), event).map_err(status::internal_error)?;
        }
        Ok(())
    }

    /// `pods/status`: the GPU controller's placement condition (its `SetPodWaiting`, a strategic merge patch by
    /// condition type) is written; anything else of a pod's status is the twin's kubelet's and refused.
    fn write_pod_status(
        &mut self,
        request: &WriteRequest,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<(), Refused> {
        let resource = request.resource;
        let current = self
            .api
            .render(&ObjectKey::new(Kind::Pod, namespace, name))
            .ok_or_else(|| status::not_found(resource, name))?;
        let proposed =
            convert::pod_from_json(object, namespace).map_err(|error| unconvertible(resource, name, error))?;
        let placement = |status: Option<&Value>| -> Value {
            let mut status = status.cloned().unwrap_or(Value::Null);
            if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
                conditions.retain(|condition| {
                    condition.get("type").and_then(Value::as_str) != Some(keys::CONDITION_PLACEMENT)
                });
                if conditions.is_empty() {
                    status.as_object_mut().map(|map| map.remove("conditions"));
                }
            }
            status
        };
        if placement(object.get("status")) != placement(current.get("status")) {
            let why = "a pod's status is the twin's kubelet's: only the GPU controller's placement condition \
                       (gpu.cozystack.io/Placement) is written through pods/status";
            return Err(not_modelled(resource, name, "status", why));
        }
        self.api
            .update_pod_status(namespace, name, |stored| stored.waiting = proposed.waiting)
            .map_err(|error| status::from_api_error(&error, resource, name))
    }

    fn delete_modelled(&mut self, kind: Kind, resource: &Resource, namespace: &str, name: &str) -> Result<(), Refused> {
        let refused = |error: ApiError| status::from_api_error(&error, resource, name);
        let user = crate::users::platform_admin();
        let failed = |error: crate::world::WorldError| status::internal_error(error);
        match kind {
            Kind::Claim => self.api.delete_claim(namespace, name, None).map_err(refused),
            Kind::Class => self.api.delete_class(name).map(drop).map_err(refused),
            Kind::Usage => self.api.delete_usage(namespace, name, &user).map_err(refused),
            Kind::Quota => self.api.delete_quota(namespace, name).map_err(refused),
            Kind::Settings => {
                self.api.put_settings(None);
                Ok(())
            }
            Kind::Pod => {
                let owner = self.api.store().pod(namespace, name).and_then(|pod| pod.owner_vmi.clone());
                self.scheduler_forget(namespace, name);
                self.api.delete_pod(namespace, name).map_err(refused)?;
                self.scheduler_cluster_changed().map_err(failed)?;
                match owner {
                    // KubeVirt sees its launcher go, as when a scenario deletes it.
                    Some(vmi) => self.launcher_gone(namespace, &vmi.name).map_err(failed),
                    None => Ok(()),
                }
            }
            Kind::Namespace => {
                let why = "the twin deletes no namespaces: their tenants' objects would be left behind";
                Err(not_modelled(resource, name, "metadata.name", why))
            }
            Kind::Node => Err(not_modelled(resource, name, "metadata.name", "the twin's nodes are the scenario's")),
            Kind::Vmi => Err(not_modelled(
                resource,
                name,
                "metadata.name",
                "the twin runs the VirtualMachineInstances of VirtualMachines only: stop or delete the VirtualMachine",
            )),
        }
    }
}

impl World {
    /// `pods/binding`: a client's scheduler binds a pod to a node, as kube-scheduler's binding does. Refused as the
    /// API server refuses it: a pod already bound (409), a pod at a scheduling gate; and, unlike the API server, a
    /// node the twin does not have (its kubelet would never start the pod).
    fn bind_from_client(&mut self, request: &WriteRequest) -> Result<Written, Refused> {
        let resource = request.resource;
        let namespace = request.namespace.clone().unwrap_or_default();
        let name = request.name.clone().ok_or_else(|| status::bad_request("the name of the pod is required"))?;
        let binding = meta::body_object(request)?;
        let node = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let pod = self.api.store().pod(&namespace, &name).ok_or_else(|| status::not_found(resource, &name))?;
        if let Some(bound) = &pod.node_name {
            let message = format!("pod {name} is already assigned to node {bound:?}");
            return Err(status::status(409, "Conflict", &message, Some(status::Details::of(resource, &name))));
        }
        if !pod.scheduling_gates.is_empty() {
            let why = format!("pod {name} has non-empty .spec.schedulingGates");
            return Err(not_modelled(resource, &name, "spec.schedulingGates", &why));
        }
        if self.api.store().node(&node).is_none() {
            let nodes = crate::served::resources::find("", "v1", "nodes").expect("served");
            return Err(status::not_found(nodes, &node));
        }
        self.bind_pod(&namespace, &name, &node, "client").map_err(status::internal_error)?;
        let success =
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
        Ok(Written::Answered { code: 201, body: success })
    }
}

/// A modelled object stored: answered as the snapshot serves it.
fn stored(kind: Kind, namespace: &str, name: &str, code: u16) -> Written {
    let namespace = match kind {
        Kind::Class | Kind::Node | Kind::Namespace => String::new(),
        _ => namespace.to_owned(),
    };
    Written::Stored { resource: resource_of(kind), namespace, name: name.to_owned(), code }
}
