//! Reading YAML (and JSON, which is YAML) into JSON values and writing them back, with bounds on what aliases expand
//! to.
//!
//! The crate is serde-saphyr (pure Rust, the one kube reads kubeconfigs with), set to read scalars as the project
//! always has (YAML 1.2's core schema): only `true` and `false` are booleans (not `yes` or `on`), a number written with
//! a leading zero or an underscore (`0755`, `1_000`) is a string, a tag it does not know is refused, a repeated key
//! keeps its last value and `<<` is a key like any other (no merging). A number JSON cannot hold (`.inf`, `.nan`,
//! `1e400`) is refused with its line and column.
//!
//! Aliases: one anchor of n items aliased n times expands to n² values (50 KB of text, 10^8 values). Without aliases a
//! document holds at most about one value per byte of its text, so the readers allow that many and what aliases may
//! add. serde-saphyr enforces it: it refuses a document once its aliases have replayed [`ALIASED_VALUES_MAX`] events
//! (`AliasLimits::max_total_replayed_events`; this stops the flat bomb above and the classic "billion laughs", aliases
//! of aliases, alike), once it holds more values than its text's length plus that (`Budget::max_nodes`, which counts
//! replayed values too), or more string bytes than its text's length plus [`ALIASED_BYTES_MAX`] (one long string
//! aliased many times; `Budget::max_total_scalar_bytes`). Collections nest at most [`DEPTH_MAX`] deep
//! (`Budget::max_depth`).

use serde::de::Error as _;
use serde_json::Value;

pub use serde_saphyr::Error;

/// The events a document's aliases may replay, and the values it may hold beyond one per byte of its text: enough for
/// any anchor a person writes (a value is about 100 bytes in memory: about 10 MB). A bomb is refused in about 40 ms
/// (0.4 s in a debug build).
pub const ALIASED_VALUES_MAX: usize = 100_000;

/// The string bytes a document may hold beyond those of its text: what aliases of strings may add (64 MiB).
pub const ALIASED_BYTES_MAX: usize = 64 << 20;

/// How deep collections may nest (serde-saphyr's default; serde_yaml_ng allowed 128): deeper is refused before the
/// deserializer recurses into it. Its frames take about 25 KB of stack a level in a debug build, whose test threads
/// have 2 MB: 128 overflowed there (a release build takes about 4 KB a level).
pub const DEPTH_MAX: usize = 64;

/// Writes a value (a JSON value, a CRD) as YAML in block style, as [`from_str`] reads it back. A string with line
/// breaks is written as a literal block (`|`); a long one stays on one line (serde-saphyr would fold it at 80 columns).
pub fn to_string(value: &impl serde::Serialize) -> String {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(value, options).expect("JSON values and CRDs always serialize as YAML")
}

/// Reads one YAML document as a JSON value.
pub fn from_str(text: &str) -> Result<Value, Error> {
    serde_saphyr::from_str_with_options(text, options(text))
}

/// Reads every document of a multi-document text (`---`) as JSON values, skipping empty ones; the bound on values is
/// on all of them together. It ends after the first error (serde-saphyr's iterator ends after a syntax error too, but
/// reads on past a document it could not turn into a value).
pub fn documents(text: &str) -> impl Iterator<Item = Result<Value, Error>> {
    let mut values_left = values_max(text);
    let mut reader = text.as_bytes();
    let mut read = Vec::new();
    for document in serde_saphyr::read_with_options(&mut reader, options(text)) {
        let document = document.and_then(|value| {
            values_left = values_left.checked_sub(values(&value)).ok_or_else(|| {
                Error::custom(format_args!(
                    "the documents hold more than {} values: their text's length plus {ALIASED_VALUES_MAX} (are \
                     aliases repeating an anchor?)",
                    values_max(text)
                ))
            })?;
            Ok(value)
        });
        let failed = document.is_err();
        read.push(document);
        if failed {
            break;
        }
    }
    read.into_iter()
}

