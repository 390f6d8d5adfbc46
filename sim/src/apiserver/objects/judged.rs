//! What admission reads of an object on its way through: the object as served, rendered only when a rule reads it
//! (most writes are the controller's or KubeVirt's, which the policies skip on who asks alone), and its labels,
//! which selectors read.

use std::borrow::Cow;
use std::collections::BTreeMap;

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Claim, Pod, Usage, Vmi};
use serde_json::Value;

use super::super::admission::request::Served;
use super::{Manifest, claim, namespace, pod, usage, vmi};

/// A compact object with the manifest a client wrote (none in the in-process twin), as admission judges it.
pub struct Judged<'a, T> {
    pub object: &'a T,
    pub manifest: Option<&'a Manifest>,
}

impl<'a, T> Judged<'a, T> {
    pub fn new(object: &'a T, manifest: Option<&'a Manifest>) -> Self {
        Judged { object, manifest }
    }

    /// An object as the twin's actors write it: the compact object alone, no client's manifest.
    pub fn compact(object: &'a T) -> Self {
        Judged { object, manifest: None }
    }

    /// The labels of the manifest, which the compact type does not hold.
    fn manifest_labels(&self) -> BTreeMap<String, String> {
        self.manifest.map(Manifest::labels).unwrap_or_default()
    }
}

impl Served for Judged<'_, Claim> {
    fn json(&self) -> Value {
        claim::render(self.object, self.manifest)
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        let mut labels = self.manifest_labels();
        match self.object.template {
            true => labels.insert(keys::LABEL_TEMPLATE_CLAIM.to_owned(), keys::TRUE.to_owned()),
            false => labels.remove(keys::LABEL_TEMPLATE_CLAIM),
        };
        Cow::Owned(labels)
    }
}

impl Served for Judged<'_, Usage> {
    fn json(&self) -> Value {
        usage::render(self.object, self.manifest)
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Owned(self.manifest_labels())
    }
}

impl Served for Judged<'_, Pod> {
    fn json(&self) -> Value {
        pod::render(self.object, self.manifest)
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Borrowed(&self.object.labels)
    }
}

impl Served for Judged<'_, Vmi> {
    fn json(&self) -> Value {
        vmi::render(self.object, self.manifest)
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Borrowed(&self.object.labels)
    }
}

/// A tenant's namespace as admission judges it: its name and whether it is entitled to vGPU classes (its label).
pub struct JudgedNamespace<'a> {
    pub name: &'a str,
    pub vgpu_entitled: bool,
    pub manifest: Option<&'a Manifest>,
}

impl Served for JudgedNamespace<'_> {
    fn json(&self) -> Value {
        namespace::render(self.name, self.vgpu_entitled, self.manifest)
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Owned(namespace::labels(self.name, self.vgpu_entitled, self.manifest))
    }
}
