//! An object's name, shared rather than copied: the model's objects are copied for every watch event and every
//! write-through of a controller's cache, and their names key every index of the view, so a copy is a reference
//! count, not an allocation. It orders, hashes and compares exactly as the `str` it holds, so maps keyed by it are
//! looked up with a borrowed `&str` and list in the same order a `String` key would.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

#[derive(Clone)]
pub struct Name(Arc<str>);

impl Name {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether both are the same allocation (then they are equal without reading them).
    fn same(&self, other: &Name) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for Name {
    /// The empty name, shared: range bounds and placeholders take it without allocating.
    fn default() -> Self {
        static EMPTY: std::sync::LazyLock<Name> = std::sync::LazyLock::new(|| Name(Arc::from("")));
        EMPTY.clone()
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.same(other) || *self.0 == *other.0
    }
}

impl Eq for Name {}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        if self.same(other) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl Hash for Name {
    // As `str` hashes: `Borrow<str>` lookups must find what a `Name` key stored.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl From<&str> for Name {
    fn from(name: &str) -> Self {
        Name(Arc::from(name))
    }
}

impl From<&String> for Name {
    fn from(name: &String) -> Self {
        Name(Arc::from(name.as_str()))
    }
}

impl From<String> for Name {
    fn from(name: String) -> Self {
        Name(Arc::from(name))
    }
}

impl From<&Name> for Name {
    fn from(name: &Name) -> Self {
        name.clone()
    }
}

impl From<Name> for String {
    fn from(name: Name) -> Self {
        name.as_str().to_owned()
    }
}

impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Name::from)
    }
}

// In the CRDs' schemas a name is a string, as the `String` it replaced.
impl schemars::JsonSchema for Name {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        String::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        String::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }

    fn inline_schema() -> bool {
        String::inline_schema()
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    #[test]
    fn a_name_orders_hashes_and_compares_as_its_text() {
        let names = ["virt-launcher-b", "virt-launcher-a", "", "a"];
        let mut by_name: BTreeMap<Name, usize> = BTreeMap::new();
        let mut by_string: BTreeMap<String, usize> = BTreeMap::new();
        let mut hashed: HashMap<Name, usize, foldhash::fast::FixedState> = HashMap::default();
        for (i, name) in names.iter().enumerate() {
            by_name.insert(Name::from(*name), i);
            by_string.insert((*name).to_owned(), i);
            hashed.insert(Name::from(*name), i);
        }
        let listed: Vec<(&str, usize)> = by_name.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let expected: Vec<(&str, usize)> = by_string.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(listed, expected);
        for (i, name) in names.iter().enumerate() {
            assert_eq!(by_name.get(*name), Some(&i));
            assert_eq!(hashed.get(*name), Some(&i));
        }
        let a = Name::from("x");
        assert_eq!(a, a.clone());
        assert_eq!(a, Name::from("x"));
        assert_ne!(a, Name::from("y"));
        assert_eq!(a, "x");
        assert_eq!("x", a);
        assert_eq!(a, String::from("x"));
        assert_eq!(format!("{a} {a:?}"), "x \"x\"");
        assert_eq!(Name::default(), "");
    }
}
