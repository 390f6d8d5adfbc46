//! The API server: the one store every actor writes through, with the rules a real one enforces (DESIGN.md §5).
//!
//! - resourceVersion: one revision counter for the whole store, as etcd's; every write stamps the object with the
//!   next one. An update that names a precondition the object no longer carries is a `Conflict`.
//! - create of an existing name is `AlreadyExists`; update or delete of a missing one `NotFound`.
//! - the admission chain ([`admission`]): the chart's webhook registrations, ValidatingAdmissionPolicies and the
//!   CRDs' rules, every write judged as its user ([`User`]); webhooks fail closed. The binding and status
//!   subresources of pods (the scheduler's, the kubelet's, the controller's placement condition) and of classes,
//!   and deletes of anything but usage records, are selected by no rule of the chart (a test holds this): those
//!   writes skip it.
//! - status-subresource semantics for claims: a status write keeps the rest, a write of the claim keeps its status.
//! - the gated-pod rules ([`gates`]) on pod create and on every spec update.
//! - finalizers: a deleted claim that carries one keeps existing (deletion timestamp set) until the finalizer goes.
//! - ownerReference garbage collection (background): a VMI's pods and template claims, a claim's usage records go
//!   with their owner.
//! - a watch stream ([`watch`]): every change of a kind the GPU controller watches, in revision order.
//!
//! KubeVirt's controllers, the scheduler and the kubelets read the store directly (their caches are not what the
//! twin studies); the GPU controller reads only its own cache, fed by the watch with its delay.

pub mod admission;
pub mod gates;
pub mod objects;
pub mod watch;

use gpuclaim_engine::controller::{self, Action, ObjectRef};
use std::collections::BTreeMap;

use gpuclaim_engine::model::{Claim, Class, Name, Node, Pod, Settings, Time, Usage, View, Vmi};

use admission::crd::RuleBroken;
use admission::request::{self, Operation, Request, Served, User};
use admission::{Admission, AdmissionError};
use gates::{Invalid, validate_pod_create, validate_pod_update};
use gpuclaim_engine::rules::Order;
use objects::Manifests;
use objects::judged::{Judged, JudgedNamespace};
use watch::Watch;

/// The kinds the twin stores are the kinds the GPU controller caches, with the names the API server's messages use.
pub use gpuclaim_engine::controller::runtime::Kind;
use gpuclaim_engine::controller::runtime::{
    Change, Object, ObjectKey, Outcome, Quota, newer, revision as change_revision,
};

/// A refused request, with the API server's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{} {name:?} already exists", kind.resource())]
    AlreadyExists { kind: Kind, name: String },
    #[error("{} {name:?} not found", kind.resource())]
    NotFound { kind: Kind, name: String },
    #[error(
        "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to \
         the latest version and try again",
        kind.resource()
    )]
    Conflict { kind: Kind, name: String },
    #[error("Precondition failed: UID in precondition: {expected}, UID in object meta: {actual}")]
    UidPrecondition { expected: String, actual: String },
    #[error("{kind:?} {name:?} is invalid: {invalid}")]
    Invalid { kind: Kind, name: String, invalid: Invalid },
    /// A rule of the resource's CRD refused the write (before any validating admission).
    #[error("{}.{} {name:?} is invalid: {broken}", kind.name(), gpuclaim_engine::keys::GROUP)]
    Rule { kind: Kind, name: String, broken: RuleBroken },
    #[error(transparent)]
    Admission(#[from] AdmissionError),
}

impl ApiError {
    /// The HTTP status reason a client sees (`metav1.StatusReason`).
    pub fn reason(&self) -> &str {
        match self {
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::NotFound { .. } => "NotFound",
            ApiError::Conflict { .. } | ApiError::UidPrecondition { .. } => "Conflict",
            ApiError::Invalid { .. } | ApiError::Rule { .. } => "Invalid",
            ApiError::Admission(error) => error.reason(),
        }
    }

    /// The HTTP status code a client sees with [`ApiError::reason`]: 409 for a name taken or a stale precondition,
    /// 404 for a missing object, 422 for invalid content, and admission's own (see [`AdmissionError::code`]).
    pub fn code(&self) -> u16 {
        match self {
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::UidPrecondition { .. } => 409,
            ApiError::NotFound { .. } => 404,
            ApiError::Invalid { .. } | ApiError::Rule { .. } => 422,
            ApiError::Admission(error) => error.code(),
        }
    }

    /// How the controller's loop reads the refusal of one of its writes: its cache was behind (a conflict, a name
    /// taken, an object gone), or anything else.
    pub fn outcome(&self) -> Outcome {
        match self {
            ApiError::Conflict { .. } | ApiError::AlreadyExists { .. } | ApiError::NotFound { .. } => Outcome::Stale,
            _ => Outcome::Failed,
        }
    }
}

/// The store and its rules.
#[derive(Debug)]
pub struct ApiServer {
    store: View,
    revision: u64,
    /// Node writes so far (see [`ApiServer::nodes_written`]).
    nodes_written: u64,
    pub admission: Admission,
    watch: Watch,
    /// Who the garbage collector acts as.
    garbage_collector: User,
    /// The manifests clients wrote (served mode only, issue 39: [`objects`]); `None` in the in-process twin.
    manifests: Option<Box<Manifests>>,
    /// The events the controller recorded, until the served layer takes them (served mode only).
    recorded_events: Option<Vec<objects::event::Recorded>>,
}

impl Default for ApiServer {
    fn default() -> Self {
        ApiServer::new(View::default(), 0)
    }
}

