//! KubeVirt's VirtualMachineInstance into the compact model (only the fields we read; KubeVirt's types are not
//! ours to vendor).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::{ConvertError, typed};
use crate::model::{GpuDevice, Name, Vmi, VmiPhase};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VmiWire {
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: VmiSpecWire,
    #[serde(default)]
    status: VmiStatusWire,
}

#[derive(Deserialize)]
struct VmiSpecWire {
    domain: DomainWire,
}

#[derive(Deserialize)]
struct DomainWire {
    #[serde(default)]
    devices: DevicesWire,
}

#[derive(Deserialize, Default)]
struct DevicesWire {
    #[serde(default)]
    gpus: Vec<GpuWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GpuWire {
    name: String,
    device_name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct VmiStatusWire {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    node_name: Option<String>,
}

fn vmi_phase(phase: Option<&str>) -> VmiPhase {
    match phase {
        Some("Scheduling") => VmiPhase::Scheduling,
        Some("Scheduled") => VmiPhase::Scheduled,
        Some("Running") => VmiPhase::Running,
        Some("Succeeded") => VmiPhase::Succeeded,
        Some("Failed") => VmiPhase::Failed,
        Some("Unknown") => VmiPhase::Unknown,
        _ => VmiPhase::Pending,
    }
}

pub fn vmi_from_json(object: &Value, namespace: &str) -> Result<Vmi, ConvertError> {
    let wire: VmiWire = typed(object)?;
    let meta = wire.metadata;
    let mut converted = Vmi {
        namespace: meta.namespace.unwrap_or_else(|| namespace.to_owned()).into(),
        name: meta.name.or(meta.generate_name).unwrap_or_default().into(),
        uid: meta.uid.unwrap_or_default().into(),
        resource_version: meta.resource_version.unwrap_or_default().into(),
        labels: Arc::new(meta.labels.unwrap_or_default()),
        annotations: Arc::new(meta.annotations.unwrap_or_default()),
        gpus: Arc::new(
            wire.spec
                .domain
                .devices
                .gpus
                .into_iter()
                .map(|g| GpuDevice { name: g.name, device_name: g.device_name })
                .collect(),
        ),
        phase: vmi_phase(wire.status.phase.as_deref()),
        node_name: wire.status.node_name.filter(|n| !n.is_empty()).map(Name::from),
        deleting: meta.deletion_timestamp.is_some(),
        references_read: Default::default(),
        attachments_read: Default::default(),
    };
    // Read once here, where the VMI enters the engine: the VMI webhook lends it.
    converted.read_references();
    Ok(converted)
}
