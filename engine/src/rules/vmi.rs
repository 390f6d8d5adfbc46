//! The VMI webhook rule: resolve a VMI's claim references and record the start on the VMI itself.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::keys;
use crate::model::{self, BudgetExceeded, GpuDevice, View, Vmi, check_budget};
use crate::references::{Attachment, GpuEntry, Parsed};

use crate::variant::Variant;

use super::Refusal;

/// The most GPU units one VMI may attach: a bound on the entries the webhook writes (no node has more).
pub const UNITS_PER_VMI_MAX: u32 = 64;

/// What the VMI webhook changes. Empty when the VMI is not selected or already carries exactly this.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmiPatch {
    /// The new value of the attachments annotation, when it differs, written from the resolved set.
    pub attachments: Option<Parsed<Attachment>>,
    /// The `spec.domain.devices.gpus` list to write (the VMI had none): one entry per unit.
    pub gpus: Option<Vec<GpuDevice>>,
}

impl VmiPatch {
    pub fn is_empty(&self) -> bool {
        self.attachments.is_none() && self.gpus.is_none()
    }

    /// Applies the patch to the compact VMI (the twin's path; the live path applies the JSON patch). Consumed: what
    /// it adds moves into the VMI instead of being copied once more per admitted VMI.
    pub fn apply(self, vmi: &mut Vmi) {
        if let Some(written) = self.attachments {
            let value = written.text().to_owned();
            Arc::make_mut(&mut vmi.annotations).insert(keys::ANNOTATION_ATTACHMENTS.to_owned(), value);
            // What it reads as goes with it, so the VMI's pods read it without parsing it.
            vmi.attachments_read.set(written);
        }
        if let Some(gpus) = self.gpus {
            vmi.gpus = Arc::new(gpus);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmiRefusal {
    /// The claims label without a readable claims annotation.
    MalformedReferences {
        detail: String,
    },
    /// The claims label with an empty reference list.
    NoReferences,
    /// Raw GPUs and claim references on one VMI.
    MixedList,
    ClaimMissing {
        claim: String,
    },
    DuplicateClaim {
        claim: String,
    },
    /// A template claim belongs to the run it was ordered for.
    TemplateClaimReferenced {
        claim: String,
    },
    ClaimDeleting {
        claim: String,
    },
    ClaimInUse {
        claim: String,
        vmi: String,
    },
    ClassMissing {
        class: String,
    },
    HeldClaimsOnDifferentNodes {
        first: String,
        first_node: String,
        second: String,
        second_node: String,
    },
    CountNotPositive {
        class: String,
    },
    CountOverMax {
        class: String,
        count: u32,
        max: u32,
    },
    TooManyUnits {
        units: u64,
    },
    /// Variant `refuse_short_at_admission` only: the units do not fit the class's published free units on one node
    /// (or a held claim is not bound to a node).
    NoCapacity {
        class: String,
        count: u64,
        largest_free_on_node: u64,
    },
    /// Variant `refuse_short_at_admission` only: the template units exceed what the namespace's budget has left
    /// (the budget counts the units bound).
    BudgetExceeded(BudgetExceeded),
}

impl fmt::Display for VmiRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use VmiRefusal::*;
        match self {
            MalformedReferences { detail } => {
                write!(f, "annotation {} cannot be read: {detail}", keys::ANNOTATION_CLAIMS)
            }
            NoReferences => write!(f, "annotation {} lists no claim references", keys::ANNOTATION_CLAIMS),
            MixedList => write!(f, "the VMI lists raw GPUs and claim references together; use one or the other"),
            ClaimMissing { claim } => write!(f, "GPU claim {claim:?} does not exist in this namespace"),
            DuplicateClaim { claim } => write!(f, "GPU claim {claim:?} is referenced more than once"),
            TemplateClaimReferenced { claim } => {
                write!(f, "GPU claim {claim:?} is a template claim of another run; reference a held claim")
            }
            ClaimDeleting { claim } => write!(f, "GPU claim {claim:?} is being deleted"),
            ClaimInUse { claim, vmi } => write!(f, "GPU claim {claim:?} is in use by VMI {vmi:?}"),
            ClassMissing { class } => write!(f, "GPU class {class:?} does not exist"),
            HeldClaimsOnDifferentNodes { first, first_node, second, second_node } => write!(
                f,
                "held GPU claims {first:?} (node {first_node:?}) and {second:?} (node {second_node:?}) are bound \
                 to different nodes; a VM's claims must share one node"
            ),
            CountNotPositive { class } => write!(f, "claim template of class {class:?} must order at least 1 unit"),
            CountOverMax { class, count, max } => {
                write!(f, "claim template orders {count} units of class {class:?}, more than its maxCount {max}")
            }
            TooManyUnits { units } => {
                write!(f, "the VMI attaches {units} GPU units, more than the {UNITS_PER_VMI_MAX} one VMI may")
            }
            NoCapacity { class, count, largest_free_on_node } => write!(
                f,
                "the VMI needs {count} units of GPU class {class:?} on one node; at most {largest_free_on_node} are \
                 free on any node"
            ),
            Self::BudgetExceeded(refused) => write!(
                f,
                "the VMI orders {} units of GPU class {:?}; the namespace holds {} of its budget of {}",
                refused.units, refused.class, refused.counted, refused.budget
            ),
        }
    }
}

impl Refusal for VmiRefusal {
    fn reason(&self) -> &'static str {
        use VmiRefusal::*;
        match self {
            MalformedReferences { .. } => "MalformedReferences",
            NoReferences => "NoReferences",
            MixedList => "MixedList",
            ClaimMissing { .. } => "ClaimMissing",
            DuplicateClaim { .. } => "DuplicateClaim",
            TemplateClaimReferenced { .. } => "TemplateClaimReferenced",
            ClaimDeleting { .. } => "ClaimDeleting",
            ClaimInUse { .. } => "ClaimInUse",
            ClassMissing { .. } => "ClassMissing",
            HeldClaimsOnDifferentNodes { .. } => "HeldClaimsOnDifferentNodes",
            CountNotPositive { .. } => "CountNotPositive",
            CountOverMax { .. } => "CountOverMax",
            TooManyUnits { .. } => "TooManyUnits",
            NoCapacity { .. } => "NoCapacity",
            Self::BudgetExceeded(_) => model::BudgetExceeded::REASON,
        }
    }