impl ApiServer {
    /// An API server holding `store` as loaded (its objects keep the resourceVersions they carry; new writes count
    /// on from `first_revision`). The store keeps objects and the lookups the API server, its webhooks and
    /// garbage collector read, not the placement index: only the controller places, from its own cache, and every
    /// change reaches that cache too (ask [`View::placement_index`] for the store's).
    pub fn new(mut store: View, first_revision: u64) -> Self {
        store.keep_placement(false);
        // The settings ConfigMap, as the chart renders it, where the store's settings name the controller; a store
        // whose settings name none has no ConfigMap (the policies then trust no one with the controller's writes).
        let mut admission = Admission::default();
        admission.set_settings(store.settings.controller_user.as_deref().map(crate::users::chart_settings));
        ApiServer {
            store,
            revision: first_revision,
            nodes_written: 0,
            admission,
            watch: Watch::default(),
            garbage_collector: crate::users::garbage_collector(),
            manifests: None,
            recorded_events: None,
        }
    }

    /// How many node writes there were: what the scheduler's cached node verdicts are valid for.
    pub fn nodes_written(&self) -> u64 {
        self.nodes_written
    }

    pub fn store(&self) -> &View {
        &self.store
    }

    /// Keeps the store's placement index from now on (rebuilt from the objects once): for a reader that runs the
    /// engine on the store itself, as the invariant checks' liveness sample does.
    pub fn keep_placement_index(&mut self) {
        self.store.keep_placement(true);
    }

    pub fn watch(&mut self) -> &mut Watch {
        &mut self.watch
    }

    /// The next revision, as the objects carry it (one allocation, shared by every copy of the object version).
    fn next_revision(&mut self) -> Name {
        self.revision += 1;
        self.current_revision()
    }

    /// The revision of the last write.
    fn current_revision(&self) -> Name {
        Name::from(itoa::Buffer::new().format(self.revision))
    }

    /// Creates a VMI as `user` through the VMI webhook (its patch applied). Returns the stored VMI.
    pub fn create_vmi(&mut self, mut vmi: Vmi, user: &User) -> Result<&Vmi, ApiError> {
        if self.store.vmi(&vmi.namespace, &vmi.name).is_some() {
            return Err(ApiError::AlreadyExists { kind: Kind::Vmi, name: vmi.name.to_string() });
        }
        self.admission.admit_vmi(&self.store, user, &mut vmi)?;
        let (namespace, name) = (vmi.namespace.clone(), vmi.name.clone());
        self.validate(
            Operation::Create,
            request::VMIS,
            "",
            (&namespace, &name),
            user,
            Some(&Judged::compact(&vmi)),
            None,
        )?;
        vmi.resource_version = self.next_revision();
        let (namespace, name) = (vmi.namespace.clone(), vmi.name.clone());
        self.watch.push(Change::Upsert(Object::Vmi(vmi.clone())));
        self.store.upsert_vmi(vmi);
        Ok(self.store.vmi(&namespace, &name).expect("stored above"))
    }

    /// Updates a VMI as `user`, as KubeVirt's controllers and virt-handler do (no precondition: they own it), or
    /// as anyone else who may.
    pub fn update_vmi(
        &mut self,
        namespace: &str,
        name: &str,
        user: &User,
        edit: impl FnOnce(&mut Vmi),
    ) -> Result<(), ApiError> {
        let head = Request::head(Operation::Update, request::VMIS, "", namespace, name, user);
        if self.admission.needs_objects(&head)? {
            let old =
                self.store.vmi(namespace, name).ok_or(ApiError::NotFound { kind: Kind::Vmi, name: name.to_owned() })?;
            let mut new = old.clone();
            edit(&mut new);
            let old = old.clone();
            self.validate(
                Operation::Update,
                request::VMIS,
                "",
                (namespace, name),
                user,
                Some(&Judged::compact(&new)),
                Some(&Judged::compact(&old)),
            )?;
            new.resource_version = self.next_revision();
            self.watch.push(Change::Upsert(Object::Vmi(new.clone())));
            self.store.upsert_vmi(new);
            return Ok(());
        }
        let revision = self.next_revision();
        let found = self.store.edit_vmi(namespace, name, |vmi| {
            edit(vmi);
            vmi.resource_version = revision;
        });
        if !found {
            return Err(ApiError::NotFound { kind: Kind::Vmi, name: name.to_owned() });
        }
        let vmi = self.store.vmi(namespace, name).expect("edited above").clone();
        self.watch.push(Change::Upsert(Object::Vmi(vmi)));
        Ok(())
    }

    /// Deletes a VMI; the garbage collector deletes its pods and its template claims (background propagation).
    pub fn delete_vmi(&mut self, namespace: &str, name: &str) -> Result<Vmi, ApiError> {
        let vmi = self
            .store
            .remove_vmi(namespace, name)
            .ok_or(ApiError::NotFound { kind: Kind::Vmi, name: name.to_owned() })?;
        let revision = self.next_revision();
        self.watch.push(Change::Delete { kind: Kind::Vmi, namespace: namespace.into(), name: name.into(), revision });
        let pods: Vec<Name> = self
            .store
            .vmi_pods(namespace, name)
            .filter(|pod| pod.owner_vmi.as_ref().is_some_and(|owner| owner.uid == vmi.uid))
            .map(|pod| pod.name.clone())
            .collect();
        for pod in pods {
            self.delete_pod(namespace, &pod)?;
        }
        let claims: Vec<(Name, Name)> = self
            .store
            .claims_of_run(namespace, name)
            .filter(|claim| claim.owner_vmi.as_ref().is_some_and(|owner| owner.uid == vmi.uid))
            .map(|claim| (claim.name.clone(), claim.uid.clone()))
            .collect();
        for (claim, uid) in claims {
            self.delete_claim(namespace, &claim, Some(&uid))?;
        }
        Ok(vmi)
    }

