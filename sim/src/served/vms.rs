//! KubeVirt's VirtualMachines as served: rendered from the twin's KubeVirt state (its VM controller holds them, not
//! the API server's store), and written by clients through the VM controller's own handlers.
//!
//! Rendered: the client's manifest (or a skeleton of the VM's spec: runStrategy, the template's claims label and
//! annotation, cores, memory and raw GPUs), with `status.printableStatus` (`Starting`, `Running`,
//! `CrashLoopBackOff`, `Stopped`), `status.ready` and `status.created` written over it. A VM is rendered again when
//! its VMI was written or its controller noted it ([`World::note_vm`]), and takes a new revision when its render
//! changed.
//!
//! Written: a create becomes the VM the twin's KubeVirt runs ([`vm_from_manifest`]), a delete stops it and it goes
//! once its VMI is gone (shown with a `deletionTimestamp` meanwhile). Not served yet, each refused with a message:
//! `instancetype` (give cores and memory), runStrategies other than `Always` (and `running: true`), and changes to a
//! VM's spec after it was created.

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Name, Time};
use gpuclaim_engine::quantity;
use gpuclaim_engine::references::{self, GpuEntry};
use serde_json::{Value, json};

use crate::apiserver::objects::{Manifest, timestamp, uid_of};
use crate::kubevirt::VmSpec;
use crate::world::World;

/// Why a VirtualMachine manifest cannot be run: the field and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrunnable {
    pub field: String,
    pub reason: String,
}

fn unrunnable(field: &str, reason: impl Into<String>) -> Unrunnable {
    Unrunnable { field: field.to_owned(), reason: reason.into() }
}

/// The VM the twin runs for a VirtualMachine manifest in `namespace`: its GPUs (the template's claims annotation,
/// else its raw `gpus`), its size (cores × sockets × threads and the guest memory, or the domain's resource
/// requests), as the VM chart renders them (charts/virtual-machine/templates/vm.yaml).
pub fn vm_from_manifest(namespace: &str, name: &str, object: &Value) -> Result<VmSpec, Unrunnable> {
    let spec = object.get("spec").ok_or_else(|| unrunnable("spec", "Required value"))?;
    if spec.get("instancetype").is_some() {
        return Err(unrunnable(
            "spec.instancetype",
            "the twin does not serve instance types: give spec.template.spec.domain.cpu.cores and memory.guest",
        ));
    }
    match (spec.get("runStrategy").and_then(Value::as_str), spec.get("running").and_then(Value::as_bool)) {
        (Some("Always"), _) | (None, Some(true)) => {}
        (Some(other), _) => {
            return Err(unrunnable(
                "spec.runStrategy",
                format!("the twin runs VMs Always; {other:?} is not served yet"),
            ));
        }
        (None, _) => return Err(unrunnable("spec.runStrategy", "Required value: the twin runs VMs Always")),
    }
    let template = spec.pointer("/template").ok_or_else(|| unrunnable("spec.template", "Required value"))?;
    let domain =
        template.pointer("/spec/domain").ok_or_else(|| unrunnable("spec.template.spec.domain", "Required value"))?;
    let annotation = template.pointer(&format!("/metadata/annotations/{}", keys::ANNOTATION_CLAIMS.replace('/', "~1")));
    let gpus: Vec<GpuEntry> = match annotation.and_then(Value::as_str) {
        Some(text) => references::parse_entries(text).map_err(|error| {
            unrunnable("spec.template.metadata.annotations[gpu.cozystack.io/claims]", error.to_string())
        })?,
        None => domain
            .pointer("/devices/gpus")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|gpu| {
                gpu.get("deviceName")
                    .and_then(Value::as_str)
                    .map(|device| GpuEntry::Name(device.to_owned()))
                    .ok_or_else(|| unrunnable("spec.template.spec.domain.devices.gpus", "each GPU needs a deviceName"))
            })
            .collect::<Result<_, _>>()?,
    };
    let count = |field: &str| domain.pointer(&format!("/cpu/{field}")).and_then(Value::as_u64);
    let cpu_millis = match (count("cores"), domain.pointer("/resources/requests/cpu").and_then(Value::as_str)) {
        (Some(cores), _) => cores * count("sockets").unwrap_or(1) * count("threads").unwrap_or(1) * 1000,
        (None, Some(cpu)) => quantity::cpu_millis(cpu)
            .map_err(|e| unrunnable("spec.template.spec.domain.resources.requests.cpu", e.to_string()))?,
        (None, None) => {
            return Err(unrunnable("spec.template.spec.domain.cpu.cores", "Required value: the twin sizes a VM by it"));
        }
    };
    let memory = domain
        .pointer("/memory/guest")
        .or_else(|| domain.pointer("/resources/requests/memory"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            unrunnable("spec.template.spec.domain.memory.guest", "Required value: the twin sizes a VM by it")
        })?;
    let memory_bytes =
        quantity::bytes(memory).map_err(|e| unrunnable("spec.template.spec.domain.memory.guest", e.to_string()))?;
    Ok(VmSpec {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        gpus,
        cpu_millis,
        memory_bytes,
        lifetime: None,
        wffc_volume: false,
    })
}