    fn code(&self) -> u16 {
        match self {
            VmiRefusal::MalformedReferences { .. } => 422,
            _ => 403,
        }
    }
}

/// The VMI webhook: resolves the references of a VMI carrying the claims label. Refuses only what needs no
/// placement to judge; never refuses for capacity or budget (those make the pod wait at its gate instead of
/// sending the VM into KubeVirt's start backoff). Records the attachments annotation and one GPU entry per unit
/// with the class's resource name, because KubeVirt renders the launcher's requests from the VMI spec.
pub fn admit_vmi(view: &View, vmi: &Vmi) -> Result<VmiPatch, VmiRefusal> {
    admit_vmi_with(view, vmi, &Variant::SHIPPED)
}

/// [`admit_vmi`] under an engine variant: `refuse_short_at_admission` also refuses what capacity or budget cannot
/// meet now.
pub fn admit_vmi_with(view: &View, vmi: &Vmi, variant: &Variant) -> Result<VmiPatch, VmiRefusal> {
    if vmi.labels.get(keys::LABEL_CLAIMS).map(String::as_str) != Some(keys::TRUE) {
        return Ok(VmiPatch::default());
    }
    let entries = read_references(vmi)?;
    let attachments = resolve(view, &vmi.namespace, &vmi.name, &entries)?;
    if variant.refuse_short_at_admission {
        refuse_short(view, &vmi.namespace, &attachments)?;
    }
    let gpus = unit_devices(view, &attachments)?;
    let annotation = Parsed::written(attachments);
    let mut patch = VmiPatch::default();
    if vmi.annotations.get(keys::ANNOTATION_ATTACHMENTS).map(String::as_str) != Some(annotation.text()) {
        patch.attachments = Some(annotation);
    }
    if vmi.gpus.is_empty() {
        patch.gpus = Some(gpus);
    } else if *vmi.gpus != gpus {
        // Entries we did not write (or a forged copy of ours that does not match): a mixed list.
        return Err(VmiRefusal::MixedList);
    }
    Ok(patch)
}