    /// Creates a pod as `user` through the pod webhook, the API server's validation and the policies.
    pub fn create_pod(&mut self, mut pod: Pod, user: &User) -> Result<&Pod, ApiError> {
        if self.store.pod(&pod.namespace, &pod.name).is_some() {
            return Err(ApiError::AlreadyExists { kind: Kind::Pod, name: pod.name.to_string() });
        }
        self.admission.mutate_pod(&self.store, user, &mut pod)?;
        validate_pod_create(&pod).map_err(|invalid| ApiError::Invalid {
            kind: Kind::Pod,
            name: pod.name.to_string(),
            invalid,
        })?;
        let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
        self.validate(
            Operation::Create,
            request::PODS,
            "",
            (&namespace, &name),
            user,
            Some(&Judged::compact(&pod)),
            None,
        )?;
        pod.resource_version = self.next_revision();
        let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
        if watched_pod(&pod) {
            self.watch.push(Change::Upsert(Object::Pod(pod.clone())));
        } else {
            self.watch.note_key(Kind::Pod, &namespace, &name, &pod.resource_version);
        }
        self.store.upsert_pod(pod);
        Ok(self.store.pod(&namespace, &name).expect("stored above"))
    }

    /// Binds a pod to a node (`pods/binding`: no spec validation beyond the node being unset) or sets its status, as
    /// the scheduler and the kubelet do.
    pub fn update_pod_status(
        &mut self,
        namespace: &str,
        name: &str,
        edit: impl FnOnce(&mut Pod),
    ) -> Result<(), ApiError> {
        let revision = self.next_revision();
        let found = self.store.edit_pod(namespace, name, |pod| {
            edit(pod);
            pod.resource_version = revision;
        });
        if !found {
            return Err(ApiError::NotFound { kind: Kind::Pod, name: name.to_owned() });
        }
        let pod = self.store.pod(namespace, name).expect("edited above");
        if watched_pod(pod) {
            self.watch.push(Change::Upsert(Object::Pod(pod.clone())));
        } else {
            self.watch.note_key(Kind::Pod, &pod.namespace, &pod.name, &pod.resource_version);
        }
        Ok(())
    }

    pub fn delete_pod(&mut self, namespace: &str, name: &str) -> Result<Pod, ApiError> {
        let pod = self
            .store
            .remove_pod(namespace, name)
            .ok_or(ApiError::NotFound { kind: Kind::Pod, name: name.to_owned() })?;
        let revision = self.next_revision();
        if watched_pod(&pod) {
            self.watch.push(Change::Delete {
                kind: Kind::Pod,
                namespace: namespace.into(),
                name: name.into(),
                revision,
            });
        } else {
            self.watch.note_key(Kind::Pod, &pod.namespace, &pod.name, revision.as_str());
        }
        Ok(pod)
    }

    /// A tenant orders a claim, as `user`: through the CRD's rules, the policies and the order webhook.
    pub fn create_claim(&mut self, mut claim: Claim, user: &User) -> Result<&Claim, ApiError> {
        if self.store.claim(&claim.namespace, &claim.name).is_some() {
            return Err(ApiError::AlreadyExists { kind: Kind::Claim, name: claim.name.to_string() });
        }
        self.admit_claim(Operation::Create, "", user, &claim, None)?;
        claim.resource_version = self.next_revision();
        let (namespace, name) = (claim.namespace.clone(), claim.name.clone());
        self.watch.push(Change::Upsert(Object::Claim(claim.clone())));
        self.store.upsert_claim(claim);
        Ok(self.store.claim(&namespace, &name).expect("stored above"))
    }

    /// Deletes a claim (with a uid precondition when given): one carrying a finalizer only gets its deletion
    /// timestamp; one without goes, and its usage records with it.
    pub fn delete_claim(&mut self, namespace: &str, name: &str, uid: Option<&str>) -> Result<(), ApiError> {
        let claim =
            self.store.claim(namespace, name).ok_or(ApiError::NotFound { kind: Kind::Claim, name: name.to_owned() })?;
        if let Some(expected) = uid.filter(|uid| *uid != claim.uid) {
            return Err(ApiError::UidPrecondition { expected: expected.to_owned(), actual: claim.uid.to_string() });
        }
        if claim.finalizer {
            if !claim.deleting {
                let revision = self.next_revision();
                self.store.edit_claim(namespace, name, |claim| {
                    claim.deleting = true;
                    claim.resource_version = revision;
                });
                let claim = self.store.claim(namespace, name).expect("edited above").clone();
                self.watch.push(Change::Upsert(Object::Claim(claim)));
            }
            return Ok(());
        }
        self.remove_claim(namespace, name);
        Ok(())
    }

    /// The claim leaves the store: its usage records (owned by it) are collected.
    fn remove_claim(&mut self, namespace: &str, name: &str) {
        let Some(claim) = self.store.remove_claim(namespace, name) else { return };
        for change in self.collect_claim(namespace, name, &claim.uid) {
            self.watch.push(change);
        }
    }

    /// A claim just left the store: its deletion, and the garbage collector's of the usage records it owned, each
    /// at its own revision.
    fn collect_claim(&mut self, namespace: &str, name: &str, uid: &str) -> Vec<Change> {
        let deletion =
            |kind, name: Name, revision| Change::Delete { kind, namespace: namespace.into(), name, revision };
        let mut changes = vec![deletion(Kind::Claim, name.into(), self.next_revision())];
        let owned: Vec<Name> = self
            .store
            .usages_of_claim(namespace, name)
            .filter(|usage| usage.claim_uid.is_empty() || usage.claim_uid == uid)
            .map(|usage| usage.name.clone())
            .collect();
        for usage in owned {
            // A delete the policies refuse stays (the garbage collector retries it; the twin does not).
            let old = self.store.usage(namespace, &usage).expect("listed above").clone();
            let request = Request {
                operation: Operation::Delete,
                resource: request::USAGES,
                subresource: "",
                namespace,
                name: &usage,
                user: &self.garbage_collector,
                object: None,
                old_object: Some(&Judged::compact(&old)),
            };
            if self.admission.validate(&request).is_err() {
                continue;
            }
            self.store.remove_usage(namespace, &usage);
            changes.push(deletion(Kind::Usage, usage, self.next_revision()));
        }
        changes
    }

    /// Adds or replaces a node (the kubelet registering, or a node's spec and status changing).
    pub fn put_node(&mut self, mut node: Node) {
        self.nodes_written += 1;
        node.resource_version = self.next_revision().to_string();
        self.watch.push(Change::Upsert(Object::Node(node.clone())));
        self.store.upsert_node(node);
    }

