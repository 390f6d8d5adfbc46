//! Writes from served clients (create, update, patch, delete), answered as the API server answers them.
//!
//! Every write runs on the world's thread, between two events, at the world's current time, so no event ever sees
//! half a write. The order of what the API server checks is kept: the request's own fields (kind, name,
//! namespace), the object as it is now and the preconditions (`metadata.resourceVersion`, a delete's uid and
//! resourceVersion), the patch, the system fields the API server keeps (uid, creation time, generation, status
//! through its subresource only), then the kind's own rules.
//!
//! A kind the twin models goes to the API server verb its own actors use ([`modelled`]): the same admission, the
//! same rules, the same watch, and the reaction an actor would schedule. A field the twin models but no verb
//! changes is refused (422) with a message naming it, never silently dropped. Kinds the twin does not model are
//! stored as written ([`generic`]).
//!
//! Not served yet, each refused with a message saying so: dry run, server-side apply (answered 415 by [`super::patch`]),
//! `deletecollection`.

pub mod generic;
pub mod meta;
pub mod modelled;

use std::sync::Arc;

use serde_json::Value;

use crate::apiserver::admission::request::User;
use crate::served::resources::{Resource, Storage};
use crate::served::status;
use crate::served::store::ResourceId;
use crate::world::{World, WorldError};

/// What a write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    /// PUT: the whole object.
    Update,
    Patch,
    Delete,
}