/// The counterfactual check a webhook could make from what it reads: per class, the template units against the
/// published largest free units on one node and against the budget's unbound rest; held claims must be bound.
fn refuse_short(view: &View, namespace: &str, attachments: &[Attachment]) -> Result<(), VmiRefusal> {
    let mut per_class: BTreeMap<&str, u64> = BTreeMap::new();
    for attachment in attachments {
        match attachment.claim.as_deref().and_then(|name| view.claim(namespace, name)) {
            Some(held) if held.node.is_none() => {
                return Err(VmiRefusal::NoCapacity {
                    class: held.class.to_string(),
                    count: u64::from(held.count),
                    largest_free_on_node: view.class(&held.class).map_or(0, |c| c.published.largest_free_on_node),
                });
            }
            Some(_) => {}
            None => *per_class.entry(attachment.class.as_str()).or_insert(0) += u64::from(attachment.count),
        }
    }
    let tenant = view.tenant(namespace);
    for (class_name, count) in per_class {
        let Some(class) = view.class(class_name) else { continue };
        let largest_free_on_node = class.published.largest_free_on_node;
        if count > largest_free_on_node {
            return Err(VmiRefusal::NoCapacity { class: class_name.to_owned(), count, largest_free_on_node });
        }
        check_budget(tenant, class_name, count, |t| t.units_bound(class_name)).map_err(VmiRefusal::BudgetExceeded)?;
    }
    Ok(())
}

fn read_references(vmi: &Vmi) -> Result<Cow<'_, [GpuEntry]>, VmiRefusal> {
    let Some(entries) = vmi.references() else {
        return Err(VmiRefusal::MalformedReferences {
            detail: format!("the VMI carries label {} but not the annotation", keys::LABEL_CLAIMS),
        });
    };
    let entries = entries.map_err(|detail| VmiRefusal::MalformedReferences { detail })?;
    if entries.is_empty() {
        return Err(VmiRefusal::NoReferences);
    }
    if entries.iter().any(|e| !e.is_reference()) {
        return Err(VmiRefusal::MixedList);
    }
    Ok(entries)
}

/// Resolves references in list order; the first reference that fails decides the refusal.
fn resolve(view: &View, namespace: &str, vmi_name: &str, entries: &[GpuEntry]) -> Result<Vec<Attachment>, VmiRefusal> {
    let mut attachments = Vec::with_capacity(entries.len());
    let mut seen = BTreeSet::new();
    let mut first_bound: Option<(&str, &str)> = None;
    let mut template_index = 0u32;
    for entry in entries {
        match entry {
            GpuEntry::Claim(name) => {
                if !seen.insert(name.as_str()) {
                    return Err(VmiRefusal::DuplicateClaim { claim: name.clone() });
                }
                let claim =
                    view.claim(namespace, name).ok_or_else(|| VmiRefusal::ClaimMissing { claim: name.clone() })?;
                if claim.template {
                    return Err(VmiRefusal::TemplateClaimReferenced { claim: name.clone() });
                }
                if claim.deleting {
                    return Err(VmiRefusal::ClaimDeleting { claim: name.clone() });
                }
                // The same name is the previous run of this VM (VMI names are unique while they exist): the
                // controller releases it before attaching again.
                if let Some(holder) = claim.attached_to.as_ref().filter(|holder| holder.name != vmi_name) {
                    return Err(VmiRefusal::ClaimInUse { claim: name.clone(), vmi: holder.name.to_string() });
                }
                if view.class(&claim.class).is_none() {
                    return Err(VmiRefusal::ClassMissing { class: claim.class.to_string() });
                }
                if let Some(node) = claim.node.as_deref() {
                    match first_bound {
                        None => first_bound = Some((name, node)),
                        Some((first, first_node)) if first_node != node => {
                            return Err(VmiRefusal::HeldClaimsOnDifferentNodes {
                                first: first.to_owned(),
                                first_node: first_node.to_owned(),
                                second: name.clone(),
                                second_node: node.to_owned(),
                            });
                        }
                        Some(_) => {}
                    }
                }
                attachments.push(Attachment::held(name, &claim.uid, &claim.class, claim.count));
            }
            GpuEntry::ClaimTemplate(template) => {
                let class = view
                    .class(&template.class)
                    .ok_or_else(|| VmiRefusal::ClassMissing { class: template.class.clone() })?;
                if template.count == 0 {
                    return Err(VmiRefusal::CountNotPositive { class: class.name.clone() });
                }
                if template.count > class.max_count {
                    return Err(VmiRefusal::CountOverMax {
                        class: class.name.clone(),
                        count: template.count,
                        max: class.max_count,
                    });
                }
                attachments.push(Attachment::template(template_index, &class.name, template.count));
                template_index += 1;
            }
            GpuEntry::Name(_) => unreachable!("read_references refuses raw names"),
        }
    }
    Ok(attachments)
}