    /// A new revision for a write the compact store does not hold (a served object's own fields, a kind the twin
    /// does not model): revisions stay one counter across everything the API server writes.
    pub(crate) fn stamp(&mut self) -> Name {
        self.next_revision()
    }

    /// Writes `kind` `namespace`/`name` again unchanged, at a new revision (an edit of fields the compact store does
    /// not hold, such as a claim's label): the object takes the revision where it carries one, and the watch and
    /// the journal see the write as any other. Returns the revision.
    pub fn touch(&mut self, kind: Kind, namespace: &str, name: &str) -> Result<Name, ApiError> {
        let missing = || ApiError::NotFound { kind, name: name.to_owned() };
        let store = &self.store;
        let found = match kind {
            Kind::Claim => store.claim(namespace, name).is_some(),
            Kind::Pod => store.pod(namespace, name).is_some(),
            Kind::Usage => store.usage(namespace, name).is_some(),
            Kind::Vmi => store.vmi(namespace, name).is_some(),
            Kind::Class => store.class(name).is_some(),
            Kind::Node => store.node(name).is_some(),
            Kind::Namespace => store.tenant(name).is_some(),
            Kind::Quota => {
                store.tenant(namespace).is_some_and(|tenant| tenant.quotas().any(|(quota, _)| quota == name))
            }
            Kind::Settings => true,
        };
        if !found {
            return Err(missing());
        }
        let revision = self.stamp();
        let (ns, nm): (Name, Name) = (namespace.into(), name.into());
        match kind {
            Kind::Claim => {
                self.store.edit_claim(namespace, name, |claim| claim.resource_version = revision.clone());
                let change = self.push_claim(&ObjectRef::new(namespace, name));
                self.watch.push(change);
            }
            Kind::Pod => {
                self.store.set_pod_resource_version(namespace, name, revision.clone());
                let pod = self.store.pod(namespace, name).expect("found above");
                if watched_pod(pod) {
                    self.watch.push(Change::Upsert(Object::Pod(pod.clone())));
                } else {
                    self.watch.note_key(Kind::Pod, &ns, &nm, &revision);
                }
            }
            Kind::Usage => {
                let change = self.stamp_usage_at(namespace, name, revision.clone());
                self.watch.push(change);
            }
            Kind::Vmi => {
                self.store.edit_vmi(namespace, name, |vmi| vmi.resource_version = revision.clone());
                let vmi = self.store.vmi(namespace, name).expect("found above").clone();
                self.watch.push(Change::Upsert(Object::Vmi(vmi)));
            }
            Kind::Class => {
                self.store.set_class_resource_version(name, revision.to_string());
                let class = self.store.class(name).expect("found above").clone();
                self.watch.push(Change::Upsert(Object::Class(class)));
            }
            Kind::Node => {
                let mut node = self.store.node(name).expect("found above").clone();
                node.resource_version = revision.to_string();
                self.nodes_written += 1;
                self.watch.push(Change::Upsert(Object::Node(node.clone())));
                self.store.upsert_node(node);
            }
            Kind::Namespace => {
                let vgpu_entitled = self.store.tenant(name).is_some_and(|tenant| tenant.vgpu_entitled);
                let object = gpuclaim_engine::controller::runtime::Namespace {
                    name: nm,
                    vgpu_entitled,
                    resource_version: revision.clone(),
                };
                self.watch.push(Change::Upsert(Object::Namespace(object)));
            }
            Kind::Quota => self.watch.note_key(kind, &ns, &nm, &revision),
            // The settings' key names no object: there is one ConfigMap (see `Change::key`).
            Kind::Settings => self.watch.note_key(kind, &Name::default(), &Name::default(), &revision),
        }
        Ok(revision)
    }

    /// Creates or replaces a GPUClass's spec (an administrator's write): the status stays what the controller last
    /// published. No policy of the twin's admission selects class writes. Returns the stored class.
    pub fn put_class(&mut self, mut class: Class) -> &Class {
        if let Some(stored) = self.store.class(&class.name) {
            class.published = stored.published;
        }
        class.resource_version = self.next_revision().to_string();
        let name = class.name.clone();
        self.watch.push(Change::Upsert(Object::Class(class.clone())));
        self.store.upsert_class(class);
        self.store.class(&name).expect("stored above")
    }

    /// Deletes a GPUClass.
    pub fn delete_class(&mut self, name: &str) -> Result<Class, ApiError> {
        let class =
            self.store.remove_class(name).ok_or(ApiError::NotFound { kind: Kind::Class, name: name.to_owned() })?;
        let revision = self.next_revision();
        self.watch.push(Change::Delete { kind: Kind::Class, namespace: Name::default(), name: name.into(), revision });
        Ok(class)
    }

    /// Creates a usage record as `user` (the controller opens its records through [`ApiServer::write`]), through
    /// the policies.
    pub fn create_usage(&mut self, mut usage: Usage, user: &User) -> Result<&Usage, ApiError> {
        if self.store.usage(&usage.namespace, &usage.name).is_some() {
            return Err(ApiError::AlreadyExists { kind: Kind::Usage, name: usage.name.to_string() });
        }
        let (namespace, name) = (usage.namespace.clone(), usage.name.clone());
        self.validate(
            Operation::Create,
            request::USAGES,
            "",
            (&namespace, &name),
            user,
            Some(&Judged::compact(&usage)),
            None,
        )?;
        usage.resource_version = self.next_revision();
        self.watch.push(Change::Upsert(Object::Usage(usage.clone())));
        self.store.upsert_usage(usage);
        Ok(self.store.usage(&namespace, &name).expect("stored above"))
    }

