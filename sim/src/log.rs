//! The event log: one JSON line per state transition, and a running SHA-256 of every line, so two runs of the
//! same scenario and seed can be compared by one hash.
//!
//! Line fields, in this order: `t_ms` (virtual time), `actor`, `object` (`Kind namespace/name`), `what` (the
//! transition, PascalCase), then `fields` (what the transition needs to be read, as ordered key/value pairs).

use std::io::Write;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::kernel::Millis;

/// One transition.
#[derive(Clone, Serialize)]
pub struct Record<'a> {
    pub t_ms: Millis,
    pub actor: &'a str,
    /// Written as it formats (`Kind namespace/name`): most objects are named from their parts at every record, and
    /// writing them straight into the line allocates nothing.
    #[serde(serialize_with = "written")]
    pub object: &'a dyn LogObject,
    pub what: &'a str,
    /// Ordered key/value pairs (a Vec, not a map, so their order is the writer's and stable).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub fields: &'a [(&'a str, &'a str)],
}

fn written<S: serde::Serializer>(value: &&dyn LogObject, serializer: S) -> Result<S::Ok, S::Error> {
    let mut text = String::new();
    value.write_to(&mut text);
    serializer.serialize_str(&text)
}

/// How a record names its object: anything displayable, written through the formatting machinery, or a [`Named`],
/// whose parts are copied straight in (nearly every record is one, and the machinery cost more than the copies).
pub trait LogObject {
    fn write_to(&self, out: &mut String);
}

impl<T: std::fmt::Display + ?Sized> LogObject for T {
    fn write_to(&self, out: &mut String) {
        use std::fmt::Write as _;
        write!(out, "{self}").expect("formatting into a String does not fail");
    }
}

/// An object's name as the log writes it, `Kind namespace/name`, written only into the line.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a>(pub &'static str, pub &'a str, pub &'a str);

impl LogObject for Named<'_> {
    fn write_to(&self, out: &mut String) {
        out.reserve(self.0.len() + self.1.len() + self.2.len() + 2);
        out.push_str(self.0);
        out.push(' ');
        out.push_str(self.1);
        out.push('/');
        out.push_str(self.2);
    }
}

/// A cluster-scoped object's name as the log writes it, `Kind name`.
#[derive(Clone, Copy, Debug)]
pub struct ClusterNamed<'a>(pub &'static str, pub &'a str);

impl LogObject for ClusterNamed<'_> {
    fn write_to(&self, out: &mut String) {
        out.reserve(self.0.len() + self.1.len() + 1);
        out.push_str(self.0);
        out.push(' ');
        out.push_str(self.1);
    }
}

#[derive(Debug, thiserror::Error)]
#[error("failed to write event {line} to the log: {source}")]
pub struct LogError {
    pub line: u64,
    #[source]
    pub source: std::io::Error,
}

/// Hashes every line; writes them to the caller's sink when there is one (the library never prints).
pub struct EventLog {
    /// `None` for a log that only counts (see [`EventLog::unhashed`]).
    hasher: Option<Sha256>,
    lines: u64,
    sink: Option<Box<dyn Write>>,
    /// The line being written, kept between lines so writing one allocates nothing.
    line: Vec<u8>,
    /// The record's object as it formats, kept between lines likewise.
    object: String,
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog").field("lines", &self.lines).field("sink", &self.sink.is_some()).finish()
    }
}

impl EventLog {
    pub fn new(sink: Option<Box<dyn Write>>) -> Self {
        EventLog {
            hasher: Some(Sha256::new()),
            lines: 0,
            sink,
            line: Vec::with_capacity(256),
            object: String::with_capacity(128),
        }
    }

    /// A log that counts its lines and neither writes nor hashes them: for runs whose figures come from the world's
    /// statistics (what-if studies, whose reports print no hash), where formatting and hashing a line per event
    /// would be about a twentieth of the run for nothing read. Its [`EventLog::hash`] is empty.
    pub fn unhashed() -> Self {
        EventLog { hasher: None, ..EventLog::new(None) }
    }