/// One GPU entry per unit, named `gpuclaim-<unit index>` (unique on the VMI, since no other GPUs may be listed).
fn unit_devices(view: &View, attachments: &[Attachment]) -> Result<Vec<GpuDevice>, VmiRefusal> {
    let units: u64 = attachments.iter().map(|a| u64::from(a.count)).sum();
    if units > u64::from(UNITS_PER_VMI_MAX) {
        return Err(VmiRefusal::TooManyUnits { units });
    }
    let mut gpus = Vec::with_capacity(units as usize);
    for attachment in attachments {
        let class = view.class(&attachment.class).expect("resolve checked every class");
        for _ in 0..attachment.count {
            gpus.push(GpuDevice {
                name: format!("{}{}", keys::GPU_ENTRY_PREFIX, gpus.len()),
                device_name: class.resource_name.clone(),
            });
        }
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::convert::vmi_from_json;
    use crate::fixtures::{self, platform};
    use crate::references::parse_attachments;

    const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

    fn vmi(references: &str) -> Vmi {
        vmi_from_json(&fixtures::vmi_json("tenant-a", "vm-1", references), "tenant-a").unwrap()
    }

    fn refused(references: &str) -> VmiRefusal {
        admit_vmi(&platform(), &vmi(references)).unwrap_err()
    }

    #[test]
    fn held_and_template_references_record_attachments_and_one_gpu_per_unit() {
        let patch =
            admit_vmi(&platform(), &vmi(r#"[{"claim":"train-a"},{"claimTemplate":{"class":"h100","count":2}}]"#))
                .unwrap();
        let attachments = parse_attachments(patch.attachments.as_ref().map(Parsed::text).unwrap()).unwrap();
        assert_eq!(
            attachments,
            vec![Attachment::held("train-a", "uid-tenant-a-train-a", "h100", 1), Attachment::template(0, "h100", 2)]
        );
        assert_eq!(
            patch.attachments.as_ref().map(Parsed::text),
            Some(
                r#"[{"claim":"train-a","uid":"uid-tenant-a-train-a","class":"h100","count":1},{"template":0,"class":"h100","count":2}]"#
            )
        );
        let names: Vec<_> = patch.gpus.as_ref().unwrap().iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["gpuclaim-0", "gpuclaim-1", "gpuclaim-2"]);
        assert!(patch.gpus.unwrap().iter().all(|g| g.device_name == H100));
    }

    #[test]
    fn template_indexes_count_templates_only() {
        let patch = admit_vmi(
            &platform(),
            &vmi(r#"[{"claimTemplate":{"class":"h100","count":1}},{"claim":"train-a"},{"claimTemplate":{"class":"a100-40c","count":1}}]"#),
        )
        .unwrap();
        let attachments = parse_attachments(patch.attachments.as_ref().map(Parsed::text).unwrap()).unwrap();
        assert_eq!(attachments[0].template, Some(0));
        assert_eq!(attachments[2].template, Some(1));
        let devices: Vec<_> = patch.gpus.unwrap().into_iter().map(|g| g.device_name).collect();
        assert_eq!(devices, [H100, H100, "nvidia.com/A100-40C"]);
    }

    #[test]
    fn the_refusing_variant_refuses_what_capacity_or_budget_cannot_meet_now() {
        let refusing = Variant::named("refuse-at-admission").unwrap();
        // platform(): h100 publishes 8 free on one node; tenant-a's budget is 8 with 3 units bound.
        let nine =
            vmi(r#"[{"claimTemplate":{"class":"h100","count":5}},{"claimTemplate":{"class":"h100","count":4}}]"#);
        let refusal = admit_vmi_with(&platform(), &nine, &refusing).unwrap_err();
        assert_eq!(refusal, VmiRefusal::NoCapacity { class: "h100".into(), count: 9, largest_free_on_node: 8 });
        assert_eq!(refusal.reason(), "NoCapacity");
        assert_eq!(
            refusal.to_string(),
            "the VMI needs 9 units of GPU class \"h100\" on one node; at most 8 are free on any node"
        );
        let six = vmi(r#"[{"claimTemplate":{"class":"h100","count":6}}]"#);
        let refusal = admit_vmi_with(&platform(), &six, &refusing).unwrap_err();
        let refused = BudgetExceeded { class: "h100".into(), units: 6, counted: 3, budget: 8 };
        assert_eq!(refusal, VmiRefusal::BudgetExceeded(refused));
        assert_eq!(
            refusal.to_string(),
            "the VMI orders 6 units of GPU class \"h100\"; the namespace holds 3 of its budget of 8"
        );
        // The shipped rule admits both: their launchers wait at the gate instead.
        assert!(admit_vmi(&platform(), &nine).is_ok());
        assert!(admit_vmi(&platform(), &six).is_ok());
        // What fits now passes the refusing variant too.
        assert!(admit_vmi_with(&platform(), &vmi(r#"[{"claim":"train-a"}]"#), &refusing).is_ok());
    }

    #[test]
    fn a_vmi_without_the_claims_label_is_left_alone() {
        let mut v = vmi(r#"[{"claim":"nope"}]"#);
        Arc::make_mut(&mut v.labels).remove(keys::LABEL_CLAIMS);
        assert_eq!(admit_vmi(&platform(), &v), Ok(VmiPatch::default()));
    }

    #[test]
    fn admitting_the_admitted_vmi_again_changes_nothing() {
        let mut v = vmi(r#"[{"claim":"train-a"},{"claimTemplate":{"class":"h100","count":2}}]"#);
        let patch = admit_vmi(&platform(), &v).unwrap();
        patch.apply(&mut v);
        assert_eq!(admit_vmi(&platform(), &v), Ok(VmiPatch::default()));
        // The patch leaves what it wrote with what it reads as, for the VMI's pods to copy.
        let kept = v.attachments_read.kept().map(Parsed::text);
        assert_eq!(kept, v.annotations.get(keys::ANNOTATION_ATTACHMENTS).map(String::as_str));
    }

    #[test]
    fn a_forged_attachments_annotation_is_overwritten() {
        let mut v = vmi(r#"[{"claim":"train-a"}]"#);
        Arc::make_mut(&mut v.annotations)
            .insert(keys::ANNOTATION_ATTACHMENTS.into(), r#"[{"claim":"x","class":"h100","count":9}]"#.into());
        let patch = admit_vmi(&platform(), &v).unwrap();
        assert!(patch.attachments.unwrap().text().contains("train-a"));
    }

    #[test]
    fn capacity_and_budget_are_never_judged_here() {
        // No free units published and a budget of 8 already spent: still admitted, the pod waits at its gate.
        let mut view = platform();
        let mut h100 = view.class("h100").unwrap().clone();
        h100.published = Default::default();
        view.upsert_class(h100);
        view.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 0)].into());
        assert!(admit_vmi(&view, &vmi(r#"[{"claimTemplate":{"class":"h100","count":8}}]"#)).is_ok());
    }

    #[test]
    fn the_previous_run_of_the_same_vm_does_not_hold_its_claim() {
        let mut view = platform();
        view.upsert_claim(fixtures::attached(fixtures::held_claim("tenant-a", "mine", "h100", 1), "gpu-1", "vm-1"));
        assert!(admit_vmi(&view, &vmi(r#"[{"claim":"mine"}]"#)).is_ok());
    }

    #[test]
    fn refusals_name_their_reason() {
        let cases: Vec<(&str, VmiRefusal, &str)> = vec![
            (
                r#"[{"claim":"ghost"}]"#,
                VmiRefusal::ClaimMissing { claim: "ghost".into() },
                r#"GPU claim "ghost" does not exist in this namespace"#,
            ),
            (
                r#"[{"claim":"busy"}]"#,
                VmiRefusal::ClaimInUse { claim: "busy".into(), vmi: "other".into() },
                r#"GPU claim "busy" is in use by VMI "other""#,
            ),
            (
                r#"[{"claim":"train-a"},{"claim":"train-b"}]"#,
                VmiRefusal::HeldClaimsOnDifferentNodes {
                    first: "train-a".into(),
                    first_node: "gpu-1".into(),
                    second: "train-b".into(),
                    second_node: "gpu-2".into(),
                },
                r#"held GPU claims "train-a" (node "gpu-1") and "train-b" (node "gpu-2") are bound to different nodes; a VM's claims must share one node"#,
            ),
            (
                r#"[{"claimTemplate":{"class":"h100","count":9}}]"#,
                VmiRefusal::CountOverMax { class: "h100".into(), count: 9, max: 8 },
                r#"claim template orders 9 units of class "h100", more than its maxCount 8"#,
            ),
            (
                r#"[{"claimTemplate":{"class":"h100","count":0}}]"#,
                VmiRefusal::CountNotPositive { class: "h100".into() },
                r#"claim template of class "h100" must order at least 1 unit"#,
            ),
            (
                r#"[{"claimTemplate":{"class":"l40","count":1}}]"#,
                VmiRefusal::ClassMissing { class: "l40".into() },
                r#"GPU class "l40" does not exist"#,
            ),
            (
                r#"[{"claim":"train-a"},{"name":"nvidia.com/GA102GL_A10"}]"#,
                VmiRefusal::MixedList,
                "the VMI lists raw GPUs and claim references together; use one or the other",
            ),
            (
                r#"[{"claim":"train-a"},{"claim":"train-a"}]"#,
                VmiRefusal::DuplicateClaim { claim: "train-a".into() },
                r#"GPU claim "train-a" is referenced more than once"#,
            ),
            ("[]", VmiRefusal::NoReferences, "annotation gpu.cozystack.io/claims lists no claim references"),
        ];
        for (references, refusal, message) in cases {
            let got = refused(references);
            assert_eq!(got, refusal, "{references}");
            assert_eq!(got.to_string(), message);
            assert_eq!(got.code(), 403);
        }
    }

    #[test]
    fn raw_gpus_on_a_vmi_with_references_are_a_mixed_list() {
        let mut object = fixtures::vmi_json("tenant-a", "vm-1", r#"[{"claim":"train-a"}]"#);
        object["spec"]["domain"]["devices"]["gpus"] = json!([{"name": "gpu0", "deviceName": "nvidia.com/GA102GL_A10"}]);
        let v = vmi_from_json(&object, "tenant-a").unwrap();
        assert_eq!(admit_vmi(&platform(), &v), Err(VmiRefusal::MixedList));
    }

    #[test]
    fn template_claims_and_deleting_claims_cannot_be_referenced() {
        let mut view = platform();
        let mut template = fixtures::held_claim("tenant-a", "vm-9-0", "h100", 1);
        template.template = true;
        view.upsert_claim(template);
        let mut deleting = fixtures::held_claim("tenant-a", "old", "h100", 1);
        deleting.deleting = true;
        view.upsert_claim(deleting);
        assert_eq!(
            admit_vmi(&view, &vmi(r#"[{"claim":"vm-9-0"}]"#)),
            Err(VmiRefusal::TemplateClaimReferenced { claim: "vm-9-0".into() })
        );
        assert_eq!(
            admit_vmi(&view, &vmi(r#"[{"claim":"old"}]"#)),
            Err(VmiRefusal::ClaimDeleting { claim: "old".into() })
        );
    }

    #[test]
    fn a_held_claim_of_a_deleted_class_is_refused() {
        let mut view = platform();
        view.remove_class("h100");
        assert_eq!(
            admit_vmi(&view, &vmi(r#"[{"claim":"train-a"}]"#)),
            Err(VmiRefusal::ClassMissing { class: "h100".into() })
        );
    }

    #[test]
    fn unreadable_references_are_refused_as_invalid() {
        let got = refused(r#"[{"claim":"a","name":"b"}]"#);
        assert_eq!(got.reason(), "MalformedReferences");
        assert_eq!(got.code(), 422);
        let mut v = vmi("[]");
        Arc::make_mut(&mut v.annotations).remove(keys::ANNOTATION_CLAIMS);
        let got = admit_vmi(&platform(), &v).unwrap_err();
        assert_eq!(
            got.to_string(),
            "annotation gpu.cozystack.io/claims cannot be read: the VMI carries label gpu.cozystack.io/claims but not the annotation"
        );
    }

    #[test]
    fn more_units_than_a_vmi_may_attach_are_refused() {
        let mut view = platform();
        let mut big = view.class("h100").unwrap().clone();
        big.max_count = 100;
        view.upsert_class(big);
        assert_eq!(
            admit_vmi(&view, &vmi(r#"[{"claimTemplate":{"class":"h100","count":65}}]"#)),
            Err(VmiRefusal::TooManyUnits { units: 65 })
        );
    }
}