    /// Creates or replaces a ResourceQuota's GPU budgets (class → hard units). No policy of the twin's admission
    /// selects quota writes. Returns the revision it took (the compact quota carries none).
    pub fn put_quota(&mut self, namespace: &str, name: &str, budgets: BTreeMap<String, u64>) -> Name {
        self.store.upsert_quota(namespace, name, budgets.clone());
        let revision = self.next_revision();
        let quota = Quota { namespace: namespace.into(), name: name.into(), budgets };
        self.watch.push_at(Change::Upsert(Object::Quota(quota)), change_revision(&revision));
        revision
    }

    /// Deletes a ResourceQuota.
    pub fn delete_quota(&mut self, namespace: &str, name: &str) -> Result<(), ApiError> {
        if !self.store.tenant(namespace).is_some_and(|tenant| tenant.quotas().any(|(quota, _)| quota == name)) {
            return Err(ApiError::NotFound { kind: Kind::Quota, name: name.to_owned() });
        }
        self.store.remove_quota(namespace, name);
        let revision = self.next_revision();
        self.watch.push(Change::Delete { kind: Kind::Quota, namespace: namespace.into(), name: name.into(), revision });
        Ok(())
    }

    /// Creates, replaces (`Some(data)`) or deletes (`None`) the settings ConfigMap: both what the controller reads
    /// (`View.settings`) and the parameters the chart's policies judge with. Returns the revision it took.
    pub fn put_settings(&mut self, data: Option<BTreeMap<String, String>>) -> Name {
        let settings = Settings {
            controller_user: data
                .as_ref()
                .and_then(|data| data.get(gpuclaim_engine::keys::SETTINGS_CONTROLLER_USER))
                .filter(|user| !user.is_empty())
                .cloned(),
        };
        let present = data.is_some();
        self.admission.set_settings(data);
        self.store.settings = settings.clone();
        let revision = self.next_revision();
        let change = if present {
            Change::Upsert(Object::Settings(settings))
        } else {
            let (namespace, name) = (Name::default(), Name::default());
            Change::Delete { kind: Kind::Settings, namespace, name, revision: revision.clone() }
        };
        self.watch.push_at(change, change_revision(&revision));
        revision
    }

    /// Writes one of the GPU controller's actions as `requester`, with the engine's write semantics (preconditions,
    /// finalizers) and the API server's own rules (admission of the claims it creates, the gated-pod update rules,
    /// revisions). Returns the changes written, for the writer's cache. They do not go on the watch: its only
    /// watcher is the writer, whose cache already holds them (written through), so their echo would change nothing.
    /// What the garbage collector does in consequence (the usage records of a released claim) is returned with it.
    pub fn write(&mut self, action: &Action, now: Time, requester: &User) -> Result<Vec<Change>, ApiError> {
        let changes = self.write_action(action, now, requester)?;
        for change in &changes {
            self.watch.note(change);
        }
        Ok(changes)
    }

