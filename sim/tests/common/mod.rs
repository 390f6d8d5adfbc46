//! What the twin's tests share: an event-log sink they can read back.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// An event-log sink the test keeps a handle to.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// The log as written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// (t_ms, object, what) of every record.
    #[allow(dead_code)] // not every test binary reads records
    pub fn records(&self) -> Vec<(u64, String, String)> {
        self.text()
            .lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                let field = |name: &str| value[name].as_str().unwrap().to_owned();
                (value["t_ms"].as_u64().unwrap(), field("object"), field("what"))
            })
            .collect()
    }
}