fn values_max(text: &str) -> usize {
    text.len().saturating_add(ALIASED_VALUES_MAX)
}

/// How many values `value` holds, itself included.
fn values(value: &Value) -> usize {
    let mut count = 0;
    let mut unseen = vec![value];
    while let Some(value) = unseen.pop() {
        count += 1;
        match value {
            Value::Array(items) => unseen.extend(items),
            Value::Object(entries) => unseen.extend(entries.values()),
            _ => {}
        }
    }
    count
}

fn options(text: &str) -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            // The text is in memory already: its size is the caller's to bound.
            max_reader_input_bytes: None,
            // Bounded through the nodes: an event opens or closes a node, or a document.
            max_events: usize::MAX,
            max_nodes: values_max(text),
            max_total_scalar_bytes: text.len().saturating_add(ALIASED_BYTES_MAX),
            max_depth: DEPTH_MAX,
            // Aliases are bounded by what they replay; a file aliasing one anchor a hundred times is not a bomb.
            enforce_alias_anchor_ratio: false,
        },
        alias_limits: serde_saphyr::alias_limits! { max_total_replayed_events: ALIASED_VALUES_MAX },
        emit_comments: false,
        with_snippet: false,
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        null_as_string: true,
        reject_unsupported_tags: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `[&a [1, …], *a, …]`: `items` values aliased `aliases` times.
    fn flat_bomb(items: usize, aliases: usize) -> String {
        format!("[&a [{}], {}]", vec!["1"; items].join(","), vec!["*a"; aliases].join(","))
    }

    #[test]
    fn an_anchor_aliased_until_it_is_huge_is_refused_at_once() {
        // 10^8 values from 50 KB of text: 22 s and 3.2 GB through serde_yaml_ng alone.
        let started = std::time::Instant::now();
        let error = from_str(&flat_bomb(10_000, 10_000)).unwrap_err().to_string();
        assert!(error.contains("alias replay limit exceeded"), "{error}");
        assert!(error.contains("at line 1, column"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    }

    #[test]
    fn anchors_aliased_a_few_times_read_as_their_copies() {
        let value = from_str("a: &gpu {class: h100, count: 2}\nb: *gpu\nc: [*gpu, *gpu]\n").unwrap();
        assert_eq!(value["b"], value["a"]);
        assert_eq!(value["c"][1]["count"], 2);
        assert_eq!(from_str(&flat_bomb(300, 300)).unwrap().as_array().unwrap().len(), 301);
        // One anchor aliased a thousand times is no bomb.
        let text = format!("a: &h100 {{class: h100}}\nvms: [{}]\n", vec!["*h100"; 1_000].join(", "));
        assert_eq!(from_str(&text).unwrap()["vms"][999]["class"], "h100");
    }

    #[test]
    fn the_documents_of_a_text_share_one_bound() {
        // Each document alone is within its own bound (about 60,000 values); together they are not.
        let bomb = flat_bomb(60, 1_000);
        assert!(from_str(&bomb).is_ok());
        let read: Vec<_> = documents(&[bomb.as_str(); 3].join("\n---\n")).collect();
        assert_eq!(read.len(), 2, "{read:?}");
        let error = read[1].as_ref().unwrap_err().to_string();
        assert!(error.contains("the documents hold more than"), "{error}");
    }

    #[test]
    fn a_long_string_aliased_many_times_is_refused() {
        let text = format!("a: &a '{}'\nb: [{}]\n", "x".repeat(1 << 20), vec!["*a"; 100].join(","));
        let error = from_str(&text).unwrap_err().to_string();
        assert!(error.contains("ScalarBytes"), "{error}");
    }

    #[test]
    fn scalars_read_as_yaml_core_schema() {
        let text = "a: [1, -2, 18446744073709551615, 1.5, 0x1F, ~, null, true, TRUE, 'x', {b: null}]\n'1': 2\n\
                    strings: [yes, off, y, 0755, 08, 1_000, 1:30, 2026-01-01]\nnull: key\n";
        let value = from_str(text).unwrap();
        assert_eq!(
            value,
            json!({
                "a": [1, -2, 18446744073709551615u64, 1.5, 31, null, null, true, true, "x", {"b": null}],
                "1": 2,
                "strings": ["yes", "off", "y", "0755", "08", "1_000", "1:30", "2026-01-01"],
                "null": "key",
            })
        );
        assert_eq!(from_str("{a: 1, a: 2, <<: {b: 3}}").unwrap(), json!({"a": 2, "<<": {"b": 3}}));
        // Past u64, a number reads as serde_json reads it: a float.
        assert_eq!(from_str("18446744073709551616").unwrap(), json!(18446744073709551616.0));
    }

    #[test]
    fn what_json_cannot_hold_is_refused_with_its_place() {
        for text in ["a: .inf", "a: -.inf", "a: .nan", "a: 1e400"] {
            let error = from_str(text).unwrap_err().to_string();
            assert!(error.contains("non-finite float") && error.contains("at line 1, column 4"), "{text}: {error}");
        }
        let error = from_str("a: !Custom x").unwrap_err().to_string();
        assert!(error.contains("unsupported tag `!Custom` at line 1, column"), "{error}");
    }

    #[test]
    fn written_yaml_reads_back_as_the_same_value() {
        let ambiguous = [
            "yes", "no", "on", "true", "null", "~", "", " a", "012", "1_000", "1e400", ".inf", "0x1F", "1.0", "- a",
            "a: b", "#c", "a\nb", "a\n", "\t", "'", "\"", "*a", "&a", "!a", "<<", "[a]", "{a}", "é", "\u{85}",
        ];
        for text in ambiguous {
            for value in [json!(text), json!({text: [text, {"k": text}]})] {
                let written = to_string(&value);
                assert_eq!(from_str(&written).unwrap(), value, "{written:?}");
            }
        }
        for value in [json!(1.5), json!(-0.0), json!(1e300), json!(u64::MAX), json!(i64::MIN), json!({}), json!([[]])] {
            assert_eq!(from_str(&to_string(&value)).unwrap(), value);
        }
    }

    #[test]
    fn documents_skip_empty_ones() {
        let documents: Vec<Value> = documents("a: 1\n---\n---\nb: [2]\n").map(Result::unwrap).collect();
        assert_eq!(documents, [json!({"a": 1}), json!({"b": [2]})]);
    }

    #[test]
    fn documents_end_after_the_first_error() {
        for text in ["a: 1\n---\nkind: [unclosed\n---\nb: 2\n", "a: 1\n---\nkind: *unknown\n---\nb: 2\n"] {
            let read: Vec<_> = documents(text).take(10).collect();
            assert_eq!(read.len(), 2, "{read:?}");
            assert!(read[1].as_ref().unwrap_err().to_string().contains("at line 3, column"), "{read:?}");
        }
    }

    #[test]
    fn the_billion_laughs_stay_refused() {
        let mut text = String::from("l0: &l0 [x,x,x,x,x,x,x,x,x,x]\n");
        for level in 1..9 {
            text.push_str(&format!("l{level}: &l{level} [{}]\n", vec![format!("*l{}", level - 1); 10].join(",")));
        }
        let started = std::time::Instant::now();
        let error = from_str(&text).unwrap_err().to_string();
        assert!(error.contains("alias replay limit exceeded"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    }

    #[test]
    fn nesting_past_the_depth_is_refused() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(from_str(&nested(DEPTH_MAX)).is_ok());
        let error = from_str(&nested(DEPTH_MAX + 1)).unwrap_err().to_string();
        assert!(error.contains("Depth") && error.contains("at line 1, column 65"), "{error}");
        assert!(from_str(&nested(10_000)).is_err());
    }
}