/// The skeleton of a VM a scenario made: what its spec says, as the VM chart would have written it.
fn skeleton(spec: &VmSpec) -> Value {
    let references: Vec<GpuEntry> = spec.gpus.iter().filter(|gpu| gpu.is_reference()).cloned().collect();
    let raw: Vec<Value> = spec
        .gpus
        .iter()
        .enumerate()
        .filter_map(|(index, gpu)| match gpu {
            GpuEntry::Name(device) => Some(json!({"name": format!("gpu{index}"), "deviceName": device})),
            _ => None,
        })
        .collect();
    let mut template = json!({
        "metadata": {"labels": {"kubevirt.io/domain": spec.name}},
        "spec": {"domain": {
            "cpu": {"cores": spec.cpu_millis.div_ceil(1000)},
            "memory": {"guest": quantity::bytes_text(spec.memory_bytes)},
            "devices": {"gpus": raw},
        }},
    });
    if !references.is_empty() {
        template["metadata"]["labels"][keys::LABEL_CLAIMS] = keys::TRUE.into();
        template["metadata"]["annotations"] = json!({keys::ANNOTATION_CLAIMS: references::entries_json(&references)});
    }
    json!({"apiVersion": keys::kubevirt::API_VERSION, "kind": "VirtualMachine", "spec": {"runStrategy": "Always", "template": template}})
}

/// A VM as served: the manifest (or skeleton) with its metadata and status written over it.
pub fn render(spec: &VmSpec, printable: &str, vmi: Option<&str>, manifest: &Manifest) -> Value {
    let mut object = match &manifest.json {
        json @ Value::Object(_) => json.clone(),
        _ => skeleton(spec),
    };
    let metadata = json!({
        "name": spec.name,
        "namespace": spec.namespace,
        "uid": manifest.uid.as_deref().unwrap_or_default(),
        "resourceVersion": manifest.resource_version.as_deref().unwrap_or_default(),
        "creationTimestamp": timestamp(manifest.created.unwrap_or_default()),
        "generation": manifest.generation.max(1),
    });
    let kept = object.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut merged = kept;
    for (key, value) in metadata.as_object().expect("a map") {
        merged.insert(key.clone(), value.clone());
    }
    merged.remove("managedFields");
    object["metadata"] = Value::Object(merged);
    let ready = vmi == Some("Running");
    object["status"] = json!({
        "printableStatus": printable,
        "ready": ready,
        "created": vmi.is_some(),
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
    });
    object
}

impl World {
    /// Marks the VM `namespace`/`name` to be rendered again at the next sync (served mode; nothing otherwise).
    pub(crate) fn note_vm(&mut self, namespace: &str, name: &str) {
        if let Some(served) = &mut self.served {
            served.vms_noted.insert((namespace.into(), name.into()));
        }
    }

    /// The VM `namespace`/`name` as served now (`None`: KubeVirt holds no such VM), with its manifest's metadata.
    pub(crate) fn render_vm(&self, namespace: &str, name: &str, manifest: &Manifest) -> Option<Value> {
        let (spec, _) = self.vm(namespace, name)?;
        let printable = self.vm_status(namespace, name).unwrap_or("Stopped");
        let vmi = self.api.store().vmi(namespace, name).map(|vmi| match vmi.phase {
            gpuclaim_engine::model::VmiPhase::Running => "Running",
            _ => "Other",
        });
        Some(render(spec, printable, vmi, manifest))
    }

