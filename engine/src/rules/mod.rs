//! The admission rules of DESIGN.md §3, one function each, named after the rule.
//!
//! Each returns `Ok(patch)` (possibly empty: nothing to change) or `Err(refusal)`. Refusals are data: an enum per
//! rule whose message is stable and whose [`Refusal::reason`] is a PascalCase word for metrics and events.

mod order;
mod pod;
mod render;
mod vmi;

pub use order::{Order, OrderRefusal, validate_order};
pub use pod::{PodPatch, PodRefusal, mutate_pod, mutate_pod_with};
pub use render::{
    ENTRY_KINDS, RenderRefusal, Shape, TEMPLATE_COUNT_MAX, VmRender, VmValues, read_values, render_values, render_vm,
};
pub use vmi::{UNITS_PER_VMI_MAX, VmiPatch, VmiRefusal, admit_vmi, admit_vmi_with};

/// What every refusal of a rule offers the webhook answer.
pub trait Refusal: std::fmt::Display {
    /// A stable PascalCase word naming the reason (metrics label, audit annotation, event reason).
    fn reason(&self) -> &'static str;
    /// The HTTP status code the answer carries: 403 for policy, 422 for content that cannot be read.
    fn code(&self) -> u16 {
        403
    }
}
