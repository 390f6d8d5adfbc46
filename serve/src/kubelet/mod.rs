//! A stand-in for the kubelet and the Deployment controller (issue 40): it runs the stored Deployments whose pod
//! template's first container runs this binary's controller (`args[0] == "controller"`) as child processes of a
//! configured binary, `spec.replicas` of them, and publishes them ([`Pods`]) for Service endpoints
//! ([`crate::endpoints`]).
//!
//! Each replica:
//! - has its own loopback address `127.A.B.N` (A.B chosen per run, N the replica's index + 2), so the template's
//!   ports are used as written: every `--…-bind-address=:PORT` is bound there ([`pod::rewrite_args`]);
//! - is named as a Deployment's pod (`NAME-HASH-SUFFIX`, stable per index), and gets it as `POD_NAME` and
//!   `HOSTNAME`, besides the template's environment (values and the pod's own fields);
//! - gets each Secret volume as files in its own directory (the flag naming the mount path points there), rewritten
//!   when the Secret changes; it is started only once every non-optional Secret it mounts exists;
//! - gets `KUBECONFIG`: the served twin with its CA, and a token for the pod's service account ([`Credentials`]);
//! - writes its standard output and error to `LOGS/POD.log`;
//! - is probed for readiness (its `readinessProbe`) every 200 ms of wall time ([`process`]);
//! - is restarted when it exits, or [`Kubelet::crash`]ed on purpose; stopped with SIGTERM, its
//!   `terminationGracePeriodSeconds` at most, then SIGKILL; and killed, whatever happens, when the kubelet is
//!   dropped.
//!
//! A template change stops every replica of the old template and starts the new one's (no rolling update). The
//! Deployment's status is written as the Deployment controller writes it ([`status`]). Not done: other
//! Deployments, images, init and sidecar containers, liveness and startup probes, preStop hooks, Pod objects in the
//! API (the world's own pods are the scenario's).

pub mod pod;
pub mod probe;
pub mod process;
pub mod status;
pub mod volumes;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use gpuclaim_sim::served::resources;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use crate::shared::Shared;
use pod::PodTemplate;
use process::{Control, Groups, Health, Launch};

/// How often the snapshot is looked at for Deployments and Secrets.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The most replicas of one Deployment run (the last octet of their addresses: 2 to 254).
pub const REPLICAS_MAX: usize = 253;

/// The tokens replicas authenticate with: a token for a pod's service account (an error says why none can be made).
pub trait Credentials: Send + Sync {
    fn token_for(&self, namespace: &str, service_account: &str) -> Result<String, String>;
}

impl std::fmt::Debug for dyn Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials")
    }
}

/// Every service account gets the same token (a test's: one user for every replica).
pub struct SameToken(pub String);

impl Credentials for SameToken {
    fn token_for(&self, _namespace: &str, _service_account: &str) -> Result<String, String> {
        Ok(self.0.clone())
    }
}

/// The served twin's own tokens: one minted for the pod's service account, as a projected token would be.
impl Credentials for crate::auth::Tokens {
    fn token_for(&self, namespace: &str, service_account: &str) -> Result<String, String> {
        self.mint(namespace, service_account).map_err(|error| error.to_string())
    }
}

/// How the kubelet runs replicas.
pub struct KubeletConfig {
    /// The binary every replica runs (this one, as the image would).
    pub binary: PathBuf,
    /// Appended to every replica's arguments.
    pub extra_args: Vec<String>,
    /// `POD.log` and each replica's files go there.
    pub logs: PathBuf,
    pub credentials: Arc<dyn Credentials>,
    /// The served twin's URL and CA (PEM), for the replicas' kubeconfigs.
    pub server: String,
    pub ca_pem: String,
}

/// A replica as Services see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub deployment: String,
    pub index: usize,
    pub name: String,
    pub address: Ipv4Addr,
    pub labels: BTreeMap<String, String>,
    /// Container ports by name.
    pub ports: BTreeMap<String, u16>,
    pub ready: bool,
    pub restarts: u32,
}

/// The replicas running now, by `namespace/name`.
#[derive(Clone, Debug, Default)]
pub struct Pods(Arc<RwLock<BTreeMap<String, (PodInfo, Health)>>>);

