//! The VM render rule: how a VM's `gpus` list becomes the VMI template. The same rule is the VM chart's
//! (`charts/virtual-machine`); [`render_values`] reads the chart's values as helm passes them, and a shared table of
//! cases (`charts/virtual-machine/tests/cases.yaml`) holds both to the same answers.

use std::fmt;

use serde_json::{Map, Value};

use crate::keys;
use crate::model::GpuDevice;
use crate::references::{ClaimTemplate, GpuEntry, Parsed};

use super::Refusal;

/// What the render writes into the VMI template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmRender {
    /// No GPUs at all.
    Nothing,
    /// Raw names: one `spec.domain.devices.gpus` entry per name, no claims involved.
    Raw(Vec<GpuDevice>),
    /// References: only the claims label ([`keys::LABEL_CLAIMS`]) and this claims annotation value (written with
    /// what it reads as, which the VMI may keep); the VMI webhook resolves them.
    References { annotation: Parsed<GpuEntry> },
}

/// The keys of a `gpus` entry, exactly one of which it gives, in the order messages list them.
pub const ENTRY_KINDS: [&str; 3] = ["name", "claim", "claimTemplate"];
/// The most units one claim template may order: what the engine's count holds.
pub const TEMPLATE_COUNT_MAX: u64 = u32::MAX as u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenderRefusal {
    /// A value of the wrong shape (the chart's `values.schema.json` refuses the same before any template runs).
    Malformed { field: String, shape: Shape },
    /// An entry giving none, or more than one, of `name`, `claim` and `claimTemplate` (`given`: those it gives).
    NotOneKind { index: usize, given: Vec<&'static str> },
    /// An entry with an empty (or missing) name, claim or class.
    EmptyField { index: usize, field: &'static str },
    /// A claim template whose count is not a whole number from 1 to [`TEMPLATE_COUNT_MAX`].
    CountNotPositive { index: usize },
    /// Raw names and references in one list: the first of each.
    MixedList { raw: usize, reference: usize },
    /// References while the platform switch is off (no webhook would resolve them): the first reference.
    ClaimsDisabled { index: usize },
}

/// What a malformed value should have been.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    List,
    Map,
    String,
    /// The key is none the render knows at that place.
    KnownKey,
}

impl fmt::Display for RenderRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderRefusal::Malformed { field, shape } => match shape {
                Shape::List => write!(f, "{field} must be a list"),
                Shape::Map => write!(f, "{field} must be a map"),
                Shape::String => write!(f, "{field} must be a string"),
                Shape::KnownKey => write!(f, "{field} is not a key the VM render knows"),
            },
            RenderRefusal::NotOneKind { index, given } if given.is_empty() => {
                write!(f, "gpus[{index}] gives none of name, claim and claimTemplate; give exactly one")
            }
            RenderRefusal::NotOneKind { index, given } => write!(
                f,
                "gpus[{index}] gives {}; give exactly one of name, claim and claimTemplate",
                given.join(" and ")
            ),
            RenderRefusal::EmptyField { index, field } => write!(f, "gpus[{index}].{field} is empty"),
            RenderRefusal::CountNotPositive { index } => {
                write!(f, "gpus[{index}].claimTemplate.count must be a whole number from 1 to {TEMPLATE_COUNT_MAX}")
            }
            RenderRefusal::MixedList { raw, reference } => write!(
                f,
                "gpus[{raw}] is a raw device name and gpus[{reference}] a claim reference; list raw names or \
                 references, not both"
            ),
            RenderRefusal::ClaimsDisabled { index } => write!(
                f,
                "gpus[{index}] is a claim reference, but GPU claims are not enabled on this cluster ({}.{} is not \
                 \"true\")",
                keys::CLUSTER_VALUES,
                keys::CLUSTER_SWITCH
            ),
        }
    }
}

impl Refusal for RenderRefusal {
    fn reason(&self) -> &'static str {
        match self {
            RenderRefusal::Malformed { .. } => "Malformed",
            RenderRefusal::NotOneKind { .. } => "NotOneKind",
            RenderRefusal::EmptyField { .. } => "EmptyField",
            RenderRefusal::CountNotPositive { .. } => "CountNotPositive",
            RenderRefusal::MixedList { .. } => "MixedList",
            RenderRefusal::ClaimsDisabled { .. } => "ClaimsDisabled",
        }
    }

    fn code(&self) -> u16 {
        match self {
            RenderRefusal::Malformed { .. } => 422,
            _ => 403,
        }
    }
}

