//! KubeVirt's migration controller and node drains (evacuation).
//!
//! A migration (VirtualMachineInstanceMigration) renders a target pod from the VMI as the launcher is rendered —
//! so tolerations and affinity a webhook added to the source pod are absent — with the label
//! `kubevirt.io/migrationJobUID` and a required anti-affinity to the VMI's own pods on `kubernetes.io/hostname`.
//! The target pod is deleted, and the migration fails (no retry inside one migration), when it stays Pending
//! Unschedulable for 300 s or Pending for any other reason (a gated pod) for 900 s. Once the target runs, the state
//! is copied and the VMI hands off: its `nodeName` becomes the target's node, the source pod exits.
//!
//! Limits (KubeVirt's MigrationConfiguration defaults): at most 5 migrations running in the cluster
//! (`parallelMigrationsPerCluster`) and 2 outbound from one node (`parallelOutboundMigrationsPerNode`); the rest
//! wait Pending. A drain cordons the node and evacuates it: a migration per live-migratable VMI, retried after a
//! failure with a backoff of 20 s doubling per consecutive failure on that node. A VMI that cannot migrate (a
//! passthrough GPU) blocks the drain, as KubeVirt's eviction webhook refuses evicting it under the LiveMigrate
//! eviction strategy.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuclaim_engine::keys::kubevirt;
use gpuclaim_engine::model::{Name, PodPhase, View, VmiPhase};
use k8s_openapi::api::core::v1::{PodAffinityTerm, PodAntiAffinity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::target_timeout::{
    MigrationPhase as TimeoutPhase, PENDING_TIMEOUT_SECONDS, TargetPod, TargetTimeout, UNSCHEDULABLE_TIMEOUT_SECONDS,
    target_timeout,
};
use super::{Migration, MigrationPhase as Phase, live_migratable};
use crate::kernel::Millis;
use crate::log::Named;
use crate::world::{Event, World, WorldError};

pub const PARALLEL_MIGRATIONS_PER_CLUSTER: usize = 5;
pub const PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE: usize = 2;
/// The first evacuation retry after a failed evacuation migration; it doubles per consecutive failure.
pub const EVACUATION_BACKOFF: Millis = Millis(20_000);
/// Target running → handoff: the memory copy and the switch-over (a GPU VM's state, at typical bandwidth).
pub const MIGRATION_COPY: Millis = Millis(10_000);

impl World {
    /// A user (or a drain) asks to migrate a VMI.
    pub(crate) fn migrate(&mut self, namespace: &str, vmi: &str, evacuation: bool) -> Result<(), WorldError> {
        let object = format!("VirtualMachineInstance {namespace}/{vmi}");
        let Some(current) = self.api.store().vmi(namespace, vmi) else { return Ok(()) };
        let busy = self.kubevirt.migrations.values().any(|m| m.namespace == namespace && m.vmi == vmi && !m.finished());
        if current.phase != VmiPhase::Running || busy {
            return Ok(());
        }
        if !live_migratable(self.api.store(), current) {
            let message = "cannot migrate VMI: a passthrough GPU is not live-migratable".to_owned();
            return self.refused("virt-api", &object, "MigrationRefused", "NotMigratable", message);
        }
        let source_node = current.node_name.clone().unwrap_or_default();
        self.kubevirt.migration_seq += 1;
        let uid = format!("uid-migration-{:06}", self.kubevirt.migration_seq);
        let migration = Migration {
            namespace: namespace.to_owned(),
            vmi: vmi.to_owned(),
            source_node: source_node.to_string(),
            target_pod: None,
            target_created: self.now(),
            phase: Phase::Pending,
            evacuation,
        };
        self.kubevirt.migrations.insert(uid.clone(), migration);
        let kind = if evacuation { "evacuation" } else { "user" };
        self.record("migration-controller", &format!("Migration {uid}"), "Created", &[("vmi", &object), ("by", kind)])?;
        self.sync_migrations()
    }

    /// Starts pending migrations within the cluster's and each source node's limits, oldest first.
    pub(crate) fn sync_migrations(&mut self) -> Result<(), WorldError> {
        let pending: Vec<String> = self
            .kubevirt
            .migrations
            .iter()
            .filter(|(_, m)| m.phase == Phase::Pending)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in pending {
            let running = self.kubevirt.migrations.values().filter(|m| m.active()).count();
            let source = self.kubevirt.migrations[&uid].source_node.clone();
            let outbound = self.kubevirt.migrations.values().filter(|m| m.active() && m.source_node == source).count();
            if running >= PARALLEL_MIGRATIONS_PER_CLUSTER || outbound >= PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE {
                continue;
            }
            self.start_migration(&uid)?;
        }
        Ok(())
    }

    fn start_migration(&mut self, uid: &str) -> Result<(), WorldError> {
        let migration = self.kubevirt.migrations[uid].clone();
        let Some(vmi) = self.api.store().vmi(&migration.namespace, &migration.vmi) else {
            return self.finish_migration(uid, Phase::Failed, "the VMI is gone");
        };
        let Some(vm) = self.kubevirt.vms.get(&migration.namespace, &migration.vmi) else { return Ok(()) };
        let name = format!("virt-launcher-{}-{:05}", migration.vmi, self.events() % 100_000);
        let mut pod = self.launcher_of(vmi, vm, &name);
        Arc::make_mut(&mut pod.labels).insert(kubevirt::LABEL_MIGRATION_JOB_UID.to_owned(), uid.to_owned());
        pod.pod_anti_affinity = Some(keep_off_own_pods(&vmi.uid));
        let object = Named("Pod", &migration.namespace, &name);
        self.sync_before_admission();
        match self.api.create_pod(pod, &self.kubevirt.controller) {
            Ok(_) => {
                let now = self.now();
                let entry = self.kubevirt.migrations.get_mut(uid).expect("read above");
                entry.target_pod = Some(name.clone());
                entry.target_created = now;
                entry.phase = Phase::Scheduling;
                self.record("migration-controller", &object, "TargetCreated", &[("migration", uid)])?;
                for after in [UNSCHEDULABLE_TIMEOUT_SECONDS, PENDING_TIMEOUT_SECONDS] {
                    let at = self.now() + Millis::seconds(after);
                    self.schedule_at(at, Event::MigrationTimeout { uid: uid.to_owned() })?;
                }
                let event = Event::Schedule { namespace: migration.namespace.as_str().into(), pod: name.into() };
                self.schedule_at(self.now(), event)
            }
            Err(error) => {
                self.refused("migration-controller", &object, "FailedCreate", error.reason(), error.to_string())?;
                self.finish_migration(uid, Phase::Failed, "the target pod could not be created")
            }
        }
    }

    /// The migration controller's pending-pod timeouts.
    pub(crate) fn migration_timeout(&mut self, uid: &str) -> Result<(), WorldError> {
        let Some(migration) = self.kubevirt.migrations.get(uid) else { return Ok(()) };
        let Some(target) = migration.target_pod.clone() else { return Ok(()) };
        let phase = match migration.phase {
            Phase::Pending => TimeoutPhase::Pending,
            Phase::Scheduling => TimeoutPhase::Scheduling,
            _ => TimeoutPhase::Scheduled,
        };
        let namespace = migration.namespace.clone();
        let Some(pod) = self.api.store().pod(&namespace, &target) else { return Ok(()) };
        let state = TargetPod {
            pending: pod.phase == PodPhase::Pending,
            unschedulable: self.scheduler.is_parked(&namespace, &target),
            age_seconds: (self.now().0 - migration.target_created.0) / 1_000,
        };
        let Some(timeout) = target_timeout(phase, state, None, None) else { return Ok(()) };
        let message = match timeout {
            TargetTimeout::Unschedulable => format!("unschedulable pod {namespace}/{target} timeout period exceeded"),
            TargetTimeout::Pending => format!("pending pod {namespace}/{target} timeout period exceeded"),
        };
        self.scheduler_forget(&namespace, &target);
        if self.api.delete_pod(&namespace, &target).is_ok() {
            self.record(
                "migration-controller",
                &format!("Pod {namespace}/{target}"),
                "Deleted",
                &[("message", &message)],
            )?;
        }
        self.scheduler_cluster_changed()?;
        self.finish_migration(uid, Phase::Failed, &message)
    }

    /// The kubelet started a migration target: the copy runs, then the handoff.
    pub(crate) fn migration_target_running(&mut self, uid: &str) -> Result<(), WorldError> {
        let Some(migration) = self.kubevirt.migrations.get_mut(uid) else { return Ok(()) };
        migration.phase = Phase::Running;
        self.schedule_at(self.now() + MIGRATION_COPY, Event::MigrationHandoff { uid: uid.to_owned() })
    }

    /// The scheduler bound a pod: if it is a migration's target, the migration is Scheduled.
    pub(crate) fn migration_target_bound(&mut self, namespace: &str, pod: &str) {
        let Some(uid) = migration_of(self.api.store(), namespace, pod) else { return };
        if let Some(migration) = self.kubevirt.migrations.get_mut(&uid).filter(|m| m.phase == Phase::Scheduling) {
            migration.phase = Phase::Scheduled;
        }
    }

    /// The VMI now runs on the target's node; the source pod exits.
    pub(crate) fn migration_handoff(&mut self, uid: &str) -> Result<(), WorldError> {
        let Some(migration) = self.kubevirt.migrations.get(uid).filter(|m| m.phase == Phase::Running).cloned() else {
            return Ok(());
        };
        let (namespace, vmi) = (migration.namespace.clone(), migration.vmi.clone());
        let target = migration.target_pod.clone().unwrap_or_default();
        let Some(node) = self.api.store().pod(&namespace, &target).and_then(|p| p.node_name.clone()) else {
            return self.finish_migration(uid, Phase::Failed, "the target pod is gone");
        };
        if self
            .api
            .update_vmi(&namespace, &vmi, &self.kubevirt.controller, |v| v.node_name = Some(node.clone()))
            .is_err()
        {
            return self.finish_migration(uid, Phase::Failed, "the VMI is gone");
        }
        let sources: Vec<Name> = self
            .api
            .store()
            .vmi_pods(&namespace, &vmi)
            .filter(|pod| pod.name != target && !pod.phase.is_terminal())
            .map(|pod| pod.name.clone())
            .collect();
        for pod in sources {
            self.pod_ended(&namespace, &pod, PodPhase::Succeeded)?;
        }
        self.finish_migration(uid, Phase::Succeeded, &format!("to {node}"))
    }

    fn finish_migration(&mut self, uid: &str, phase: Phase, message: &str) -> Result<(), WorldError> {
        let Some(migration) = self.kubevirt.migrations.get_mut(uid) else { return Ok(()) };
        migration.phase = phase;
        let (evacuation, source) = (migration.evacuation, migration.source_node.clone());
        let what = if phase == Phase::Succeeded { "Succeeded" } else { "Failed" };
        if phase == Phase::Failed {
            self.metrics.count(crate::metrics::MIGRATION_FAILED);
        }
        self.record("migration-controller", &format_args!("Migration {uid}"), what, &[("message", message)])?;
        if evacuation && let Some(drain) = self.kubevirt.drains.get_mut(&source) {
            if phase == Phase::Succeeded {
                drain.failures = 0;
            } else {
                drain.failures += 1;
                let backoff = Millis(EVACUATION_BACKOFF.0 << (drain.failures - 1).min(20));
                self.schedule_at(self.now() + backoff, Event::Evacuate { node: source.clone() })?;
            }
        }
        self.sync_migrations()?;
        if evacuation && phase == Phase::Succeeded {
            self.evacuate(&source)?;
        }
        Ok(())
    }

    /// A drain began (`kubectl drain`, which cordons the node first): the evacuation controller evacuates the node
    /// until no VMI is left on it.
    pub(crate) fn evacuation_started(&mut self, node: &str) {
        self.kubevirt.drains.entry(node.to_owned()).or_default();
    }

    /// The evacuation controller: a migration for every migratable VMI still on the node; the drain is done when
    /// none is left.
    pub(crate) fn evacuate(&mut self, node: &str) -> Result<(), WorldError> {
        if !self.kubevirt.drains.contains_key(node) {
            return Ok(());
        }
        let on_node: Vec<(Name, Name, bool)> = self
            .api
            .store()
            .vmis()
            .filter(|vmi| vmi.node_name.as_deref() == Some(node) && !vmi.phase.is_final())
            .map(|vmi| (vmi.namespace.clone(), vmi.name.clone(), live_migratable(self.api.store(), vmi)))
            .collect();
        if on_node.is_empty() {
            self.kubevirt.drains.remove(node);
            return self.record("operator", &format_args!("Node {node}"), "Drained", &[]);
        }
        for (namespace, vmi, migratable) in on_node {
            if migratable {
                self.migrate(&namespace, &vmi, true)?;
            } else if self
                .kubevirt
                .drains
                .get_mut(node)
                .expect("checked above")
                .blocked
                .insert((namespace.to_string(), vmi.to_string()))
            {
                let object = Named("VirtualMachineInstance", &namespace, &vmi);
                let message = "cannot evict: the VMI is not live-migratable (evictionStrategy LiveMigrate)".to_owned();
                self.refused("virt-api", &object, "EvictionBlocked", "NotMigratable", message)?;
            }
        }
        Ok(())
    }

    /// Migrations so far (uid → migration), for tests and reports.
    pub fn migrations(&self) -> &BTreeMap<String, Migration> {
        &self.kubevirt.migrations
    }
}

/// The migration a target pod belongs to (its `kubevirt.io/migrationJobUID` label).
pub(super) fn migration_of(store: &View, namespace: &str, pod: &str) -> Option<String> {
    store.pod(namespace, pod)?.labels.get(kubevirt::LABEL_MIGRATION_JOB_UID).cloned()
}

/// KubeVirt's anti-affinity of a target to its VMI's other pods: never on the source's host.
fn keep_off_own_pods(vmi_uid: &str) -> PodAntiAffinity {
    PodAntiAffinity {
        required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: kubevirt::LABEL_CREATED_BY.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec![vmi_uid.to_owned()]),
                }]),
                match_labels: None,
            }),
            topology_key: "kubernetes.io/hostname".to_owned(),
            ..PodAffinityTerm::default()
        }]),
        preferred_during_scheduling_ignored_during_execution: None,
    }
}