impl Pods {
    /// Every replica, with its readiness now.
    pub fn list(&self) -> Vec<PodInfo> {
        let pods = self.0.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let info = |(pod, health): &(PodInfo, Health)| PodInfo {
            ready: health.ready.load(Ordering::Relaxed),
            restarts: health.restarts.load(Ordering::Relaxed),
            ..pod.clone()
        };
        pods.values().map(info).collect()
    }

    fn insert(&self, pod: PodInfo, health: Health) {
        let key = format!("{}/{}", pod.namespace, pod.name);
        self.0.write().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(key, (pod, health));
    }

    fn remove(&self, namespace: &str, name: &str) {
        self.0.write().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&format!("{namespace}/{name}"));
    }
}

/// A replica that cannot be crashed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KubeletError {
    #[error("no controller replica of index {0} runs")]
    NoReplica(usize),
}

/// (namespace, Deployment name).
type DeploymentKey = (String, String);

/// The control channels of the running replicas, by Deployment and index.
type Controls = Arc<Mutex<BTreeMap<(DeploymentKey, usize), UnboundedSender<Control>>>>;

/// The running kubelet: its replicas' table, and what crashes and stops them. Clones share it; the last one
/// dropped kills every replica still running.
#[derive(Clone)]
pub struct Kubelet {
    inner: Arc<Inner>,
}

struct Inner {
    pods: Pods,
    snapshot: Arc<RwLock<gpuclaim_sim::served::store::Snapshot>>,
    controls: Controls,
    groups: Groups,
    logs: PathBuf,
    stop: Mutex<Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>>,
}

impl Inner {
    /// Ends everything at once: the sync loop aborted, every supervisor's channel dropped (each kills its group
    /// and ends, starting nothing again), every group killed.
    fn abort(&self) {
        if let Some((_, task)) = self.stop.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            task.abort();
        }
        self.controls.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
        self.groups.kill_all();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.abort();
    }
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet").field("logs", &self.inner.logs).field("pods", &self.inner.pods.list()).finish()
    }
}

/// The network `127.A.B.0/24` of this run: A.B from the process id and a count of kubelets started in it, so
/// parallel runs (and tests) do not share addresses. Neither A nor B is 0 or 255.
fn network() -> [u8; 2] {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let count = STARTED.fetch_add(1, Ordering::Relaxed) as u32;
    let mixed = std::process::id().wrapping_mul(2_654_435_761).wrapping_add(count.wrapping_mul(40_503));
    [1 + (mixed >> 8) as u8 % 254, 1 + mixed as u8 % 254]
}