/// Renders a VM's `gpus` list: raw names xor references; references only when `claims_enabled` (the `_cluster`
/// switch) is on. Checks in this order: each entry in list order, then the mix, then the switch (the chart's order).
pub fn render_vm(gpus: &[GpuEntry], claims_enabled: bool) -> Result<VmRender, RenderRefusal> {
    for (index, entry) in gpus.iter().enumerate() {
        check_entry(index, entry)?;
    }
    let first_raw = gpus.iter().position(|e| !e.is_reference());
    let first_reference = gpus.iter().position(GpuEntry::is_reference);
    match (first_raw, first_reference) {
        (None, None) => Ok(VmRender::Nothing),
        (Some(_), None) => Ok(VmRender::Raw(raw_devices(gpus))),
        (Some(raw), Some(reference)) => Err(RenderRefusal::MixedList { raw, reference }),
        (None, Some(index)) if !claims_enabled => Err(RenderRefusal::ClaimsDisabled { index }),
        (None, Some(_)) => Ok(VmRender::References { annotation: Parsed::written(gpus.to_vec()) }),
    }
}

/// A VM chart's values as the render reads them: the `gpus` list and the `_cluster` switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmValues {
    pub gpus: Vec<GpuEntry>,
    pub claims_enabled: bool,
}

/// Renders the VM chart's values (`gpus`, `_cluster`; other keys are the chart's alone), exactly as the chart does.
pub fn render_values(values: &Value) -> Result<VmRender, RenderRefusal> {
    let values = read_values(values)?;
    render_vm(&values.gpus, values.claims_enabled)
}

/// Reads the `gpus` list and the switch from a VM chart's values: first their shapes (what the chart's schema
/// checks), then each entry's rules in list order. A missing or null `gpus` is an empty list, as helm leaves it.
pub fn read_values(values: &Value) -> Result<VmValues, RenderRefusal> {
    let values = values.as_object().ok_or_else(|| malformed("values", Shape::Map))?;
    let entries = match values.get("gpus") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(entries)) => entries.as_slice(),
        Some(_) => return Err(malformed("gpus", Shape::List)),
    };
    let mut maps = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        maps.push(entry_shape(index, entry)?);
    }
    let claims_enabled = claims_switch(values.get(keys::CLUSTER_VALUES))?;
    let mut gpus = Vec::with_capacity(maps.len());
    for (index, entry) in maps.into_iter().enumerate() {
        gpus.push(entry_of(index, entry)?);
    }
    Ok(VmValues { gpus, claims_enabled })
}

fn malformed(field: impl Into<String>, shape: Shape) -> RenderRefusal {
    RenderRefusal::Malformed { field: field.into(), shape }
}

/// The switch is on only as the string `"true"`, as the platform passes it.
fn claims_switch(cluster: Option<&Value>) -> Result<bool, RenderRefusal> {
    let cluster = match cluster {
        None | Some(Value::Null) => return Ok(false),
        Some(Value::Object(cluster)) => cluster,
        Some(_) => return Err(malformed(keys::CLUSTER_VALUES, Shape::Map)),
    };
    match cluster.get(keys::CLUSTER_SWITCH) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::String(switch)) => Ok(switch == keys::TRUE),
        Some(_) => Err(malformed(format!("{}.{}", keys::CLUSTER_VALUES, keys::CLUSTER_SWITCH), Shape::String)),
    }
}

/// One entry's shape: a map of the known keys, names strings, a template a map of `class` (a string) and `count`
/// (any value: whether it is a positive whole number is a rule, [`RenderRefusal::CountNotPositive`]).
fn entry_shape(index: usize, entry: &Value) -> Result<&Map<String, Value>, RenderRefusal> {
    let at = |key: &str| format!("gpus[{index}].{key}");
    let map = entry.as_object().ok_or_else(|| malformed(format!("gpus[{index}]"), Shape::Map))?;
    for (key, value) in map {
        match key.as_str() {
            "name" | "claim" if !value.is_string() => return Err(malformed(at(key), Shape::String)),
            "name" | "claim" => {}
            "claimTemplate" => {
                let template = value.as_object().ok_or_else(|| malformed(at(key), Shape::Map))?;
                for (field, value) in template {
                    match field.as_str() {
                        "class" if !value.is_string() => {
                            return Err(malformed(at(&format!("claimTemplate.{field}")), Shape::String));
                        }
                        "class" | "count" => {}
                        _ => return Err(malformed(at(&format!("claimTemplate.{field}")), Shape::KnownKey)),
                    }
                }
            }
            _ => return Err(malformed(at(key), Shape::KnownKey)),
        }
    }
    Ok(map)
}

