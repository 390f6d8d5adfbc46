//! The host of the GPU controller run outside the world (`twin serve --external-controller`): what the world's
//! thread asks of the controller's processes ([`crate::world_thread::Host`]), answered from the kubelet stand-in's
//! replicas and the served store.
//!
//! - **Ready** (the story's clock starts): every replica the kubelet runs is ready, a webhook configuration is
//!   stored with its CA bundle injected, and a Lease names a ready replica as its holder. Until then the story waits
//!   at virtual zero, however long the install takes.
//! - **Leads**: a Lease's holder is a ready replica (a crashed leader's process is gone at once; its Lease lingers
//!   until it expires, as on a cluster, and the invariants that hold only while a replica leads are not checked
//!   meanwhile).
//! - **A crash** kills the replica's process (SIGKILL); the kubelet restarts it after the world's restart delay,
//!   scaled to the twin's speed.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gpuclaim_sim::served::store::{ResourceId, Snapshot};
use gpuclaim_sim::world::HostAction;
use serde_json::Value;

use crate::kubelet::Kubelet;
use crate::world_thread::Host;

const LEASES: ResourceId = ResourceId { group: "coordination.k8s.io", plural: "leases" };
const WEBHOOK_CONFIGURATIONS: [ResourceId; 2] = [
    ResourceId { group: "admissionregistration.k8s.io", plural: "mutatingwebhookconfigurations" },
    ResourceId { group: "admissionregistration.k8s.io", plural: "validatingwebhookconfigurations" },
];

/// The outside controller's host.
pub struct OutsideHost {
    pub kubelet: Kubelet,
    pub snapshot: Arc<RwLock<Snapshot>>,
    /// How long the kubelet waits before it restarts a crashed replica (the world's delay over the speed).
    pub restart_after: Duration,
    /// Said once: the replicas' addresses (`replica NAME at ADDRESS`), on standard output.
    told: BTreeSet<String>,
}

impl OutsideHost {
    pub fn new(kubelet: Kubelet, snapshot: Arc<RwLock<Snapshot>>, restart_after: Duration) -> OutsideHost {
        OutsideHost { kubelet, snapshot, restart_after, told: BTreeSet::new() }
    }

    /// The replicas ready now, by pod name; each new one said once on standard output.
    fn ready_replicas(&mut self) -> BTreeSet<String> {
        let mut ready = BTreeSet::new();
        for pod in self.kubelet.pods().list() {
            if self.told.insert(pod.name.clone()) {
                println!("replica {} at {}", pod.name, pod.address);
            }
            if pod.ready {
                ready.insert(pod.name);
            }
        }
        ready
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a stored Lease's holder is one of `ready`.
    fn held_by(&self, ready: &BTreeSet<String>) -> bool {
        let snapshot = self.read();
        snapshot.objects(LEASES, None, None).any(|(_, stored)| {
            let holder = stored.object.pointer("/spec/holderIdentity").and_then(Value::as_str);
            holder.is_some_and(|holder| ready.contains(holder))
        })
    }

    /// Whether a webhook configuration is stored and every one has its CA bundle.
    fn webhooks_configured(&self) -> bool {
        let snapshot = self.read();
        let mut configurations = WEBHOOK_CONFIGURATIONS.iter().flat_map(|id| snapshot.objects(*id, None, None));
        let mut any = false;
        let all_injected = configurations.all(|(_, stored)| {
            any = true;
            let webhooks = stored.object.get("webhooks").and_then(Value::as_array);
            webhooks.into_iter().flatten().all(|webhook| {
                webhook.pointer("/clientConfig/caBundle").and_then(Value::as_str).is_some_and(|ca| !ca.is_empty())
            })
        });
        any && all_injected
    }
}

impl Host for OutsideHost {
    fn ready(&mut self) -> bool {
        let pods = self.kubelet.pods().list().len();
        let ready = self.ready_replicas();
        pods > 0 && ready.len() == pods && self.webhooks_configured() && self.held_by(&ready)
    }

    fn leads(&mut self) -> bool {
        let ready = self.ready_replicas();
        self.held_by(&ready)
    }

    fn act(&mut self, action: HostAction) {
        match action {
            HostAction::CrashReplica { index, restart: _ } => {
                // A replica whose pod is gone (not restarted in place) comes back as a new pod on a cluster; the
                // kubelet stand-in restarts it in place either way.
                if let Err(error) = self.kubelet.crash(index, self.restart_after) {
                    eprintln!("cannot crash replica {index}: {error}");
                }
            }
            HostAction::WebhookEndpoints(ready) => {
                eprintln!("a webhook outage ({ready} endpoints) is not run with the controller outside: ignored");
            }
        }
    }
}