    fn write_action(&mut self, action: &Action, now: Time, requester: &User) -> Result<Vec<Change>, ApiError> {
        match action {
            Action::CreateClaim { claim, .. } => {
                if self.store.claim(&claim.namespace, &claim.name).is_some() {
                    return Err(ApiError::AlreadyExists { kind: Kind::Claim, name: claim.name.to_string() });
                }
                let mut new = controller::created_claim(action, now).expect("a CreateClaim creates a claim");
                self.admit_claim(Operation::Create, "", requester, &new, None)?;
                new.resource_version = self.next_revision();
                self.store.upsert_claim(new.clone());
                Ok(vec![Change::Upsert(Object::Claim(new))])
            }
            Action::UpdateClaim { claim, precondition, finalizer, status } => {
                let current = self.claim_at(claim, precondition)?;
                let removes = current.deleting && action_drops_finalizer(action);
                let uid = current.uid.clone();
                // Two requests, as the adapter sends them: the claim's metadata (the order webhook judges it), then
                // its status (the policies alone; a status write they skip on who asks needs no copies).
                let status_head = Request::head(
                    Operation::Update,
                    request::CLAIMS,
                    "status",
                    &claim.namespace,
                    &claim.name,
                    requester,
                );
                let status_judged = status.is_some() && self.admission.needs_objects(&status_head)?;
                let old = (finalizer.is_some() || status_judged)
                    .then(|| self.store.claim(&claim.namespace, &claim.name).expect("read above").clone());
                controller::apply(&mut self.store, std::slice::from_ref(action), now)
                    .map_err(|_| conflict(Kind::Claim, claim))?;
                if let Some(old) = old {
                    // A deleting claim whose finalizer goes is gone already: what was written is the claim without it.
                    let new = match self.store.claim(&claim.namespace, &claim.name) {
                        Some(new) => new.clone(),
                        None => Claim { finalizer: false, ..old.clone() },
                    };
                    let parts = [(finalizer.is_some(), ""), (status_judged, "status")];
                    for subresource in parts.into_iter().filter_map(|(written, sub)| written.then_some(sub)) {
                        if let Err(refused) =
                            self.admit_claim(Operation::Update, subresource, requester, &new, Some(&old))
                        {
                            self.store.upsert_claim(old);
                            return Err(refused);
                        }
                    }
                }
                if removes {
                    return Ok(self.collect_claim(&claim.namespace, &claim.name, &uid));
                }
                let revision = self.next_revision();
                self.store.edit_claim(&claim.namespace, &claim.name, |c| c.resource_version = revision);
                Ok(vec![self.push_claim(claim)])
            }
            Action::DeleteClaim { claim, uid } => {
                self.delete_claim(&claim.namespace, &claim.name, Some(uid))?;
                Ok(vec![match self.store.claim(&claim.namespace, &claim.name) {
                    Some(deleting) => Change::Upsert(Object::Claim(deleting.clone())),
                    None => Change::Delete {
                        kind: Kind::Claim,
                        namespace: claim.namespace.clone(),
                        name: claim.name.clone(),
                        revision: self.current_revision(),
                    },
                }])
            }
            Action::OpenUsage { usage } => {
                if self.store.usage(&usage.namespace, &usage.name).is_some() {
                    return Err(ApiError::AlreadyExists { kind: Kind::Usage, name: usage.name.to_string() });
                }
                let key = (usage.namespace.as_str(), usage.name.as_str());
                self.validate(
                    Operation::Create,
                    request::USAGES,
                    "",
                    key,
                    requester,
                    Some(&Judged::compact(usage)),
                    None,
                )?;
                controller::apply(&mut self.store, std::slice::from_ref(action), now)
                    .map_err(|_| conflict(Kind::Usage, &ObjectRef::new(&usage.namespace, &usage.name)))?;
                Ok(vec![self.stamp_usage(&usage.namespace, &usage.name)])
            }
            Action::CloseUsage { usage, precondition, .. } => {
                let current = self
                    .store
                    .usage(&usage.namespace, &usage.name)
                    .ok_or(ApiError::NotFound { kind: Kind::Usage, name: usage.name.to_string() })?;
                if current.resource_version != *precondition {
                    return Err(conflict(Kind::Usage, usage));
                }
                let head =
                    Request::head(Operation::Update, request::USAGES, "", &usage.namespace, &usage.name, requester);
                if self.admission.needs_objects(&head)? {
                    let old = current.clone();
                    let mut new = old.clone();
                    if let Action::CloseUsage { end, .. } = action {
                        new.end = Some(*end);
                    }
                    let key = (usage.namespace.as_str(), usage.name.as_str());
                    self.validate(
                        Operation::Update,
                        request::USAGES,
                        "",
                        key,
                        requester,
                        Some(&Judged::compact(&new)),
                        Some(&Judged::compact(&old)),
                    )?;
                }
                controller::apply(&mut self.store, std::slice::from_ref(action), now)
                    .map_err(|_| conflict(Kind::Usage, usage))?;
                Ok(vec![self.stamp_usage(&usage.namespace, &usage.name)])
            }
            Action::PinAndUngate { pod: key, .. }
            | Action::Ungate { pod: key, .. }
            | Action::Pin { pod: key, .. }
            | Action::SetPodWaiting { pod: key, .. } => {
                let old = self
                    .store
                    .pod(&key.namespace, &key.name)
                    .ok_or(ApiError::NotFound { kind: Kind::Pod, name: key.name.to_string() })?;
                // A Pin is chained on the revision the Ungate before it returned: nothing can come between them.
                let precondition = match action {
                    Action::PinAndUngate { precondition, .. }
                    | Action::Ungate { precondition, .. }
                    | Action::SetPodWaiting { precondition, .. } => precondition.as_str(),
                    _ => old.resource_version.as_str(),
                };
                if old.resource_version != precondition {
                    return Err(conflict(Kind::Pod, key));
                }
                // The placement condition is the pod's status (`pods/status`): no policy selects it.
                let subresource = if matches!(action, Action::SetPodWaiting { .. }) { "status" } else { "" };
                let head =
                    Request::head(Operation::Update, request::PODS, subresource, &key.namespace, &key.name, requester);
                let judged = self.admission.needs_objects(&head)?;
                // The engine's write, then the API server's update validation of old against new: what the write
                // changes is the engine's alone (a refused one is rolled back).
                let old = old.clone();
                controller::apply(&mut self.store, std::slice::from_ref(action), now)
                    .map_err(|_| conflict(Kind::Pod, key))?;
                let new = self.store.pod(&key.namespace, &key.name).expect("written above");
                if let Err(invalid) = validate_pod_update(&old, new) {
                    self.store.upsert_pod(old);
                    return Err(ApiError::Invalid { kind: Kind::Pod, name: key.name.to_string(), invalid });
                }
                if judged {
                    let new = new.clone();
                    let names = (key.namespace.as_str(), key.name.as_str());
                    let request = (Operation::Update, request::PODS, subresource, names);
                    if let Err(refused) = self.validate(
                        request.0,
                        request.1,
                        request.2,
                        request.3,
                        requester,
                        Some(&Judged::compact(&new)),
                        Some(&Judged::compact(&old)),
                    ) {
                        self.store.upsert_pod(old);
                        return Err(refused);
                    }
                }
                let revision = self.next_revision();
                self.store.set_pod_resource_version(&key.namespace, &key.name, revision);
                let pod = self.store.pod(&key.namespace, &key.name).expect("written above").clone();
                Ok(vec![Change::Upsert(Object::Pod(pod))])
            }
            Action::PublishClass { class, precondition, .. } => {
                let current =
                    self.store.class(class).ok_or(ApiError::NotFound { kind: Kind::Class, name: class.clone() })?;
                if current.resource_version != *precondition {
                    return Err(conflict(Kind::Class, &ObjectRef::new("", class)));
                }
                controller::apply(&mut self.store, std::slice::from_ref(action), now)
                    .map_err(|_| conflict(Kind::Class, &ObjectRef::new("", class)))?;
                let revision = self.next_revision();
                self.store.set_class_resource_version(class, revision.to_string());
                let class = self.store.class(class).expect("written above").clone();
                Ok(vec![Change::Upsert(Object::Class(class))])
            }
            Action::Event { kind, object, reason, message } => {
                // Kept only for a served twin's clients (`kubectl describe`); nothing in the twin reads events.
                if let Some(recorded) = &mut self.recorded_events {
                    let uid = match kind {
                        controller::EventKind::Claim => {
                            self.store.claim(&object.namespace, &object.name).map(|c| c.uid.clone())
                        }
                        controller::EventKind::Pod => {
                            self.store.pod(&object.namespace, &object.name).map(|p| p.uid.clone())
                        }
                    };
                    let (kind, object, message) = (*kind, object.clone(), message.clone());
                    recorded.push(objects::event::Recorded {
                        kind,
                        object,
                        uid: uid.unwrap_or_default(),
                        reason,
                        message,
                    });
                }
                Ok(Vec::new())
            }
        }
    }