impl Kubelet {
    /// Starts the kubelet over `shared`'s snapshot.
    pub fn start(config: KubeletConfig, shared: Arc<Shared>) -> Result<Kubelet, std::io::Error> {
        std::fs::create_dir_all(&config.logs)?;
        let pods = Pods::default();
        let controls = Controls::default();
        let groups = Groups::default();
        let logs = config.logs.clone();
        let snapshot = Arc::clone(&shared.snapshot);
        let sync = Syncer {
            config,
            shared,
            pods: pods.clone(),
            controls: Arc::clone(&controls),
            groups: groups.clone(),
            network: network(),
            running: BTreeMap::new(),
            refused: BTreeMap::new(),
            stopping: Vec::new(),
            statuses: BTreeMap::new(),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(sync.run(stopped));
        let inner = Inner { pods, snapshot, controls, groups, logs, stop: Mutex::new(Some((stop, task))) };
        Ok(Kubelet { inner: Arc::new(inner) })
    }

    /// The replicas running now.
    pub fn pods(&self) -> Pods {
        self.inner.pods.clone()
    }

    /// The snapshot the kubelet runs from (the Deployments, Secrets and Services it reads).
    pub fn snapshot(&self) -> Arc<RwLock<gpuclaim_sim::served::store::Snapshot>> {
        Arc::clone(&self.inner.snapshot)
    }

    /// Where the replicas' logs are.
    pub fn logs(&self) -> &std::path::Path {
        &self.inner.logs
    }

    /// How many replica processes (process groups) run now.
    pub fn processes(&self) -> usize {
        self.inner.groups.count()
    }

    /// Kills (SIGKILL) the controller replica of index `index` (of the first controller Deployment, by namespace
    /// and name) and starts it again after `restart_after`, as a node's kubelet restarts a crashed container.
    pub fn crash(&self, index: usize, restart_after: Duration) -> Result<(), KubeletError> {
        let controls = self.inner.controls.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let control = controls.iter().find(|((_, i), _)| *i == index).map(|(_, control)| control);
        match control.map(|control| control.send(Control::Crash { restart_after })) {
            Some(Ok(())) => Ok(()),
            _ => Err(KubeletError::NoReplica(index)),
        }
    }

    /// Kills every replica now (SIGKILL) and ends the kubelet, without the grace periods: what a server that ends
    /// otherwise than by [`Kubelet::stop`] (a panic, its future dropped) does, whoever still holds a clone.
    pub fn abort(&self) {
        self.inner.abort();
    }

    /// Stops every replica (SIGTERM, its grace period, SIGKILL) and the kubelet; returns once none runs.
    pub async fn stop(&self) {
        let stop = self.inner.stop.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some((stop, task)) = stop {
            let _ = stop.send(());
            let _ = task.await;
        }
        self.inner.groups.kill_all();
    }
}

/// One running replica, as the sync loop keeps it.
struct Replica {
    pod: String,
    dir: PathBuf,
    control: UnboundedSender<Control>,
    task: JoinHandle<()>,
    /// Secret name → the revision its volume was written at.
    volumes: BTreeMap<String, u64>,
}

/// The replicas of one Deployment's template.
struct Running {
    template: PodTemplate,
    replicas: BTreeMap<usize, Replica>,
    /// The Deployment's place among the ones run: the B of its replicas' addresses is offset by it.
    ordinal: u8,
}

/// The loop that makes the replicas match the stored Deployments.
struct Syncer {
    config: KubeletConfig,
    shared: Arc<Shared>,
    pods: Pods,
    controls: Controls,
    groups: Groups,
    network: [u8; 2],
    running: BTreeMap<DeploymentKey, Running>,
    /// Deployments whose template cannot be run → the reason, said once.
    refused: BTreeMap<DeploymentKey, String>,
    /// Supervisors told to stop, to wait for.
    stopping: Vec<JoinHandle<()>>,
    /// The status last written to each Deployment.
    statuses: BTreeMap<DeploymentKey, Value>,
}

impl Syncer {
    async fn run(mut self, mut stop: tokio::sync::oneshot::Receiver<()>) {
        loop {
            self.sync();
            self.publish_statuses().await;
            tokio::select! {
                () = tokio::time::sleep(POLL_INTERVAL) => {}
                _ = &mut stop => break,
            }
        }
        let keys: Vec<DeploymentKey> = self.running.keys().cloned().collect();
        for key in keys {
            self.stop_deployment(&key);
        }
        for task in std::mem::take(&mut self.stopping) {
            let _ = task.await;
        }
    }

    fn secret(&self, namespace: &str, name: &str) -> Option<(u64, Arc<Value>)> {
        let snapshot = self.shared.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let secrets = resources::find("", "v1", "secrets").expect("served").id();
        snapshot.get(secrets, namespace, name).map(|stored| (stored.revision, Arc::clone(&stored.object)))
    }

    fn deployments(&self) -> BTreeMap<DeploymentKey, Arc<Value>> {
        let snapshot = self.shared.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let deployments = resources::find("apps", "v1", "deployments").expect("served").id();
        let stored = snapshot.objects(deployments, None, None);
        stored
            .filter(|(_, stored)| pod::runs_controller(&stored.object))
            .map(|((namespace, name), stored)| ((namespace.to_string(), name.to_string()), Arc::clone(&stored.object)))
            .collect()
    }

