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
//! - **A webhook outage** (a scenario's `SetWebhookReplicas`) leaves that many of the ready replicas behind the
//!   Services, as the endpoints controller does when pods fail their readiness: 0 is an outage, and the webhooks'
//!   failure policies decide ([`Outage`]). The processes keep running.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gpuclaim_sim::served::store::{ResourceId, Snapshot};
use gpuclaim_sim::world::HostAction;
use serde_json::Value;

use crate::endpoints::ResolveService;
use crate::kubelet::Kubelet;
use crate::world_thread::Host;

const LEASES: ResourceId = ResourceId { group: "coordination.k8s.io", plural: "leases" };
const WEBHOOK_CONFIGURATIONS: [ResourceId; 2] = [
    ResourceId { group: "admissionregistration.k8s.io", plural: "mutatingwebhookconfigurations" },
    ResourceId { group: "admissionregistration.k8s.io", plural: "validatingwebhookconfigurations" },
];

/// How many ready endpoints a scenario's outage leaves behind each Service (`u32::MAX`: all of them).
#[derive(Clone, Debug)]
pub struct Outage(Arc<AtomicU32>);

impl Default for Outage {
    fn default() -> Outage {
        Outage(Arc::new(AtomicU32::new(u32::MAX)))
    }
}

impl Outage {
    pub fn set(&self, ready: u32) {
        self.0.store(ready, Ordering::Relaxed);
    }

    /// The Services resolved by `endpoints`, with at most the outage's count of ready endpoints each.
    pub fn limiting<R: ResolveService>(&self, endpoints: R) -> Limited<R> {
        Limited { endpoints, outage: self.clone() }
    }
}

/// Services resolved under an [`Outage`].
pub struct Limited<R> {
    endpoints: R,
    outage: Outage,
}

impl<R: ResolveService> ResolveService for Limited<R> {
    fn endpoints(&self, namespace: &str, service: &str, port: i32) -> Result<Vec<SocketAddr>, String> {
        let mut ready = self.endpoints.endpoints(namespace, service, port)?;
        ready.truncate(usize::try_from(self.outage.0.load(Ordering::Relaxed)).unwrap_or(usize::MAX));
        match ready.is_empty() {
            true => Err(format!("no endpoints available for service {service:?}")),
            false => Ok(ready),
        }
    }
}

/// The outside controller's host.
pub struct OutsideHost {
    pub kubelet: Kubelet,
    pub snapshot: Arc<RwLock<Snapshot>>,
    /// How long the kubelet waits before it restarts a crashed replica (the world's delay over the speed).
    pub restart_after: Duration,
    /// The endpoints a scenario's outage leaves (the webhook client resolves Services through it).
    pub outage: Outage,
    /// Said once: the replicas' addresses (`replica NAME at ADDRESS`), on standard output.
    told: BTreeSet<String>,
}

impl OutsideHost {
    pub fn new(kubelet: Kubelet, snapshot: Arc<RwLock<Snapshot>>, restart_after: Duration, outage: Outage) -> Self {
        OutsideHost { kubelet, snapshot, restart_after, outage, told: BTreeSet::new() }
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
            HostAction::WebhookEndpoints(ready) => self.outage.set(ready),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two;

    impl ResolveService for Two {
        fn endpoints(&self, _namespace: &str, service: &str, _port: i32) -> Result<Vec<SocketAddr>, String> {
            match service {
                "gpuclaim-webhook" => Ok(vec!["127.0.0.2:9443".parse().unwrap(), "127.0.0.3:9443".parse().unwrap()]),
                _ => Err(format!("service {service:?} not found")),
            }
        }
    }

    #[test]
    fn an_outage_leaves_as_many_endpoints_as_the_scenario_says_and_zero_is_none() {
        let outage = Outage::default();
        let resolved = outage.limiting(Two);
        assert_eq!(resolved.endpoints("ns", "gpuclaim-webhook", 443).unwrap().len(), 2);
        outage.set(1);
        assert_eq!(resolved.endpoints("ns", "gpuclaim-webhook", 443).unwrap(), vec!["127.0.0.2:9443".parse().unwrap()]);
        outage.set(0);
        let error = resolved.endpoints("ns", "gpuclaim-webhook", 443).unwrap_err();
        assert_eq!(error, "no endpoints available for service \"gpuclaim-webhook\"");
        assert_eq!(resolved.endpoints("ns", "other", 443).unwrap_err(), "service \"other\" not found");
        outage.set(2);
        assert_eq!(resolved.endpoints("ns", "gpuclaim-webhook", 443).unwrap().len(), 2, "the outage ends");
    }
}