    pub fn record(&mut self, record: &Record<'_>) -> Result<(), LogError> {
        self.lines += 1;
        let Some(hasher) = &mut self.hasher else { return Ok(()) };
        self.line.clear();
        write_line(&mut self.line, &mut self.object, record);
        hasher.update(&self.line);
        if let Some(sink) = &mut self.sink {
            sink.write_all(&self.line).map_err(|source| LogError { line: self.lines, source })?;
        }
        Ok(())
    }

    /// Flushes the sink (a buffered file's last lines), reporting a write error instead of losing it on drop.
    pub fn finish(mut self) -> Result<(), LogError> {
        match &mut self.sink {
            Some(sink) => sink.flush().map_err(|source| LogError { line: self.lines, source }),
            None => Ok(()),
        }
    }

    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The SHA-256 of every line so far, in lowercase hex (empty for an [unhashed](EventLog::unhashed) log).
    pub fn hash(&self) -> String {
        let Some(hasher) = &self.hasher else { return String::new() };
        hasher.clone().finalize().iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

/// Writes `record` as one JSON line, byte for byte what `serde_json` writes for [`Record`] (a test holds the two
/// together). The line's shape is fixed, so it is written directly: going through serde's serializer cost about as
/// much as the rest of a log line's work (one line per event), most of it in the per-field and per-piece calls.
fn write_line(line: &mut Vec<u8>, object: &mut String, record: &Record<'_>) {
    line.extend_from_slice(b"{\"t_ms\":");
    line.extend_from_slice(itoa::Buffer::new().format(record.t_ms.0).as_bytes());
    line.extend_from_slice(b",\"actor\":");
    push_string(line, record.actor);
    line.extend_from_slice(b",\"object\":");
    object.clear();
    record.object.write_to(object);
    push_string(line, object);
    line.extend_from_slice(b",\"what\":");
    push_string(line, record.what);
    if !record.fields.is_empty() {
        line.extend_from_slice(b",\"fields\":[");
        for (index, (key, value)) in record.fields.iter().enumerate() {
            if index > 0 {
                line.push(b',');
            }
            line.push(b'[');
            push_string(line, key);
            line.push(b',');
            push_string(line, value);
            line.push(b']');
        }
        line.push(b']');
    }
    line.extend_from_slice(b"}\n");
}

/// A JSON string: quoted as it is when nothing in it needs escaping (names, reasons: nearly always), else escaped
/// by `serde_json` (control characters, quotes and backslashes are the only bytes JSON escapes).
fn push_string(line: &mut Vec<u8>, text: &str) {
    if !needs_escape(text.as_bytes()) {
        line.push(b'"');
        line.extend_from_slice(text.as_bytes());
        line.push(b'"');
    } else {
        serde_json::to_writer(&mut *line, text).expect("a string always serializes");
    }
}

/// Whether any byte is a control character, a quote or a backslash. Eight bytes at a time: a log line is about a
/// hundred bytes of names, and a byte-by-byte test of each cost as much as the rest of writing the line. Each test
/// is the classic "has a byte below n" bit trick (exact for the question whether any byte matches; bytes of 0x80 and
/// above never match, as UTF-8 continuation bytes must not).
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_ne_bytes(chunk.try_into().expect("chunks of eight"));
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        if below(word, 0x20) | below(quote, 1) | below(backslash, 1) != 0 {
            return true;
        }
    }
    chunks.remainder().iter().any(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\')
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A sink the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(t: u64, what: &'static str) -> Record<'static> {
        Record {
            t_ms: Millis(t),
            actor: "scheduler",
            object: &"Pod tenant-a/virt-launcher-vm-1-abcde",
            what,
            fields: &[("node", "gpu-1")],
        }
    }

    #[test]
    fn lines_are_json_in_field_order_and_hashed() {
        let sink = Shared::default();
        let mut log = EventLog::new(Some(Box::new(sink.clone())));
        log.record(&record(1_500, "Bound")).unwrap();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "{\"t_ms\":1500,\"actor\":\"scheduler\",\"object\":\"Pod tenant-a/virt-launcher-vm-1-abcde\",\
             \"what\":\"Bound\",\"fields\":[[\"node\",\"gpu-1\"]]}\n"
        );
        // The hash is the SHA-256 of exactly the bytes written.
        let expected: String = Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(log.hash(), expected);
    }

    proptest::proptest! {
        /// The word-at-a-time test says what a byte-by-byte one says, wherever the byte sits in the word.
        #[test]
        fn escapes_are_found_anywhere(
            // Mostly printable bytes (quotes and backslashes among them), a control byte now and then.
            text in proptest::collection::vec(
                proptest::prop_oneof![40 => 0x20u8..=0xff, 1 => proptest::prelude::any::<u8>()],
                0..40,
            ),
        ) {
            let expected = text.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
            proptest::prop_assert_eq!(needs_escape(&text), expected);
        }

        /// The direct writer writes exactly what serde_json writes for the record, escapes and all.
        #[test]
        fn lines_are_what_serde_json_writes(
            t in 0u64..u64::MAX,
            actor in "\\PC{0,12}",
            object in "[ -~\\n\\t\"\\\\é\\u{1}\\u{7f}]{0,24}",
            what in "[A-Za-z\"\\\\]{0,10}",
            fields in proptest::collection::vec(("[a-z]{1,8}", "\\PC{0,16}|[\\u{0}-\\u{1f}\"]{1,4}"), 0..4),
        ) {
            let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let record = Record { t_ms: Millis(t), actor: &actor, object: &object, what: &what, fields: &fields };
            let mut expected = serde_json::to_vec(&record).unwrap();
            expected.push(b'\n');
            let (mut line, mut scratch) = (Vec::new(), String::new());
            write_line(&mut line, &mut scratch, &record);
            proptest::prop_assert_eq!(String::from_utf8(line).unwrap(), String::from_utf8(expected).unwrap());
        }
    }

    #[test]
    fn a_named_object_is_written_as_its_kind_namespace_and_name() {
        let named = Record { object: &Named("Pod", "tenant-a", "virt-launcher-vm-1-abcde"), ..record(1_500, "Bound") };
        let (mut direct, mut formatted, mut scratch) = (Vec::new(), Vec::new(), String::new());
        write_line(&mut direct, &mut scratch, &named);
        write_line(&mut formatted, &mut scratch, &record(1_500, "Bound"));
        assert_eq!(String::from_utf8(direct).unwrap(), String::from_utf8(formatted).unwrap());
        let mut text = String::new();
        Named("GPUClaim", "tenant-a", "vm-1-gpu-0").write_to(&mut text);
        assert_eq!(text, "GPUClaim tenant-a/vm-1-gpu-0");
        text.clear();
        ClusterNamed("GPUClass", "h100").write_to(&mut text);
        assert_eq!(text, "GPUClass h100");
    }

    #[test]
    fn the_same_lines_give_the_same_hash_and_any_change_another() {
        let mut a = EventLog::new(None);
        let mut b = EventLog::new(None);
        for log in [&mut a, &mut b] {
            log.record(&record(1, "Created")).unwrap();
            log.record(&record(2, "Bound")).unwrap();
        }
        assert_eq!(a.hash(), b.hash());
        b.record(&record(3, "Running")).unwrap();
        assert_ne!(a.hash(), b.hash());
        assert_eq!((a.lines(), b.lines()), (2, 3));
    }

    #[test]
    fn an_unhashed_log_counts_its_lines_and_hashes_none() {
        let mut log = EventLog::unhashed();
        log.record(&record(1, "Created")).unwrap();
        log.record(&record(2, "Bound")).unwrap();
        assert_eq!((log.lines(), log.hash()), (2, String::new()));
        assert_ne!(EventLog::new(None).hash(), "", "a hashed log's hash of no lines is SHA-256's");
    }
}