    /// One look: Deployments gone or changed are stopped, replicas started or stopped to the count asked, volumes
    /// refreshed.
    fn sync(&mut self) {
        self.stopping.retain(|task| !task.is_finished());
        let deployments = self.deployments();
        let gone: Vec<DeploymentKey> =
            self.running.keys().filter(|key| !deployments.contains_key(*key)).cloned().collect();
        for key in gone {
            self.stop_deployment(&key);
            self.running.remove(&key);
        }
        for (key, deployment) in deployments {
            let template = match pod::template(&deployment) {
                Ok(template) => template,
                Err(error) => {
                    if self.refused.insert(key.clone(), error.to_string()).as_deref() != Some(&error.to_string()) {
                        tracing::warn!(%error, "the kubelet cannot run a Deployment");
                    }
                    continue;
                }
            };
            self.refused.remove(&key);
            if self.running.get(&key).is_some_and(|running| running.template.hash != template.hash) {
                self.stop_deployment(&key);
                self.running.remove(&key);
            }
            if !self.running.contains_key(&key) {
                let ordinal = (0..=u8::MAX).find(|o| self.running.values().all(|r| r.ordinal != *o)).unwrap_or(0);
                self.running.insert(key.clone(), Running { template, replicas: BTreeMap::new(), ordinal });
            }
            self.scale(&key, pod::replicas(&deployment).min(REPLICAS_MAX));
            self.refresh_volumes(&key);
        }
    }

    /// Writes each run Deployment's status where it changed, as the Deployment controller would.
    async fn publish_statuses(&mut self) {
        let pods = self.pods.list();
        let deployments = self.deployments();
        self.statuses.retain(|key, _| deployments.contains_key(key));
        for (key, deployment) in deployments {
            let own: Vec<PodInfo> =
                pods.iter().filter(|pod| pod.namespace == key.0 && pod.deployment == key.1).cloned().collect();
            let status = status::status(&deployment, &own);
            if self.statuses.get(&key) == Some(&status) {
                continue;
            }
            match self.write_status(&key, &status).await {
                Ok(()) => {
                    self.statuses.insert(key, status);
                }
                Err(message) => tracing::warn!(deployment = %format!("{}/{}", key.0, key.1), %message,
                    "the kubelet cannot write a Deployment's status"),
            }
        }
    }

    async fn write_status(&self, key: &DeploymentKey, status: &Value) -> Result<(), String> {
        let request = gpuclaim_sim::served::writes::WriteRequest {
            verb: gpuclaim_sim::served::writes::Verb::Patch,
            resource: resources::find("apps", "v1", "deployments").expect("served"),
            namespace: Some(key.0.clone()),
            name: Some(key.1.clone()),
            subresource: Some("status".to_owned()),
            content_type: "application/merge-patch+json".to_owned(),
            body: serde_json::json!({"status": status}).to_string().into_bytes(),
            user: status::user(),
            dry_run: false,
            field_validation: None,
        };
        let answer = self.shared.writes.send(request).ok_or("the world's write queue is full or stopped")?;
        let answer = answer.await.map_err(|_| "the world stopped".to_owned())?;
        match answer.code < 300 {
            true => Ok(()),
            false => {
                Err(format!("{}: {}", answer.code, answer.body.get("message").and_then(Value::as_str).unwrap_or("")))
            }
        }
    }