impl Verb {
    /// The verb as authorization and discovery name it.
    pub fn name(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// One write as a client sent it.
#[derive(Clone, Debug)]
pub struct WriteRequest {
    pub verb: Verb,
    pub resource: &'static Resource,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The body's media type (a patch's says which kind of patch).
    pub content_type: String,
    pub body: Vec<u8>,
    pub user: User,
    pub dry_run: bool,
    /// `fieldValidation`: `Strict`, `Warn` (the default) or `Ignore`.
    pub field_validation: Option<String>,
}

/// The API server's answer: a status code and a body (the object written, or a `Status`).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub code: u16,
    pub body: Arc<Value>,
    /// `Warning` headers' texts (fields pruned under `fieldValidation=Warn`).
    pub warnings: Vec<String>,
}

impl Answer {
    fn object(code: u16, object: Arc<Value>) -> Answer {
        Answer { code, body: object, warnings: Vec::new() }
    }

    /// A refusal: the `Status` body, with its own code.
    pub fn refused(status: Value) -> Answer {
        let code = status.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
        Answer { code, body: Arc::new(status), warnings: Vec::new() }
    }
}

/// A write refused before or while it was applied: the `Status` to answer.
pub type Refused = Value;

/// What a write left: an object stored (answered as the snapshot serves it once synced), or one gone (answered
/// with its last state).
#[derive(Clone, Debug)]
pub enum Written {
    Stored {
        resource: ResourceId,
        namespace: String,
        name: String,
        code: u16,
    },
    Gone(Arc<Value>),
    /// A write that answers with its own body (a binding's `Status` of success).
    Answered {
        code: u16,
        body: Value,
    },
}

impl World {
    /// Applies a served client's write at the world's current time, and renders what it changed into the snapshot.
    pub fn served_write(&mut self, request: &WriteRequest) -> Answer {
        if self.served.is_none() {
            return Answer::refused(status::status(503, "ServiceUnavailable", "the twin is not served", None));
        }
        if request.dry_run {
            return Answer::refused(status::bad_request("dryRun is not served by the twin"));
        }
        let now = self.now();
        self.api.watch().tick(now);
        let mut warnings = Vec::new();
        let answer = match self.route(request) {
            Storage::Generic => self.generic_write(request, &mut warnings),
            Storage::Modelled(kind) => self.modelled_write(kind, request, &mut warnings),
            Storage::VirtualMachines => self.vm_write(request, &mut warnings),
            // The server answers these itself; one reaching the world is a routing bug, refused as unserved.
            Storage::Answered => Err(status::method_not_supported(request.resource, request.verb.name())),
        };
        let answer = match self.schedule_watch_delivery() {
            Ok(()) => answer,
            Err(error) => Err(status::internal_error(error)),
        };
        self.served_sync();
        let mut answer = match answer {
            Ok(Written::Stored { resource, namespace, name, code }) => {
                let snapshot = self.served.as_ref().expect("checked above").snapshot();
                let snapshot = snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
                match snapshot.get(resource, &namespace, &name) {
                    Some(stored) => Answer::object(code, Arc::clone(&stored.object)),
                    None => {
                        Answer::refused(status::status(500, "InternalError", "the written object is not served", None))
                    }
                }
            }
            Ok(Written::Gone(last)) => Answer::object(200, last),
            Ok(Written::Answered { code, body }) => Answer::object(code, Arc::new(body)),
            Err(refused) => Answer::refused(refused),
        };
        if answer.code < 300 {
            answer.warnings = warnings;
        }
        if let Err(error) = self.count_outside_refusal(request, &answer) {
            return Answer::refused(status::internal_error(error));
        }
        answer
    }

    /// A write of the outside GPU controller (its user, as the settings name it) to the cluster's model that was
    /// refused counts as the world's own controller's refused writes do (`WriteRefused:<reason>`), so a story judges
    /// both alike. Not counted: its Lease and Events (the world's controller writes neither), and a delete of what is
    /// already gone (404: what the delete wanted; the garbage collector may have been first).
    fn count_outside_refusal(&mut self, request: &WriteRequest, answer: &Answer) -> Result<(), WorldError> {
        let controller = self.api.store().settings.controller_user.as_deref();
        if !self.controller_outside() || answer.code < 400 || controller != Some(request.user.username.as_str()) {
            return Ok(());
        }
        let modelled = matches!(request.resource.storage, Storage::Modelled(_));
        if !modelled || (request.verb == Verb::Delete && answer.code == 404) {
            return Ok(());
        }
        let text = |field: &str| answer.body.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (reason, message) = (text("reason"), text("message"));
        let kind = request.resource.kind;
        let object = match (&request.namespace, meta::target_name(request)) {
            (Some(namespace), Some(name)) => format!("{kind} {namespace}/{name}"),
            (None, Some(name)) => format!("{kind} {name}"),
            (_, None) => kind.to_owned(),
        };
        self.refused("gpu-controller", &object, "WriteRefused", &reason, message)
    }

    /// A create's object and name, as every kind starts one: the body read, its kind, name and namespace checked
    /// (a `generateName` completed from the next revision), and the namespace it goes to existing.
    pub(crate) fn created_object(&self, request: &WriteRequest) -> Result<(String, Value), Refused> {
        let mut object = meta::body_object(request)?;
        let suffix = meta::generated_suffix(self.api.revision() + 1);
        let name = meta::identity(request.resource, request, &mut object, &suffix)?;
        let namespace = request.namespace.as_deref().unwrap_or_default();
        if request.resource.namespaced && self.api.store().tenant(namespace).is_none() {
            return Err(generic::namespace_missing(namespace));
        }
        Ok((name, object))
    }

    /// Where a request's object lives: the registry's storage, except the settings ConfigMap, the one modelled
    /// object of a generic resource.
    fn route(&self, request: &WriteRequest) -> Storage {
        let settings = request.resource.group.is_empty()
            && request.resource.plural == "configmaps"
            && request.namespace.as_deref() == Some(gpuclaim_engine::keys::DEFAULT_CONTROLLER_NAMESPACE)
            && meta::target_name(request).as_deref() == Some(gpuclaim_engine::keys::SETTINGS_CONFIGMAP);
        match settings {
            true => Storage::Modelled(crate::apiserver::Kind::Settings),
            false => request.resource.storage,
        }
    }
}

/// The object a PATCH makes of `current` (merge, JSON or strategic, by the request's media type).
pub(crate) fn patched(request: &WriteRequest, current: &Value) -> Result<Value, Refused> {
    let resource = request.resource;
    let patch_type =
        crate::served::patch::PatchType::from_content_type(&request.content_type, resource).map_err(|e| e.status())?;
    crate::served::patch::apply(resource, patch_type, current, &request.body).map_err(|e| e.status())
}