    /// A uid and creation time for a VM first seen now.
    pub(crate) fn first_seen_vm(&self, namespace: &str, name: &str, revision: u64, now: Time) -> Manifest {
        Manifest {
            uid: Some(uid_of("VirtualMachine", namespace, &format!("{name}@{revision}"))),
            created: Some(now),
            generation: 1,
            resource_version: Some(revision.to_string().into()),
            ..Manifest::default()
        }
    }
}

use std::sync::Arc;

use super::status::{self, Cause};
use super::writes::meta::{self, DeleteOptions};
use super::writes::{Refused, Verb, WriteRequest, Written};

impl World {
    /// A client's write of a VirtualMachine, through KubeVirt's VM controller.
    pub(super) fn vm_write(&mut self, request: &WriteRequest, warnings: &mut Vec<String>) -> Result<Written, Refused> {
        let resource = request.resource;
        let namespace = request.namespace.clone().unwrap_or_default();
        let served_object = |world: &World, name: &str| {
            let snapshot = world.served.as_ref().expect("served").snapshot();
            let snapshot = snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            snapshot.get(resource.id(), &namespace, name).map(|stored| Arc::clone(&stored.object))
        };
        let stored = |name: &str, code| Written::Stored {
            resource: resource.id(),
            namespace: namespace.clone(),
            name: name.to_owned(),
            code,
        };
        match request.verb {
            Verb::Create => {
                let (name, mut object) = self.created_object(request)?;
                if self.vm(&namespace, &name).is_some() {
                    return Err(status::already_exists(resource, &name));
                }
                *warnings = meta::check_schema(request, &name, &mut object)?;
                let spec = vm_from_manifest(&namespace, &name, &object).map_err(|refusal| {
                    status::invalid(
                        resource,
                        &name,
                        vec![Cause::new("FieldValueInvalid", &refusal.reason, &refusal.field)],
                    )
                })?;
                let revision = self.api.revision() + 1;
                let mut manifest = self.first_seen_vm(&namespace, &name, revision, self.time());
                object.as_object_mut().map(|map| map.remove("status"));
                manifest.json = object;
                self.served
                    .as_mut()
                    .expect("served")
                    .vm_manifests
                    .insert((namespace.as_str().into(), name.as_str().into()), manifest);
                self.create_vm(spec, None).map_err(status::internal_error)?;
                Ok(stored(&name, 201))
            }
            Verb::Update | Verb::Patch => {
                let name =
                    request.name.clone().ok_or_else(|| status::bad_request("the name of the object is required"))?;
                let current = served_object(self, &name).ok_or_else(|| status::not_found(resource, &name))?;
                let mut object = match request.verb {
                    Verb::Patch => super::writes::patched(request, &current)?,
                    _ => meta::body_object(request)?,
                };
                meta::identity(resource, request, &mut object, "")?;
                meta::check_precondition(resource, &name, &object, &current)?;
                meta::keep_system_fields(resource, request.subresource.as_deref(), &mut object, &current);
                if meta::spec_changed(&current, &object) {
                    let why = "changes to a VirtualMachine's spec are not served yet (runStrategy, template): delete \
                               it and create it anew";
                    return Err(status::invalid(resource, &name, vec![Cause::new("FieldValueForbidden", why, "spec")]));
                }
                object.as_object_mut().map(|map| map.remove("status"));
                let key = (Name::from(namespace.as_str()), Name::from(name.as_str()));
                if let Some(manifest) = self.served.as_mut().expect("served").vm_manifests.get_mut(&key) {
                    manifest.json = object;
                }
                self.note_vm(&namespace, &name);
                Ok(stored(&name, 200))
            }
            Verb::Delete => {
                let name =
                    request.name.clone().ok_or_else(|| status::bad_request("the name of the object is required"))?;
                let current = served_object(self, &name).ok_or_else(|| status::not_found(resource, &name))?;
                DeleteOptions::read(&request.body)?.check(resource, &name, &current)?;
                let key = (Name::from(namespace.as_str()), Name::from(name.as_str()));
                let now = timestamp(self.time());
                if let Some(manifest) = self.served.as_mut().expect("served").vm_manifests.get_mut(&key)
                    && manifest.json.is_object()
                    && manifest.json.pointer("/metadata/deletionTimestamp").is_none()
                {
                    manifest.json["metadata"]["deletionTimestamp"] = now.into();
                }
                let (ns, vm) = (Name::from(namespace.as_str()), Name::from(name.as_str()));
                self.stop_vm(&ns, &vm).map_err(status::internal_error)?;
                Ok(match self.vm(&namespace, &name) {
                    Some(_) => stored(&name, 200),
                    None => Written::Gone(current),
                })
            }
        }
    }