    /// The validating policies on one write (the objects are turned into JSON only if a policy judges them).
    #[allow(clippy::too_many_arguments)]
    fn validate(
        &mut self,
        operation: Operation,
        resource: request::Resource,
        subresource: &'static str,
        (namespace, name): (&str, &str),
        user: &User,
        object: Option<&dyn Served>,
        old_object: Option<&dyn Served>,
    ) -> Result<(), ApiError> {
        let request = Request { operation, resource, subresource, namespace, name, user, object, old_object };
        Ok(self.admission.validate(&request)?)
    }

    /// Admission of a claim write (`new` as written, `old` as stored on UPDATE; `subresource` `""` or `"status"`):
    /// the CRD's rules where the spec changes, the policies, and the order webhook for the claim itself.
    fn admit_claim(
        &mut self,
        operation: Operation,
        subresource: &'static str,
        user: &User,
        new: &Claim,
        old: Option<&Claim>,
    ) -> Result<(), ApiError> {
        let (served_new, served_old) = (Judged::compact(new), old.map(Judged::compact));
        let request = Request {
            operation,
            resource: request::CLAIMS,
            subresource,
            namespace: &new.namespace,
            name: &new.name,
            user,
            object: Some(&served_new),
            old_object: served_old.as_ref().map(|o| o as &dyn Served),
        };
        let spec_changed = old.is_none_or(|old| (&old.class, old.count) != (&new.class, new.count));
        if subresource.is_empty() && spec_changed {
            self.admission.validate_schema(&request).map_err(|broken| ApiError::Rule {
                kind: Kind::Claim,
                name: new.name.to_string(),
                broken,
            })?;
        }
        self.admission.validate(&request)?;
        if subresource.is_empty() {
            let order = match old {
                Some(old) => Order::Update { old, new },
                None => Order::Create(new),
            };
            self.admission.validate_order(&self.store, &request, order)?;
        }
        Ok(())
    }

    /// A GET of `object` as the controller reads one back after a write found it stale: its current state, or its
    /// deletion when it is gone (`None` for the kinds the controller never writes).
    pub fn get(&self, object: &ObjectKey) -> Option<Change> {
        let store = &self.store;
        let (namespace, name) = (&object.namespace, &object.name);
        let live = match object.kind {
            Kind::Claim => store.claim(namespace, name).cloned().map(Object::Claim),
            Kind::Pod => store.pod(namespace, name).cloned().map(Object::Pod),
            Kind::Usage => store.usage(namespace, name).cloned().map(Object::Usage),
            Kind::Class => store.class(name).cloned().map(Object::Class),
            Kind::Node => store.node(name).cloned().map(Object::Node),
            Kind::Vmi => store.vmi(namespace, name).cloned().map(Object::Vmi),
            Kind::Namespace | Kind::Quota | Kind::Settings => return None,
        };
        Some(live.map(Change::Upsert).unwrap_or_else(|| Change::Delete {
            kind: object.kind,
            namespace: namespace.clone(),
            name: name.clone(),
            revision: Name::default(),
        }))
    }

    /// A GET of `node` and a LIST of the pods bound there (`spec.nodeName`), as the controller confirms a pin: what
    /// of them is newer than `cache` holds (the rest would change nothing; not copying it keeps confirmation cheap).
    pub fn read_node(&self, node: &str, cache: &View) -> Vec<Change> {
        let mut fresher = Vec::new();
        if let Some(live) = self.store.node(node)
            && newer(cache.node(node).map(|n| n.resource_version.as_str()), &live.resource_version)
        {
            fresher.push(Change::Upsert(Object::Node(live.clone())));
        }
        for pod in self.store.pods_on_node(node).filter(|pod| pod.node_name.as_deref() == Some(node)) {
            if newer(cache.pod(&pod.namespace, &pod.name).map(|p| p.resource_version.as_str()), &pod.resource_version) {
                fresher.push(Change::Upsert(Object::Pod(pod.clone())));
            }
        }
        fresher
    }

    /// Updates a claim as `user` (a tenant, an administrator): `edit` changes a copy, and what `subresource` does
    /// not own is put back (a status write keeps the spec and metadata, a write of the claim keeps its status), as
    /// the API server's status subresource has it. Removing the finalizer of a deleting claim deletes it.
    pub fn update_claim(
        &mut self,
        namespace: &str,
        name: &str,
        subresource: &'static str,
        user: &User,
        edit: impl FnOnce(&mut Claim),
    ) -> Result<(), ApiError> {
        let old =
            self.store.claim(namespace, name).ok_or(ApiError::NotFound { kind: Kind::Claim, name: name.to_owned() })?;
        let old = old.clone();
        let mut new = old.clone();
        edit(&mut new);
        let (status, owner) = (new.clone(), old.clone());
        let (status_of, rest_of) = if subresource == "status" { (&status, &owner) } else { (&owner, &status) };
        new = Claim {
            phase: status_of.phase,
            node: status_of.node.clone(),
            attached_to: status_of.attached_to.clone(),
            pending: status_of.pending.clone(),
            ..rest_of.clone()
        };
        self.admit_claim(Operation::Update, subresource, user, &new, Some(&old))?;
        if new.deleting && old.finalizer && !new.finalizer {
            self.store.remove_claim(namespace, name);
            for change in self.collect_claim(namespace, name, &old.uid) {
                self.watch.push(change);
            }
            return Ok(());
        }
        new.resource_version = self.next_revision();
        self.watch.push(Change::Upsert(Object::Claim(new.clone())));
        self.store.upsert_claim(new);
        Ok(())
    }

    /// Updates a pod itself (not its status) as `user`: the gated-pod rules, then the policies.
    pub fn update_pod(
        &mut self,
        namespace: &str,
        name: &str,
        user: &User,
        edit: impl FnOnce(&mut Pod),
    ) -> Result<(), ApiError> {
        let old =
            self.store.pod(namespace, name).ok_or(ApiError::NotFound { kind: Kind::Pod, name: name.to_owned() })?;
        let old = old.clone();
        let mut new = old.clone();
        edit(&mut new);
        validate_pod_update(&old, &new).map_err(|invalid| ApiError::Invalid {
            kind: Kind::Pod,
            name: name.to_owned(),
            invalid,
        })?;
        self.validate(
            Operation::Update,
            request::PODS,
            "",
            (namespace, name),
            user,
            Some(&Judged::compact(&new)),
            Some(&Judged::compact(&old)),
        )?;
        new.resource_version = self.next_revision();
        if watched_pod(&new) {
            self.watch.push(Change::Upsert(Object::Pod(new.clone())));
        } else {
            self.watch.note_key(Kind::Pod, &new.namespace, &new.name, &new.resource_version);
        }
        self.store.upsert_pod(new);
        Ok(())
    }

