//! Reading YAML (and JSON, which is YAML) into JSON values, with a bound on what its aliases expand to.
//!
//! The YAML parser refuses the classic "billion laughs" (aliases of aliases) once it has replayed a hundred times
//! as many events as the document holds, but one anchor of n items aliased n times passes that check and expands to
//! n² values: 50 KB of text took 22 s and 3.2 GB to read, 150 KB would take 30 GB. Without aliases a document holds
//! at most about one value per byte of its text, so the readers here allow that many and [`ALIASED_VALUES_MAX`]
//! more: what aliases may add, enough for any anchor a person writes, and a refusal in milliseconds for a bomb.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The values a text may hold beyond one per byte: what its aliases may add (about 100 MB of values).
pub const ALIASED_VALUES_MAX: usize = 1_000_000;

/// Writes a JSON value as YAML (block style), as [`from_str`] reads it back.
pub fn to_string(value: &Value) -> String {
    serde_yaml_ng::to_string(value).expect("a JSON value always serializes as YAML")
}

/// Reads one YAML document as a JSON value.
pub fn from_str(text: &str) -> Result<Value, serde_yaml_ng::Error> {
    let left = Cell::new(budget(text));
    Bounded { left: &left }.deserialize(serde_yaml_ng::Deserializer::from_str(text))
}

/// Reads every document of a multi-document text (`---`) as JSON values; the bound is on all of them together.
/// It ends after the first error: the parser's own iterator repeats a syntax error for ever.
pub fn documents(text: &str) -> impl Iterator<Item = Result<Value, serde_yaml_ng::Error>> + '_ {
    let left = Cell::new(budget(text));
    let mut failed = false;
    serde_yaml_ng::Deserializer::from_str(text).map_while(move |document| {
        if failed {
            return None;
        }
        let value = Bounded { left: &left }.deserialize(document);
        failed = value.is_err();
        Some(value)
    })
}

fn budget(text: &str) -> usize {
    text.len().saturating_add(ALIASED_VALUES_MAX)
}

/// A JSON value read like serde_json's own `Value`, each value taken from the budget `left`.
struct Bounded<'a> {
    left: &'a Cell<usize>,
}

impl Bounded<'_> {
    fn take<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format_args!(
                "the document expands to more values than its text holds plus {ALIASED_VALUES_MAX} (are aliases \
                 repeating an anchor?)"
            ))),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value that JSON can hold")
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Number(value.into()))
    }

    fn visit_i128<E: serde::de::Error>(self, value: i128) -> Result<Value, E> {
        self.take()?;
        serde::Deserialize::deserialize(serde::de::value::I128Deserializer::new(value)).map(Value::Number)
    }

    fn visit_u128<E: serde::de::Error>(self, value: u128) -> Result<Value, E> {
        self.take()?;
        serde::Deserialize::deserialize(serde::de::value::U128Deserializer::new(value)).map(Value::Number)
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Value, E> {
        self.take()?;
        // As serde_json: a number JSON cannot write (infinity, NaN) is null.
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, value: String) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(value))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Bounded { left: self.left })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut entries = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Bounded { left: self.left })?;
            entries.insert(key, value);
        }
        Ok(Value::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[&a [1, …], *a, …]`: `items` values aliased `aliases` times.
    fn flat_bomb(items: usize, aliases: usize) -> String {
        format!("[&a [{}], {}]", vec!["1"; items].join(","), vec!["*a"; aliases].join(","))
    }

    #[test]
    fn an_anchor_aliased_until_it_is_huge_is_refused_at_once() {
        // 10^8 values from 50 KB of text: 22 s and 3.2 GB through serde_yaml_ng alone.
        let started = std::time::Instant::now();
        let error = from_str(&flat_bomb(10_000, 10_000)).unwrap_err().to_string();
        assert!(error.contains("expands to more values than its text holds"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    }

    #[test]
    fn anchors_aliased_a_few_times_read_as_their_copies() {
        let value = from_str("a: &gpu {class: h100, count: 2}\nb: *gpu\nc: [*gpu, *gpu]\n").unwrap();
        assert_eq!(value["b"], value["a"]);
        assert_eq!(value["c"][1]["count"], 2);
        assert_eq!(from_str(&flat_bomb(300, 300)).unwrap().as_array().unwrap().len(), 301);
    }

    #[test]
    fn values_read_as_serde_json_reads_them_through_the_parser() {
        let text = "a: [1, -2, 18446744073709551615, 1.5, .inf, ~, true, 'x', {b: null}]\n'1': 2\n";
        let ours = from_str(text).unwrap();
        let theirs: Value = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(ours, theirs);
        let documents: Vec<Value> = documents("a: 1\n---\n---\nb: [2]\n").map(Result::unwrap).collect();
        assert_eq!(documents, [serde_json::json!({"a": 1}), Value::Null, serde_json::json!({"b": [2]})]);
    }

    #[test]
    fn documents_end_after_the_first_error() {
        let read: Vec<_> = documents("a: 1\n---\nkind: [unclosed\n---\nb: 2\n").take(10).collect();
        assert_eq!(read.len(), 2, "{read:?}");
        assert!(read[1].is_err());
    }

    #[test]
    fn the_billion_laughs_stay_refused_by_the_parser() {
        let mut text = String::from("l0: &l0 [x,x,x,x,x,x,x,x,x,x]\n");
        for level in 1..9 {
            text.push_str(&format!("l{level}: &l{level} [{}]\n", vec![format!("*l{}", level - 1); 10].join(",")));
        }
        assert!(from_str(&text).is_err());
    }
}
