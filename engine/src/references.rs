//! The JSON formats that carry a VM's GPUs from the render to the controller: entries of the VM's `gpus` list
//! (also the claims annotation), and the resolved attachments the VMI webhook records; and how an object keeps what
//! its annotation reads as ([`Parsed`], [`Read`]), so that one VM's annotation is parsed once, not by every reader.
//!
//! One VM's annotation is read by the VMI webhook, the pod webhook, the controller at every pass that tries its pod,
//! and the twin's checks, and parsing it costs about ten times copying what it reads as. So the model's objects
//! carry the reading with the text (`Pod::attachments`, `Vmi::references`): read once where the object enters the
//! engine (when it is converted, or stored in a view), or written together with the annotation (the VMI webhook's
//! patch, the VM render), and copied with the object and with the annotation (a launcher pod copies its VMI's). A
//! reader compares the text first, so what it gets is always what the annotation as it is now reads as: an
//! annotation edited since (a tenant's forged copy) is read again, never misread.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
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

/// A JSON list (an annotation's value) and what it reads as: the list, or why it cannot be read (serde_json's
/// message). Shared: a copy costs a reference count. Equal when their texts are.
pub struct Parsed<T>(Arc<ParsedText<T>>);

struct ParsedText<T> {
    text: String,
    read: Result<Vec<T>, String>,
}

impl<T: DeserializeOwned> Parsed<T> {
    /// Reads `text`.
    pub fn read(text: &str) -> Self {
        let read = serde_json::from_str(text).map_err(|e: serde_json::Error| e.to_string());
        Parsed(Arc::new(ParsedText { text: text.to_owned(), read }))
    }
}

impl<T: Serialize> Parsed<T> {
    /// `list` with its JSON, written from it: nothing to parse.
    pub fn written(list: Vec<T>) -> Self {
        let text = serde_json::to_string(&list).expect("GPU entries and attachments always serialize");
        Parsed(Arc::new(ParsedText { text, read: Ok(list) }))
    }
}

impl<T> Parsed<T> {
    /// The JSON text.
    pub fn text(&self) -> &str {
        &self.0.text
    }

    /// What the text reads as.
    pub fn list(&self) -> Result<&[T], &str> {
        self.0.read.as_deref().map_err(String::as_str)
    }
}

impl<T> Clone for Parsed<T> {
    fn clone(&self) -> Self {
        Parsed(Arc::clone(&self.0))
    }
}

impl<T> PartialEq for Parsed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl<T> Eq for Parsed<T> {}

impl<T> fmt::Debug for Parsed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Parsed").field(&self.text()).finish()
    }
}

/// What a model object keeps of reading one of its annotations: the last [`Parsed`] text, if any (see the module's
/// doc). Ignored by `==`, like a view's caches: it says nothing the annotation does not.
pub struct Read<T>(Option<Parsed<T>>);

impl<T: DeserializeOwned + Clone> Read<T> {
    /// What the annotation `text` reads as: the kept reading when it is of this text, read now otherwise.
    pub fn of(&self, text: &str) -> Result<Cow<'_, [T]>, String> {
        match &self.0 {
            Some(kept) if kept.text() == text => kept.list().map(Cow::Borrowed).map_err(str::to_owned),
            _ => serde_json::from_str(text).map(Cow::Owned).map_err(|e: serde_json::Error| e.to_string()),
        }
    }

    /// Keeps the reading of the annotation `text` (`None`: the object has none, nothing is kept), reading it only
    /// when what is kept is of another text.
    pub fn keep(&mut self, text: Option<&str>) {
        match text {
            None => self.0 = None,
            Some(text) if self.0.as_ref().is_some_and(|kept| kept.text() == text) => {}
            Some(text) => self.0 = Some(Parsed::read(text)),
        }
    }
}

impl<T> Read<T> {
    /// Keeps `parsed`: the annotation's text as just written, with what it reads as.
    pub fn set(&mut self, parsed: Parsed<T>) {
        self.0 = Some(parsed);
    }

    /// The reading kept, if any (whatever text it is of).
    pub fn kept(&self) -> Option<&Parsed<T>> {
        self.0.as_ref()
    }
}

impl<T> Default for Read<T> {
    fn default() -> Self {
        Read(None)
    }
}

impl<T> Clone for Read<T> {
    fn clone(&self) -> Self {
        Read(self.0.clone())
    }
}

impl<T> PartialEq for Read<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Read<T> {}

impl<T> fmt::Debug for Read<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Read").field(&self.0.as_ref().map(Parsed::text)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Annotations valid and not.
    fn pool() -> Vec<String> {
        let mut pool: Vec<String> =
            (0..4u32).map(|i| attachments_json(&[Attachment::template(i, "h100", i % 3 + 1)])).collect();
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

    fn same(got: Result<Cow<'_, [Attachment]>, String>, json: &str) -> Result<(), TestCaseError> {
        match (got, serde_json::from_str::<Vec<Attachment>>(json)) {
            (Ok(got), Ok(want)) => prop_assert_eq!(&*got, &want[..]),
            (Err(got), Err(want)) => prop_assert_eq!(got, want.to_string()),
            (got, want) => prop_assert!(false, "got {got:?}, serde_json gives {want:?}"),
        }
        Ok(())
    }

    proptest! {
        /// Whatever an object kept, and whatever its annotation became since, a reading is what serde_json reads
        /// the annotation as now.
        #[test]
        fn a_reading_is_what_serde_json_reads_the_annotation_as_now(
            steps in proptest::collection::vec((0usize..64, any::<bool>()), 1..64),
        ) {
            let pool = pool();
            let mut read: Read<Attachment> = Read::default();
            for (pick, keep) in steps {
                let json = &pool[pick % pool.len()];
                if keep {
                    read.keep(Some(json));
                    prop_assert_eq!(read.kept().map(Parsed::text), Some(json.as_str()));
                }
                same(read.of(json), json)?;
            }
        }
    }

    #[test]
    fn a_kept_reading_is_lent_and_another_text_is_read_again() {
        let json = attachments_json(&[Attachment::template(0, "h100", 2)]);
        let mut read: Read<Attachment> = Read::default();
        assert!(matches!(read.of(&json), Ok(Cow::Owned(_))), "nothing kept: read now");
        read.keep(Some(&json));
        assert!(matches!(read.of(&json), Ok(Cow::Borrowed(_))), "kept: lent, not parsed");
        let forged = attachments_json(&[Attachment::template(0, "h100", 8)]);
        assert_eq!(read.of(&forged).unwrap()[0].count, 8, "an edited annotation is read again");
        read.keep(None);
        assert!(read.kept().is_none());
    }

    #[test]
    fn a_written_list_reads_as_itself() {
        let list = vec![Attachment::held("train-a", "uid-1", "h100", 1), Attachment::template(0, "h100", 2)];
        let written = Parsed::written(list.clone());
        assert_eq!(written.text(), attachments_json(&list));
        assert_eq!(written.list(), Ok(&list[..]));
        assert_eq!(Parsed::<Attachment>::read(written.text()).list(), Ok(&list[..]));
    }
}
