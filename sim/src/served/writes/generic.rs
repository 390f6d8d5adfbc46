//! Writes of the kinds the twin does not model (ConfigMaps, Secrets, Deployments, RBAC, webhook configurations,
//! CRDs, ...): the served snapshot is their store, and the API server's own rules are all that apply to them:
//! names, preconditions, system fields, finalizers. In remote admission the stored webhook configurations, policies,
//! bindings and CRDs are the ones in force ([`crate::served::admission`]); nothing else in the world reads them. The
//! garbage collector does not follow their owner references (deleting an owner leaves its dependents, as
//! `propagationPolicy: Orphan` would).

use std::sync::Arc;

use serde_json::{Value, json};

use super::meta::{self, DeleteOptions};
use super::{Refused, Verb, WriteRequest, Written};
use crate::apiserver::objects::{timestamp, uid_of};
use crate::served::status;
use crate::world::World;

impl World {
    pub(super) fn generic_write(
        &mut self,
        request: &WriteRequest,
        warnings: &mut Vec<String>,
    ) -> Result<Written, Refused> {
        let resource = request.resource;
        let snapshot = self.served.as_ref().expect("served").snapshot();
        let namespace = request.namespace.clone().unwrap_or_default();
        let stored = |name: &str| {
            let snapshot = snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            snapshot.get(resource.id(), &namespace, name).map(|stored| Arc::clone(&stored.object))
        };
        match request.verb {
            Verb::Create => {
                let (name, mut object) = self.created_object(request)?;
                if stored(&name).is_some() {
                    return Err(status::already_exists(resource, &name));
                }
                if meta::precondition(&object).is_some() {
                    return Err(status::bad_request("resourceVersion should not be set on objects to be created"));
                }
                *warnings = meta::check_schema(request, &name, &mut object)?;
                let revision = self.api.stamp();
                let metadata = object["metadata"].as_object_mut().expect("made by identity");
                let key_name = format!("{name}@{revision}");
                metadata.insert("uid".into(), uid_of(resource.kind, &namespace, &key_name).as_str().into());
                metadata.insert("creationTimestamp".into(), timestamp(self.time()).into());
                metadata.insert("resourceVersion".into(), revision.as_str().into());
                metadata.insert("generation".into(), 1.into());
                for system in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
                    metadata.remove(system);
                }
                if resource.subresource("status").is_some() {
                    object.as_object_mut().expect("an object").remove("status");
                }
                let migrated = object.pointer("/spec/vmiName").and_then(Value::as_str).map(str::to_owned);
                let written = self.generic_store(resource.id(), &namespace, &name, &revision, object, 201)?;
                if resource.kind == "VirtualMachineInstanceMigration"
                    && let Some(vmi) = migrated
                {
                    // KubeVirt's migration controller takes it: the twin's migration of that VMI (its progress is the
                    // VMI's and its pods'; the migration object keeps what the client wrote).
                    self.migrate(&namespace, &vmi, false).map_err(status::internal_error)?;
                }
                Ok(written)
            }
            Verb::Update | Verb::Patch => {
                let name =
                    request.name.clone().ok_or_else(|| status::bad_request("the name of the object is required"))?;
                let current = stored(&name).ok_or_else(|| status::not_found(resource, &name))?;
                let mut object = match request.verb {
                    Verb::Patch => super::patched(request, &current)?,
                    _ => meta::body_object(request)?,
                };
                meta::identity(resource, request, &mut object, "")?;
                meta::check_precondition(resource, &name, &object, &current)?;
                meta::keep_system_fields(resource, request.subresource.as_deref(), &mut object, &current);
                *warnings = meta::check_schema(request, &name, &mut object)?;
                let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
                let finalizers =
                    object.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
                let revision = self.api.stamp();
                if deleting && !finalizers {
                    return Ok(Written::Gone(self.generic_remove(resource.id(), &namespace, &name, &revision)));
                }
                object["metadata"]["resourceVersion"] = revision.as_str().into();
                self.generic_store(resource.id(), &namespace, &name, &revision, object, 200)
            }
            Verb::Delete => {
                let name =
                    request.name.clone().ok_or_else(|| status::bad_request("the name of the object is required"))?;
                let current = stored(&name).ok_or_else(|| status::not_found(resource, &name))?;
                DeleteOptions::read(&request.body)?.check(resource, &name, &current)?;
                let finalizers =
                    current.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
                let revision = self.api.stamp();
                if !finalizers {
                    return Ok(Written::Gone(self.generic_remove(resource.id(), &namespace, &name, &revision)));
                }
                let mut object = (*current).clone();
                if object.pointer("/metadata/deletionTimestamp").is_none() {
                    object["metadata"]["deletionTimestamp"] = timestamp(self.time()).into();
                    object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                }
                object["metadata"]["resourceVersion"] = revision.as_str().into();
                self.generic_store(resource.id(), &namespace, &name, &revision, object, 200)
            }
        }
    }

    fn generic_store(
        &mut self,
        resource: crate::served::store::ResourceId,
        namespace: &str,
        name: &str,
        revision: &str,
        object: Value,
        code: u16,
    ) -> Result<Written, Refused> {
        let snapshot = self.served.as_ref().expect("served").snapshot();
        let mut snapshot = snapshot.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        snapshot.upsert(resource, namespace, name, revision.parse().unwrap_or_default(), object);
        Ok(Written::Stored { resource, namespace: namespace.to_owned(), name: name.to_owned(), code })
    }

    fn generic_remove(
        &mut self,
        resource: crate::served::store::ResourceId,
        namespace: &str,
        name: &str,
        revision: &str,
    ) -> Arc<Value> {
        let snapshot = self.served.as_ref().expect("served").snapshot();
        let mut snapshot = snapshot.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let revision = revision.parse().unwrap_or_default();
        snapshot.remove(resource, namespace, name, revision).unwrap_or_else(|| Arc::new(Value::Null))
    }
}

/// The API server's refusal of an object in a namespace that does not exist.
pub fn namespace_missing(namespace: &str) -> Refused {
    let namespaces = crate::served::resources::find("", "v1", "namespaces").expect("namespaces are served");
    status::not_found(namespaces, namespace)
}
