//! The JSON formats that carry a VM's GPUs from the render to the controller: entries of the VM's `gpus` list
//! (also the claims annotation), and the resolved attachments the VMI webhook records.

use serde::{Deserialize, Serialize};

/// One entry of a VM's `gpus` list: a raw device name, a held claim, or a claim template. The claims annotation
/// holds a list of these too (references only, unless something upstream mixed them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum GpuEntry {
    /// `{name: nvidia.com/GA102GL_A10}`: rendered straight into the VMI, no claims involved.
    Name(String),
    /// `{claim: train-a}`: a claim the tenant holds in the VM's namespace.
    Claim(String),
    /// `{claimTemplate: {class: h100, count: 2}}`: a claim the controller orders for one run.
    ClaimTemplate(ClaimTemplate),
}

impl GpuEntry {
    pub fn is_reference(&self) -> bool {
        !matches!(self, GpuEntry::Name(_))
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimTemplate {
    pub class: String,
    pub count: u32,
}

/// Parses a claims annotation (a JSON list of [`GpuEntry`]).
pub fn parse_entries(json: &str) -> Result<Vec<GpuEntry>, serde_json::Error> {
    serde_json::from_str(json)
}

/// Serializes references as the claims annotation's value.
pub fn entries_json(entries: &[GpuEntry]) -> String {
    serde_json::to_string(entries).expect("GPU entries always serialize")
}

/// One element of the resolved set the VMI webhook records in the attachments annotation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attachment {
    /// The held claim's name (absent for a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The held claim's uid, so a claim deleted and ordered again under the same name is not mistaken for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The template's index among the VM's claim templates, in list order (absent for a held claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<u32>,
    pub class: String,
    pub count: u32,
}

impl Attachment {
    pub fn held(claim: &str, uid: &str, class: &str, count: u32) -> Self {
        Attachment {
            claim: Some(claim.to_owned()),
            uid: (!uid.is_empty()).then(|| uid.to_owned()),
            template: None,
            class: class.to_owned(),
            count,
        }
    }

    pub fn template(index: u32, class: &str, count: u32) -> Self {
        Attachment { claim: None, uid: None, template: Some(index), class: class.to_owned(), count }
    }
}

/// Parses an attachments annotation.
pub fn parse_attachments(json: &str) -> Result<Vec<Attachment>, serde_json::Error> {
    serde_json::from_str(json)
}

/// Serializes attachments as the annotation's value.
pub fn attachments_json(attachments: &[Attachment]) -> String {
    serde_json::to_string(attachments).expect("attachments always serialize")
}
