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
    /// formatting them straight into the line allocates nothing.
    #[serde(serialize_with = "displayed")]
    pub object: &'a dyn std::fmt::Display,
    pub what: &'a str,
    /// Ordered key/value pairs (a Vec, not a map, so their order is the writer's and stable).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<(&'a str, String)>,
}

fn displayed<S: serde::Serializer>(value: &&dyn std::fmt::Display, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// An object's name as the log writes it, `Kind namespace/name`, formatted only into the line.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a>(pub &'static str, pub &'a str, pub &'a str);

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.0, self.1, self.2)
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
    hasher: Sha256,
    lines: u64,
    sink: Option<Box<dyn Write>>,
    /// The line being written, kept between lines so writing one allocates nothing.
    line: Vec<u8>,
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog").field("lines", &self.lines).field("sink", &self.sink.is_some()).finish()
    }
}

impl EventLog {
    pub fn new(sink: Option<Box<dyn Write>>) -> Self {
        EventLog { hasher: Sha256::new(), lines: 0, sink, line: Vec::with_capacity(256) }
    }

    pub fn record(&mut self, record: &Record<'_>) -> Result<(), LogError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record).expect("records always serialize");
        self.line.push(b'\n');
        self.hasher.update(&self.line);
        self.lines += 1;
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

    /// The SHA-256 of every line so far, in lowercase hex.
    pub fn hash(&self) -> String {
        self.hasher.clone().finalize().iter().map(|byte| format!("{byte:02x}")).collect()
    }
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
            fields: vec![("node", "gpu-1".to_owned())],
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
}