/// One entry of the right shape, judged by the rules: exactly one kind, nothing empty, a positive whole count.
fn entry_of(index: usize, entry: &Map<String, Value>) -> Result<GpuEntry, RenderRefusal> {
    let given: Vec<&'static str> = ENTRY_KINDS.into_iter().filter(|kind| entry.contains_key(*kind)).collect();
    if given.len() != 1 {
        return Err(RenderRefusal::NotOneKind { index, given });
    }
    let text = |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or_default().to_owned();
    let parsed = match given[0] {
        "name" => GpuEntry::Name(text(entry.get("name"))),
        "claim" => GpuEntry::Claim(text(entry.get("claim"))),
        _ => {
            let template = &entry["claimTemplate"];
            let class = text(template.get("class"));
            if class.is_empty() {
                return Err(RenderRefusal::EmptyField { index, field: "claimTemplate.class" });
            }
            let count = template.get("count").and_then(whole_count).ok_or(RenderRefusal::CountNotPositive { index })?;
            GpuEntry::ClaimTemplate(ClaimTemplate { class, count })
        }
    };
    check_entry(index, &parsed)?;
    Ok(parsed)
}

/// A count from 1 to [`TEMPLATE_COUNT_MAX`], written as an integer or as a float with no fraction (helm reads every
/// number of a values file as a float, so `2.0` and `2` are the same to the chart).
fn whole_count(value: &Value) -> Option<u32> {
    let number = value.as_number()?;
    let whole = match number.as_u64() {
        Some(whole) => whole,
        None => {
            let float = number.as_f64()?;
            if float.fract() != 0.0 || !(1.0..=TEMPLATE_COUNT_MAX as f64).contains(&float) {
                return None;
            }
            float as u64
        }
    };
    u32::try_from(whole).ok().filter(|count| *count > 0)
}

