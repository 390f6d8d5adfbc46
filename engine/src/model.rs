//! The compact domain model the engine decides on: exactly what the rules read, indexed for them.
//!
//! The twin keeps its world in these types, so its hot paths never build Kubernetes objects; the live adapter and
//! `gpuclaim review` fill them from Kubernetes objects through [`crate::convert`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;

pub use crate::api::{ClaimPhase, GpuMode, VmiRef};

/// A GPUClass as the rules see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Class {
    pub name: String,
    pub resource_name: String,
    pub mode: GpuMode,
    pub max_count: u32,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub live_migratable: bool,
    pub published: Published,
}

/// The free units the controller last published for a class (its status). Before the first publication all are
/// zero, so orders wait for the controller rather than pass unchecked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub allocatable_units: u64,
    pub free_units: u64,
    pub largest_free_on_node: u64,
}

/// A GPUClaim as the rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub class: String,
    pub count: u32,
    /// Carries the template mark: the controller ordered it for one VMI run.
    pub template: bool,
    pub phase: ClaimPhase,
    pub node: Option<String>,
    pub attached_to: Option<VmiRef>,
    /// Has a deletion timestamp (waiting on its finalizer).
    pub deleting: bool,
}

/// One tenant namespace: its entitlement, its budgets and its claims, with the units they hold per class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tenant {
    pub vgpu_entitled: bool,
    /// ResourceQuota name → class → hard units. Each quota is enforced on its own, as the API server does.
    quotas: BTreeMap<String, BTreeMap<String, u64>>,
    claims: BTreeMap<String, Claim>,
    /// class → units ordered by every claim of the namespace (held and template, any phase): the quota's "used".
    units_by_class: BTreeMap<String, u64>,
}

impl Tenant {
    pub fn claim(&self, name: &str) -> Option<&Claim> {
        self.claims.get(name)
    }

    pub fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values()
    }

    /// Units of `class` ordered by the namespace's claims.
    pub fn units_used(&self, class: &str) -> u64 {
        self.units_by_class.get(class).copied().unwrap_or(0)
    }

    /// The tightest hard limit any quota of the namespace sets for `class`; `None` when no quota names it (then
    /// the class is not limited for this tenant, as with any ResourceQuota).
    pub fn budget(&self, class: &str) -> Option<u64> {
        self.quotas.values().filter_map(|hard| hard.get(class).copied()).min()
    }
}

/// The settings ConfigMap's parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The user allowed to create template claims. When set, the order webhook refuses the mark from anyone
    /// else, a second line behind the tamper policy.
    pub template_claim_creator: Option<String>,
}

/// The world the admission rules decide on: the caches the webhooks read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    classes: BTreeMap<String, Class>,
    tenants: BTreeMap<String, Tenant>,
    pub settings: Settings,
}

impl View {
    pub fn class(&self, name: &str) -> Option<&Class> {
        self.classes.get(name)
    }

    pub fn classes(&self) -> impl Iterator<Item = &Class> {
        self.classes.values()
    }

    pub fn tenant(&self, namespace: &str) -> Option<&Tenant> {
        self.tenants.get(namespace)
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Claim> {
        self.tenants.get(namespace)?.claim(name)
    }

    pub fn upsert_class(&mut self, class: Class) {
        self.classes.insert(class.name.clone(), class);
    }

    pub fn remove_class(&mut self, name: &str) -> Option<Class> {
        self.classes.remove(name)
    }

    /// Stores a claim, keeping the namespace's per-class units in step.
    pub fn upsert_claim(&mut self, claim: Claim) {
        let tenant = self.tenants.entry(claim.namespace.clone()).or_default();
        if let Some(old) = tenant.claims.remove(&claim.name) {
            release_units(&mut tenant.units_by_class, &old);
        }
        *tenant.units_by_class.entry(claim.class.clone()).or_insert(0) += u64::from(claim.count);
        tenant.claims.insert(claim.name.clone(), claim);
    }

    pub fn remove_claim(&mut self, namespace: &str, name: &str) -> Option<Claim> {
        let tenant = self.tenants.get_mut(namespace)?;
        let old = tenant.claims.remove(name)?;
        release_units(&mut tenant.units_by_class, &old);
        Some(old)
    }

    pub fn set_vgpu_entitled(&mut self, namespace: &str, entitled: bool) {
        self.tenants.entry(namespace.to_owned()).or_default().vgpu_entitled = entitled;
    }

    /// Stores one ResourceQuota's GPU budgets (class → hard units).
    pub fn upsert_quota(&mut self, namespace: &str, quota: &str, hard: BTreeMap<String, u64>) {
        let tenant = self.tenants.entry(namespace.to_owned()).or_default();
        tenant.quotas.insert(quota.to_owned(), hard);
    }

    pub fn remove_quota(&mut self, namespace: &str, quota: &str) {
        if let Some(tenant) = self.tenants.get_mut(namespace) {
            tenant.quotas.remove(quota);
        }
    }
}

fn release_units(units_by_class: &mut BTreeMap<String, u64>, claim: &Claim) {
    let units = units_by_class.get_mut(&claim.class).expect("a stored claim's class is counted");
    *units = units.checked_sub(u64::from(claim.count)).expect("units counted never go below zero");
    if *units == 0 {
        units_by_class.remove(&claim.class);
    }
}

/// A GPU entry of a VMI's `spec.domain.devices.gpus`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuDevice {
    pub name: String,
    pub device_name: String,
}

/// A VirtualMachineInstance as the VMI webhook sees it at CREATE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vmi {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub gpus: Vec<GpuDevice>,
}

/// A Pod as the pod webhook sees it at CREATE.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub scheduling_gates: Vec<String>,
    pub tolerations: Vec<Toleration>,
}