    fn scale(&mut self, key: &DeploymentKey, count: usize) {
        let Some(running) = self.running.get_mut(key) else { return };
        let extra = running.replicas.split_off(&count);
        for (index, replica) in extra {
            self.stop_replica(key, index, replica);
        }
        for index in 0..count {
            let running = &self.running[key];
            if running.replicas.contains_key(&index) {
                continue;
            }
            match self.start_replica(key, index) {
                Ok(Some(replica)) => {
                    self.running.get_mut(key).expect("present").replicas.insert(index, replica);
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(deployment = %format!("{}/{}", key.0, key.1), index, %error,
                    "the kubelet cannot start a replica"),
            }
        }
    }

    fn address(&self, ordinal: u8, index: usize) -> Ipv4Addr {
        let [a, b] = self.network;
        let b = 1 + (u16::from(b) - 1 + u16::from(ordinal)) % 254;
        Ipv4Addr::new(127, a, b as u8, (index + 2) as u8)
    }

    /// Starts replica `index`, once every Secret it mounts is there (`None` before).
    fn start_replica(&mut self, key: &DeploymentKey, index: usize) -> Result<Option<Replica>, String> {
        let running = &self.running[key];
        let template = running.template.clone();
        let (namespace, deployment) = key;
        let mut secrets = BTreeMap::new();
        for mount in &template.secret_mounts {
            match self.secret(namespace, &mount.secret) {
                Some(secret) => {
                    secrets.insert(mount.secret.clone(), secret);
                }
                None if mount.optional => {}
                None => return Ok(None),
            }
        }
        let name = pod::pod_name(deployment, &template.hash, index);
        let address = self.address(running.ordinal, index);
        let dir = self.config.logs.join(&name);
        let mut mounts = Vec::new();
        let mut volumes = BTreeMap::new();
        for mount in &template.secret_mounts {
            let local = dir.join("volumes").join(&mount.volume);
            std::fs::create_dir_all(&local).map_err(|error| format!("{}: {error}", local.display()))?;
            if let Some((revision, secret)) = secrets.get(&mount.secret) {
                volumes::write_secret(&local, secret).map_err(|error| error.to_string())?;
                volumes.insert(mount.secret.clone(), *revision);
            }
            mounts.push((mount.mount_path.clone(), local));
        }
        let kubeconfig = dir.join("kubeconfig");
        let pod = pod::Pod { name: &name, namespace, address };
        let env = pod::environment(&template, &pod, &kubeconfig);
        let credentials = Arc::clone(&self.config.credentials);
        let (server, ca_pem) = (self.config.server.clone(), self.config.ca_pem.clone());
        let (account_namespace, account) = (namespace.clone(), template.service_account.clone());
        let write_kubeconfig = move || {
            let token = credentials.token_for(&account_namespace, &account).map_err(std::io::Error::other)?;
            let text = crate::certs::kubeconfig(&server, &ca_pem, &token);
            volumes::write_atomically(&kubeconfig, text.as_bytes()).map_err(std::io::Error::other)
        };
        let launch = Launch {
            program: self.config.binary.clone(),
            args: pod::rewrite_args(&template.args, address, &mounts, &self.config.extra_args),
            env,
            dir: dir.clone(),
            log: self.config.logs.join(format!("{name}.log")),
            grace: template.grace,
            probe: template.readiness.clone(),
            address: address.into(),
            before_start: Box::new(write_kubeconfig),
        };
        let health = Health::default();
        let (control, commands) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(process::supervise(launch, health.clone(), self.groups.clone(), commands));
        let info = PodInfo {
            namespace: namespace.clone(),
            deployment: deployment.clone(),
            index,
            name: name.clone(),
            address,
            labels: template.labels.clone(),
            ports: template.ports.clone(),
            ready: false,
            restarts: 0,
        };
        self.pods.insert(info, health);
        self.controls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert((key.clone(), index), control.clone());
        Ok(Some(Replica { pod: name, dir, control, task, volumes }))
    }

    /// Rewrites the volumes whose Secret changed since they were written.
    fn refresh_volumes(&mut self, key: &DeploymentKey) {
        let Some(running) = self.running.get(key) else { return };
        let mut updates = Vec::new();
        for (index, replica) in &running.replicas {
            for mount in &running.template.secret_mounts {
                let Some((revision, secret)) = self.secret(&key.0, &mount.secret) else { continue };
                if replica.volumes.get(&mount.secret) != Some(&revision) {
                    let local = replica.dir.join("volumes").join(&mount.volume);
                    updates.push((*index, mount.secret.clone(), local, revision, secret));
                }
            }
        }
        for (index, secret_name, local, revision, secret) in updates {
            match volumes::write_secret(&local, &secret) {
                Ok(()) => {
                    let running = self.running.get_mut(key).expect("present");
                    if let Some(replica) = running.replicas.get_mut(&index) {
                        replica.volumes.insert(secret_name, revision);
                    }
                }
                Err(error) => tracing::warn!(%error, "the kubelet cannot update a Secret volume"),
            }
        }
    }

    fn stop_deployment(&mut self, key: &DeploymentKey) {
        let Some(running) = self.running.get_mut(key) else { return };
        let replicas = std::mem::take(&mut running.replicas);
        for (index, replica) in replicas {
            self.stop_replica(key, index, replica);
        }
    }

    /// Tells a replica to stop; it leaves the table now (a terminating pod is no endpoint).
    fn stop_replica(&mut self, key: &DeploymentKey, index: usize, replica: Replica) {
        let _ = replica.control.send(Control::Stop);
        self.controls.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&(key.clone(), index));
        self.pods.remove(&key.0, &replica.pod);
        self.stopping.push(replica.task);
    }
}
