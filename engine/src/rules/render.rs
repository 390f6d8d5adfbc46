//! The VM render rule: how a VM's `gpus` list becomes the VMI template.

use std::fmt;

use crate::keys;
use crate::model::GpuDevice;
use crate::references::{GpuEntry, entries_json};

use super::Refusal;

/// What the render writes into the VMI template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmRender {
    /// No GPUs at all.
    Nothing,
    /// Raw names: one `spec.domain.devices.gpus` entry per name, no claims involved.
    Raw(Vec<GpuDevice>),
    /// References: only the claims label ([`keys::LABEL_CLAIMS`]) and this claims annotation value; the VMI
    /// webhook resolves them.
    References { annotation: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenderRefusal {
    /// Raw names and references in one list.
    MixedList,
    /// References while the platform switch is off (no webhook would resolve them).
    ClaimsDisabled,
    /// An entry with an empty name, claim or class.
    EmptyField { index: usize },
    /// A claim template ordering zero units.
    CountNotPositive { index: usize },
}

impl fmt::Display for RenderRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderRefusal::MixedList => {
                write!(f, "gpus lists raw device names and claim references together; use one or the other")
            }
            RenderRefusal::ClaimsDisabled => write!(
                f,
                "gpus lists claim references but GPU claims are not enabled on this cluster ({}.{} is not \"true\")",
                keys::CLUSTER_VALUES,
                keys::CLUSTER_SWITCH
            ),
            RenderRefusal::EmptyField { index } => write!(f, "gpus[{index}] has an empty name, claim or class"),
            RenderRefusal::CountNotPositive { index } => {
                write!(f, "gpus[{index}].claimTemplate.count must be at least 1")
            }
        }
    }
}

impl Refusal for RenderRefusal {
    fn reason(&self) -> &'static str {
        match self {
            RenderRefusal::MixedList => "MixedList",
            RenderRefusal::ClaimsDisabled => "ClaimsDisabled",
            RenderRefusal::EmptyField { .. } => "EmptyField",
            RenderRefusal::CountNotPositive { .. } => "CountNotPositive",
        }
    }
}

/// Renders a VM's `gpus` list: raw names xor references; references only when `claims_enabled` (the `_cluster`
/// switch) is on.
pub fn render_vm(gpus: &[GpuEntry], claims_enabled: bool) -> Result<VmRender, RenderRefusal> {
    for (index, entry) in gpus.iter().enumerate() {
        check_entry(index, entry)?;
    }
    let references = gpus.iter().filter(|e| e.is_reference()).count();
    if references == 0 {
        if gpus.is_empty() {
            return Ok(VmRender::Nothing);
        }
        return Ok(VmRender::Raw(raw_devices(gpus)));
    }
    if references != gpus.len() {
        return Err(RenderRefusal::MixedList);
    }
    if !claims_enabled {
        return Err(RenderRefusal::ClaimsDisabled);
    }
    Ok(VmRender::References { annotation: entries_json(gpus) })
}

fn check_entry(index: usize, entry: &GpuEntry) -> Result<(), RenderRefusal> {
    match entry {
        GpuEntry::Name(name) | GpuEntry::Claim(name) if name.is_empty() => Err(RenderRefusal::EmptyField { index }),
        GpuEntry::ClaimTemplate(t) if t.class.is_empty() => Err(RenderRefusal::EmptyField { index }),
        GpuEntry::ClaimTemplate(t) if t.count == 0 => Err(RenderRefusal::CountNotPositive { index }),
        _ => Ok(()),
    }
}

/// KubeVirt wants a unique name per GPU entry; the render numbers them in list order.
fn raw_devices(gpus: &[GpuEntry]) -> Vec<GpuDevice> {
    gpus.iter()
        .enumerate()
        .filter_map(|(index, entry)| match entry {
            GpuEntry::Name(device) => Some(GpuDevice { name: format!("gpu{index}"), device_name: device.clone() }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::references::{ClaimTemplate, parse_entries};

    fn entries(json: &str) -> Vec<GpuEntry> {
        parse_entries(json).unwrap()
    }

    #[test]
    fn raw_names_render_one_gpu_entry_each() {
        let render =
            render_vm(&entries(r#"[{"name":"nvidia.com/GA102GL_A10"},{"name":"nvidia.com/GA102GL_A10"}]"#), false);
        assert_eq!(
            render,
            Ok(VmRender::Raw(vec![
                GpuDevice { name: "gpu0".into(), device_name: "nvidia.com/GA102GL_A10".into() },
                GpuDevice { name: "gpu1".into(), device_name: "nvidia.com/GA102GL_A10".into() },
            ]))
        );
    }

    #[test]
    fn references_render_only_as_the_annotation() {
        let list = entries(r#"[{"claim":"train-a"},{"claimTemplate":{"class":"h100","count":2}}]"#);
        assert_eq!(
            render_vm(&list, true),
            Ok(VmRender::References {
                annotation: r#"[{"claim":"train-a"},{"claimTemplate":{"class":"h100","count":2}}]"#.into()
            })
        );
    }

    #[test]
    fn no_gpus_render_nothing() {
        assert_eq!(render_vm(&[], false), Ok(VmRender::Nothing));
    }

    #[test]
    fn refusals_name_their_reason() {
        let mixed = entries(r#"[{"name":"nvidia.com/GA102GL_A10"},{"claim":"train-a"}]"#);
        assert_eq!(render_vm(&mixed, true), Err(RenderRefusal::MixedList));
        let held = entries(r#"[{"claim":"train-a"}]"#);
        let refusal = render_vm(&held, false).unwrap_err();
        assert_eq!(refusal, RenderRefusal::ClaimsDisabled);
        assert_eq!(
            refusal.to_string(),
            r#"gpus lists claim references but GPU claims are not enabled on this cluster (_cluster.gpu-claims-enabled is not "true")"#
        );
        let zero = [GpuEntry::ClaimTemplate(ClaimTemplate { class: "h100".into(), count: 0 })];
        assert_eq!(render_vm(&zero, true), Err(RenderRefusal::CountNotPositive { index: 0 }));
        let empty = [GpuEntry::Claim(String::new())];
        assert_eq!(render_vm(&empty, true).unwrap_err().to_string(), "gpus[0] has an empty name, claim or class");
    }

    #[test]
    fn an_entry_with_two_kinds_does_not_parse() {
        assert!(parse_entries(r#"[{"name":"a","claim":"b"}]"#).is_err());
        assert!(parse_entries(r#"[{"claimTemplate":{"class":"h100","count":1,"extra":1}}]"#).is_err());
    }
}