fn check_entry(index: usize, entry: &GpuEntry) -> Result<(), RenderRefusal> {
    match entry {
        GpuEntry::Name(name) if name.is_empty() => Err(RenderRefusal::EmptyField { index, field: "name" }),
        GpuEntry::Claim(name) if name.is_empty() => Err(RenderRefusal::EmptyField { index, field: "claim" }),
        GpuEntry::ClaimTemplate(t) if t.class.is_empty() => {
            Err(RenderRefusal::EmptyField { index, field: "claimTemplate.class" })
        }
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
    use crate::references::parse_entries;
    use serde_json::json;

    fn entries(json: &str) -> Vec<GpuEntry> {
        parse_entries(json).unwrap()
    }

    fn refusal(values: Value) -> (String, String) {
        let refusal = render_values(&values).unwrap_err();
        (refusal.reason().to_owned(), refusal.to_string())
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
                annotation: Parsed::read(r#"[{"claim":"train-a"},{"claimTemplate":{"class":"h100","count":2}}]"#)
            })
        );
    }

    #[test]
    fn no_gpus_render_nothing() {
        assert_eq!(render_vm(&[], false), Ok(VmRender::Nothing));
        assert_eq!(render_values(&json!({})), Ok(VmRender::Nothing));
        assert_eq!(render_values(&json!({"gpus": null})), Ok(VmRender::Nothing));
    }

    #[test]
    fn refusals_name_the_entry_and_the_reason() {
        let mixed = entries(r#"[{"claim":"train-a"},{"name":"nvidia.com/GA102GL_A10"}]"#);
        let refusal = render_vm(&mixed, true).unwrap_err();
        assert_eq!(refusal, RenderRefusal::MixedList { raw: 1, reference: 0 });
        assert_eq!(
            refusal.to_string(),
            "gpus[1] is a raw device name and gpus[0] a claim reference; list raw names or references, not both"
        );
        let refusal = render_vm(&entries(r#"[{"claim":"train-a"}]"#), false).unwrap_err();
        assert_eq!(refusal.reason(), "ClaimsDisabled");
        assert_eq!(
            refusal.to_string(),
            r#"gpus[0] is a claim reference, but GPU claims are not enabled on this cluster (_cluster.gpu-claims-enabled is not "true")"#
        );
        let zero = [GpuEntry::ClaimTemplate(ClaimTemplate { class: "h100".into(), count: 0 })];
        assert_eq!(render_vm(&zero, true), Err(RenderRefusal::CountNotPositive { index: 0 }));
        let empty = [GpuEntry::Name("nvidia.com/x".into()), GpuEntry::Name(String::new())];
        assert_eq!(render_vm(&empty, true).unwrap_err().to_string(), "gpus[1].name is empty");
    }

    #[test]
    fn values_are_read_as_the_chart_reads_them() {
        let on = json!({"gpu-claims-enabled": "true"});
        let values = json!({"gpus": [{"claimTemplate": {"class": "h100", "count": 2.0}}], "_cluster": on});
        assert_eq!(
            render_values(&values),
            Ok(VmRender::References { annotation: Parsed::read(r#"[{"claimTemplate":{"class":"h100","count":2}}]"#) })
        );
        // The switch is the string "true" only; anything else leaves it off.
        let off = json!({"gpus": [{"claim": "a"}], "_cluster": {"gpu-claims-enabled": "yes"}});
        assert_eq!(refusal(off).0, "ClaimsDisabled");
        assert_eq!(refusal(json!({"gpus": [{"claim": "a"}]})).0, "ClaimsDisabled");
    }

    #[test]
    fn an_entry_must_give_exactly_one_kind() {
        assert_eq!(
            refusal(json!({"gpus": [{"name": "nvidia.com/x"}, {}]})),
            ("NotOneKind".into(), "gpus[1] gives none of name, claim and claimTemplate; give exactly one".into())
        );
        let both = json!({"gpus": [{"claim": "b", "name": "a"}]});
        assert_eq!(refusal(both).1, "gpus[0] gives name and claim; give exactly one of name, claim and claimTemplate");
    }

    #[test]
    fn a_count_must_be_a_positive_whole_number() {
        let message = "gpus[0].claimTemplate.count must be a whole number from 1 to 4294967295";
        for count in [json!(0), json!(-1), json!(1.5), json!("2"), json!(null), json!(4294967296u64), json!(1e300)] {
            let values = json!({"gpus": [{"claimTemplate": {"class": "h100", "count": count}}]});
            assert_eq!(refusal(values), ("CountNotPositive".into(), message.into()), "{count}");
        }
        let missing = json!({"gpus": [{"claimTemplate": {"class": "h100"}}]});
        assert_eq!(refusal(missing).0, "CountNotPositive");
        let classless = json!({"gpus": [{"claimTemplate": {"count": 0}}]});
        assert_eq!(refusal(classless).1, "gpus[0].claimTemplate.class is empty");
    }

    #[test]
    fn shapes_are_checked_before_any_rule() {
        // The chart's schema runs before its templates: a shape error elsewhere wins over a rule broken first.
        let values = json!({"gpus": [{}, {"claim": 7}]});
        assert_eq!(refusal(values), ("Malformed".into(), "gpus[1].claim must be a string".into()));
        assert_eq!(refusal(json!({"gpus": "h100"})).1, "gpus must be a list");
        assert_eq!(refusal(json!({"gpus": ["h100"]})).1, "gpus[0] must be a map");
        assert_eq!(
            refusal(json!({"gpus": [{"claim": "a", "size": 1}]})).1,
            "gpus[0].size is not a key the VM render knows"
        );
        let extra = json!({"gpus": [{"claimTemplate": {"class": "h100", "count": 1, "node": "n"}}]});
        assert_eq!(refusal(extra).1, "gpus[0].claimTemplate.node is not a key the VM render knows");
        let switch = json!({"gpus": [], "_cluster": {"gpu-claims-enabled": true}});
        assert_eq!(refusal(switch).1, "_cluster.gpu-claims-enabled must be a string");
    }

    #[test]
    fn an_entry_with_two_kinds_does_not_parse() {
        assert!(parse_entries(r#"[{"name":"a","claim":"b"}]"#).is_err());
        assert!(parse_entries(r#"[{"claimTemplate":{"class":"h100","count":1,"extra":1}}]"#).is_err());
    }
}