    /// Updates a usage record as `user` (the controller closes its records through [`ApiServer::write`]).
    pub fn update_usage(
        &mut self,
        namespace: &str,
        name: &str,
        user: &User,
        edit: impl FnOnce(&mut Usage),
    ) -> Result<(), ApiError> {
        let old =
            self.store.usage(namespace, name).ok_or(ApiError::NotFound { kind: Kind::Usage, name: name.to_owned() })?;
        let old = old.clone();
        let mut new = old.clone();
        edit(&mut new);
        self.validate(
            Operation::Update,
            request::USAGES,
            "",
            (namespace, name),
            user,
            Some(&Judged::compact(&new)),
            Some(&Judged::compact(&old)),
        )?;
        new.resource_version = self.next_revision();
        self.watch.push(Change::Upsert(Object::Usage(new.clone())));
        self.store.upsert_usage(new);
        Ok(())
    }

    /// Deletes a usage record as `user`.
    pub fn delete_usage(&mut self, namespace: &str, name: &str, user: &User) -> Result<(), ApiError> {
        let old =
            self.store.usage(namespace, name).ok_or(ApiError::NotFound { kind: Kind::Usage, name: name.to_owned() })?;
        let old = old.clone();
        self.validate(
            Operation::Delete,
            request::USAGES,
            "",
            (namespace, name),
            user,
            None,
            Some(&Judged::compact(&old)),
        )?;
        self.store.remove_usage(namespace, name);
        let revision = self.next_revision();
        self.watch.push(Change::Delete { kind: Kind::Usage, namespace: namespace.into(), name: name.into(), revision });
        Ok(())
    }

    /// Sets or removes a namespace's vGPU entitlement label as `user`.
    pub fn label_namespace(&mut self, namespace: &str, user: &User, vgpu_entitled: bool) -> Result<(), ApiError> {
        let was = self.store.tenant(namespace).is_some_and(|t| t.vgpu_entitled);
        let judged = |vgpu_entitled| JudgedNamespace { name: namespace, vgpu_entitled, manifest: None };
        let (old, new) = (judged(was), judged(vgpu_entitled));
        self.validate(Operation::Update, request::NAMESPACES, "", ("", namespace), user, Some(&new), Some(&old))?;
        self.store.set_vgpu_entitled(namespace, vgpu_entitled);
        let resource_version = self.next_revision();
        let object =
            gpuclaim_engine::controller::runtime::Namespace { name: namespace.into(), vgpu_entitled, resource_version };
        self.watch.push(Change::Upsert(Object::Namespace(object)));
        Ok(())
    }

    /// Creates a namespace as `user`, entitled to vGPU classes or not (its label), through the policies. Returns
    /// the revision it took. (A namespace's deletion is not modelled yet: the twin's namespaces hold its objects.)
    pub fn create_namespace(&mut self, namespace: &str, user: &User, vgpu_entitled: bool) -> Result<Name, ApiError> {
        if self.store.tenant(namespace).is_some() {
            return Err(ApiError::AlreadyExists { kind: Kind::Namespace, name: namespace.to_owned() });
        }
        let new = JudgedNamespace { name: namespace, vgpu_entitled, manifest: None };
        self.validate(Operation::Create, request::NAMESPACES, "", ("", namespace), user, Some(&new), None)?;
        self.store.set_vgpu_entitled(namespace, vgpu_entitled);
        let resource_version = self.next_revision();
        let object = gpuclaim_engine::controller::runtime::Namespace {
            name: namespace.into(),
            vgpu_entitled,
            resource_version: resource_version.clone(),
        };
        self.watch.push(Change::Upsert(Object::Namespace(object)));
        Ok(resource_version)
    }

    fn claim_at(&self, key: &ObjectRef, precondition: &str) -> Result<&Claim, ApiError> {
        let claim = self
            .store
            .claim(&key.namespace, &key.name)
            .ok_or(ApiError::NotFound { kind: Kind::Claim, name: key.name.to_string() })?;
        if claim.resource_version != precondition {
            return Err(conflict(Kind::Claim, key));
        }
        Ok(claim)
    }

    fn push_claim(&mut self, key: &ObjectRef) -> Change {
        let claim = self.store.claim(&key.namespace, &key.name).expect("written above").clone();
        Change::Upsert(Object::Claim(claim))
    }

    fn stamp_usage(&mut self, namespace: &str, name: &str) -> Change {
        let revision = self.next_revision();
        self.stamp_usage_at(namespace, name, revision)
    }

    fn stamp_usage_at(&mut self, namespace: &str, name: &str, revision: Name) -> Change {
        self.store.edit_usage(namespace, name, |usage| usage.resource_version = revision);
        let usage: Usage = self.store.usage(namespace, name).expect("written above").clone();
        Change::Upsert(Object::Usage(usage))
    }
}

fn conflict(kind: Kind, key: &ObjectRef) -> ApiError {
    ApiError::Conflict { kind, name: key.name.to_string() }
}

fn action_drops_finalizer(action: &Action) -> bool {
    matches!(action, Action::UpdateClaim { finalizer: Some(false), .. })
}

/// The GPU controller watches pods carrying the claims label, and every pod bound to a node (what it takes there,
/// CPU, memory and devices, counts against what the controller places): the adapter's reflectors select the same.
pub fn watched_pod(pod: &Pod) -> bool {
    gpuclaim_engine::model::is_claims_pod(pod) || pod.node_name.is_some()
}