    /// Renders the VMs noted or whose VMI was written into the snapshot: a new revision for each whose render
    /// changed, a deletion for each KubeVirt no longer holds.
    pub(super) fn sync_vms(
        &mut self,
        vmis: impl IntoIterator<Item = (Name, Name)>,
        snapshot: &mut super::store::Snapshot,
    ) {
        let Some(served) = self.served.as_mut() else { return };
        let noted = std::mem::take(&mut served.vms_noted);
        // A VMI write changes its VM's render only through what the VM's status reads of it: skip the VMs whose
        // status did not move (most VMI writes: annotations, conditions, the node).
        let moved: Vec<(Name, Name)> = vmis
            .into_iter()
            .filter(|key| !noted.contains(key))
            .filter(|(namespace, name)| {
                let seen = self.served.as_ref().expect("served").vm_status_seen.get(&(namespace.clone(), name.clone()));
                seen.is_none_or(|seen| Some(*seen) != self.vm_status_key(namespace, name))
            })
            .collect();
        let resource = super::resources::find("kubevirt.io", "v1", "virtualmachines").expect("served").id();
        let now = self.time();
        for (namespace, name) in noted.into_iter().chain(moved) {
            let key = (namespace.clone(), name.clone());
            let status = self.vm_status_key(&namespace, &name);
            let served = self.served.as_mut().expect("served");
            let Some(status) = status else {
                if snapshot.get(resource, &namespace, &name).is_some() {
                    let revision: u64 = self.api.stamp().parse().unwrap_or_default();
                    snapshot.remove(resource, &namespace, &name, revision);
                }
                served.vm_manifests.remove(&key);
                served.vm_status_seen.remove(&key);
                continue;
            };
            served.vm_status_seen.insert(key.clone(), status);
            let manifest = served.vm_manifests.remove(&key);
            let revision = self.api.revision() + 1;
            let mut manifest = manifest.unwrap_or_else(|| self.first_seen_vm(&namespace, &name, revision, now));
            let mut rendered = self.render_vm(&namespace, &name, &manifest).expect("exists");
            let unchanged = snapshot.get(resource, &namespace, &name).is_some_and(|stored| *stored.object == rendered);
            if !unchanged {
                // The render changed: it takes a new revision (the one field the manifest's revision makes).
                let revision = self.api.stamp();
                rendered["metadata"]["resourceVersion"] = revision.as_str().into();
                manifest.resource_version = Some(revision.clone());
                snapshot.upsert(resource, &namespace, &name, revision.parse().unwrap_or_default(), rendered);
            }
            self.served.as_mut().expect("served").vm_manifests.insert(key, manifest);
        }
    }

    /// What a VM's render reads of KubeVirt's state besides its manifest: its printable status, whether its VMI
    /// runs, whether it has one (`None`: no such VM).
    fn vm_status_key(&self, namespace: &str, name: &str) -> Option<super::state::VmStatusKey> {
        self.vm(namespace, name)?;
        let printable = self.vm_status(namespace, name).unwrap_or("Stopped");
        let vmi = self.api.store().vmi(namespace, name);
        let running = vmi.is_some_and(|vmi| vmi.phase == gpuclaim_engine::model::VmiPhase::Running);
        Some((printable, running, vmi.is_some()))
    }
}
