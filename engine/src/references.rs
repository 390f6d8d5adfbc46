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
    RECENT_ENTRIES.with_borrow_mut(|recent| recent.parse(json))
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
    RECENT_ATTACHMENTS.with_borrow_mut(|recent| recent.parse(json))
}

/// How many distinct annotations each thread remembers parsing.
const RECENT_MAX: usize = 8;

thread_local! {
    static RECENT_ENTRIES: std::cell::RefCell<Recent<GpuEntry>> = const { std::cell::RefCell::new(Recent::new()) };
    static RECENT_ATTACHMENTS: std::cell::RefCell<Recent<Attachment>> =
        const { std::cell::RefCell::new(Recent::new()) };
}

/// The annotations parsed last on this thread, newest first, with what they parsed to. One VM's annotation is
/// parsed by the VMI webhook, the pod webhook, the controller (and the twin's checks), and a fleet's VMs order
/// from a handful of templates, so most annotations are one of a few strings: a parse costs ten times the copy of
/// its result. Only successful parses are kept (a malformed annotation is parsed again to say why); the result is
/// exactly `serde_json::from_str`'s.
struct Recent<T> {
    parsed: Vec<(Box<str>, Vec<T>)>,
}

impl<T: Clone + serde::de::DeserializeOwned> Recent<T> {
    const fn new() -> Self {
        Recent { parsed: Vec::new() }
    }

    fn parse(&mut self, json: &str) -> Result<Vec<T>, serde_json::Error> {
        if let Some(at) = self.parsed.iter().position(|(seen, _)| **seen == *json) {
            // Kept where it is: the few strings in use stay in the list whatever their order.
            return Ok(self.parsed[at].1.clone());
        }
        let value: Vec<T> = serde_json::from_str(json)?;
        if self.parsed.len() == RECENT_MAX {
            self.parsed.pop();
        }
        self.parsed.insert(0, (json.into(), value.clone()));
        Ok(value)
    }
}

/// Serializes attachments as the annotation's value.
pub fn attachments_json(attachments: &[Attachment]) -> String {
    serde_json::to_string(attachments).expect("attachments always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Annotations valid and not, more distinct ones than a thread remembers.
    fn pool() -> Vec<String> {
        let mut pool: Vec<String> = (0..RECENT_MAX as u32 + 4)
            .map(|i| attachments_json(&[Attachment::template(i, "h100", i % 3 + 1)]))
            .collect();
        pool.push(attachments_json(&[
            Attachment::held("train-a", "uid-1", "a100", 2),
            Attachment::template(0, "l40s", 1),
        ]));
        pool.push("[]".to_owned());
        pool.push(r#"[{"class":"h100"}]"#.to_owned());
        pool.push(r#"[{"class":"h100","count":1,"extra":true}]"#.to_owned());
        pool.push("not json".to_owned());
        pool
    }

    fn same<T: PartialEq + std::fmt::Debug>(
        got: Result<Vec<T>, serde_json::Error>,
        want: Result<Vec<T>, serde_json::Error>,
    ) -> Result<(), TestCaseError> {
        match (got, want) {
            (Ok(got), Ok(want)) => prop_assert_eq!(got, want),
            (Err(got), Err(want)) => prop_assert_eq!(got.to_string(), want.to_string()),
            (got, want) => prop_assert!(false, "got {got:?}, serde_json gives {want:?}"),
        }
        Ok(())
    }

    proptest! {
        /// Whatever order annotations come in, and however often, a parse gives what serde_json gives.
        #[test]
        fn remembered_parses_equal_serde_json(picks in proptest::collection::vec(0usize..64, 1..64)) {
            let pool = pool();
            let mut entries_pool: Vec<String> = (0..RECENT_MAX as u32 + 4)
                .map(|i| entries_json(&[GpuEntry::ClaimTemplate(ClaimTemplate { class: format!("c{i}"), count: i + 1 })]))
                .collect();
            entries_pool.push(entries_json(&[GpuEntry::Claim("train-a".into()), GpuEntry::Name("nvidia.com/x".into())]));
            entries_pool.extend(pool.iter().cloned());
            for pick in picks {
                let json = &pool[pick % pool.len()];
                same(parse_attachments(json), serde_json::from_str(json))?;
                let entries = &entries_pool[pick % entries_pool.len()];
                same(parse_entries(entries), serde_json::from_str(entries))?;
            }
        }
    }

    #[test]
    fn a_thread_remembers_a_bounded_number_of_annotations() {
        for json in pool() {
            let _ = parse_attachments(&json);
        }
        RECENT_ATTACHMENTS.with_borrow(|recent| assert_eq!(recent.parsed.len(), RECENT_MAX));
        let newest = attachments_json(&[Attachment::template(99, "h100", 1)]);
        parse_attachments(&newest).unwrap();
        RECENT_ATTACHMENTS.with_borrow(|recent| {
            assert_eq!(recent.parsed.len(), RECENT_MAX);
            assert_eq!(&*recent.parsed[0].0, newest.as_str());
        });
    }
}
