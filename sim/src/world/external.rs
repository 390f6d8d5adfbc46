//! The GPU controller run outside the twin (issue 40's external-controller mode): the real `gpuclaim controller`
//! processes, started by the served twin's host, reconcile through the served API. The world's own controller
//! deploys no replica and never wakes to act; KubeVirt, the scheduler, kubelets and tenants stay the twin's actors.
//!
//! What the world cannot do itself it asks its host to do ([`HostAction`]): a scenario's `controllerCrash` kills
//! a replica's process. The host tells the world whether a replica leads (it reads the Lease), for the invariants
//! that hold only while one does.

use crate::world::{World, WorldError};

/// What the world asks of the host running the controller's processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostAction {
    /// A replica's process crashes (killed); the kubelet restarts it unless `restart` is false.
    CrashReplica { index: usize, restart: bool },
    /// The webhook Service's ready endpoints are set to this many (a scenario's outage).
    WebhookEndpoints(u32),
}

/// The state of the external-controller mode.
#[derive(Debug, Default)]
pub(crate) struct External {
    actions: Vec<HostAction>,
    /// Whether a replica leads now, as the host last said.
    leads: bool,
}

impl World {
    /// Hands the GPU controller over to processes outside the world: no replica of the world's own is deployed,
    /// so it never leads and never writes, and the webhooks' endpoints are the host's.
    pub fn hand_over_controller(&mut self) {
        self.deployment = crate::gpu_controller::deployment::Deployment::default();
        self.external = Some(External::default());
    }

    /// Whether the GPU controller runs outside the world.
    pub fn controller_outside(&self) -> bool {
        self.external.is_some()
    }

    /// What the world asked of its host since the last call.
    pub fn take_host_actions(&mut self) -> Vec<HostAction> {
        self.external.as_mut().map(|external| std::mem::take(&mut external.actions)).unwrap_or_default()
    }

    /// The host says whether a replica leads now (the Lease names a live replica).
    pub fn set_outside_leader(&mut self, leads: bool) {
        if let Some(external) = &mut self.external {
            external.leads = leads;
        }
    }

    /// Whether an outside replica leads (`None`: the controller is the world's own).
    pub(crate) fn outside_leads(&self) -> Option<bool> {
        self.external.as_ref().map(|external| external.leads)
    }

    /// Asks the host for `action` and logs the request; `false` when the controller is the world's own.
    pub(crate) fn ask_host(&mut self, action: HostAction) -> Result<bool, WorldError> {
        let Some(external) = &mut self.external else { return Ok(false) };
        let (object, what) = match &action {
            HostAction::CrashReplica { index, .. } => (format!("replica {index}"), "CrashAsked"),
            HostAction::WebhookEndpoints(ready) => (format!("Service endpoints ready={ready}"), "OutageAsked"),
        };
        external.actions.push(action);
        self.record("host", &object, what, &[])?;
        Ok(true)
    }
}
