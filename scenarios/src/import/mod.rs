//! Importers of public GPU-cluster traces into scenarios (docs/import.md): the openb trace (nodes and tasks, see
//! [`openb`]) and node lists alone (see [`nodes`]). Each reads its CSV row by row, maps it onto the scenario format
//! (docs/twin.md) and writes YAML that [`crate::scenario::parse_scenario`] reads. A bad row is an error naming the
//! file, the line and the column; nothing panics on input.
//!
//! The mapping shared by both: every passthrough GPU publishes one resource, [`PASSTHROUGH_RESOURCE`], and carries
//! its model in the label [`LABEL_PRODUCT`]; a class of one model selects that label, a class admitting several
//! models selects a set label every node of those models carries ([`set_label`]). docs/import.md says why.

pub mod nodes;
pub mod openb;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The one extended resource every passthrough GPU is published as (KubeVirt's `permittedHostDevices` mapping every
/// model's PCI selector to it), so that one class can admit several models.
pub const PASSTHROUGH_RESOURCE: &str = "nvidia.com/passthrough-gpu";
/// GPU feature discovery's model label.
pub const LABEL_PRODUCT: &str = "nvidia.com/gpu.product";
/// gpu-operator's per-node GPU mode: `vm-passthrough` or `vm-vgpu`.
pub const LABEL_WORKLOAD: &str = "nvidia.com/gpu.workload.config";
/// gpu-operator's per-node vGPU profile.
pub const LABEL_VGPU_CONFIG: &str = "nvidia.com/vgpu.config";
/// The prefix of the labels naming the model sets (`gpu_spec` alternatives) a node belongs to.
pub const SET_LABEL_PREFIX: &str = "sets.gpu.cozystack.io/";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImportError {
    /// The file as a whole: cannot be read, or its header lacks a column.
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
    /// One row, as a whole (wrong number of fields, not UTF-8, a duplicate).
    #[error("{file}:{line}: {reason}")]
    Line { file: String, line: u64, reason: String },
    /// One cell: line, column (1-based) and its header name.
    #[error("{file}:{line}: column {column} ({name}): {reason}")]
    Cell { file: String, line: u64, column: usize, name: String, reason: String },
    /// An option out of its range.
    #[error("{0}")]
    Options(String),
}

/// A CSV file read one row at a time, its cells parsed with errors that name file, line and column.
pub(crate) struct Table {
    file: String,
    reader: csv::Reader<Box<dyn io::Read>>,
    headers: Vec<String>,
    record: csv::StringRecord,
    /// Data rows read so far.
    pub rows: u64,
}

impl Table {
    pub fn open(path: &Path) -> Result<Table, ImportError> {
        let file = path.display().to_string();
        let handle = File::open(path).map_err(|e| ImportError::File { file: file.clone(), reason: e.to_string() })?;
        Table::from_reader(file, Box::new(io::BufReader::new(handle)))
    }

    pub fn from_reader(file: String, input: Box<dyn io::Read>) -> Result<Table, ImportError> {
        let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(input);
        let headers = match reader.headers() {
            Ok(headers) => headers.iter().map(|h| h.trim().to_owned()).collect(),
            Err(error) => return Err(csv_error(&file, error)),
        };
        Ok(Table { file, reader, headers, record: csv::StringRecord::new(), rows: 0 })
    }

    pub fn file(&self) -> &str {
        &self.file
    }

    /// The index of a column, if the header has it.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.headers.iter().position(|h| h == name)
    }

    /// The index of a column the header must have.
    pub fn require(&self, name: &str) -> Result<usize, ImportError> {
        self.column(name).ok_or_else(|| ImportError::File {
            file: self.file.clone(),
            reason: format!("the header has no column {name:?} (it has: {})", self.headers.join(", ")),
        })
    }

    /// Reads the next row; `false` at the end.
    pub fn next_row(&mut self) -> Result<bool, ImportError> {
        match self.reader.read_record(&mut self.record) {
            Ok(more) => {
                if more {
                    self.rows += 1;
                }
                Ok(more)
            }
            Err(error) => Err(csv_error(&self.file, error)),
        }
    }

    /// The current row's line (1-based, the header is line 1).
    pub fn line(&self) -> u64 {
        self.record.position().map_or(0, |p| p.line())
    }

    /// The current row's cell, trimmed.
    pub fn text(&self, column: usize) -> &str {
        self.record.get(column).unwrap_or("").trim()
    }

    pub fn cell_error(&self, column: usize, reason: impl Into<String>) -> ImportError {
        ImportError::Cell {
            file: self.file.clone(),
            line: self.line(),
            column: column + 1,
            name: self.headers.get(column).cloned().unwrap_or_default(),
            reason: reason.into(),
        }
    }

    /// The cell as a whole number.
    pub fn whole(&self, column: usize) -> Result<u64, ImportError> {
        let text = self.text(column);
        text.parse::<u64>().map_err(|_| self.cell_error(column, format!("{text:?} is not a whole number")))
    }

    /// The cell as a whole number, or `None` when empty.
    pub fn optional_whole(&self, column: usize) -> Result<Option<u64>, ImportError> {
        if self.text(column).is_empty() { Ok(None) } else { self.whole(column).map(Some) }
    }
}

fn csv_error(file: &str, error: csv::Error) -> ImportError {
    let line = error.position().map_or(0, |p| p.line());
    let reason = match error.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("{len} fields where the header has {expected_len}")
        }
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_owned(),
        _ => error.to_string(),
    };
    if line == 0 {
        ImportError::File { file: file.to_owned(), reason }
    } else {
        ImportError::Line { file: file.to_owned(), line, reason }
    }
}

/// A duration in trace seconds: a whole number of seconds (`86400`) or Go-style parts (`90s`, `6h`, `1d12h`).
pub fn parse_seconds(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(seconds);
    }
    let bad = || format!("{text:?} is not a time like 86400, 90s, 15m, 6h or 1d12h");
    let mut rest = text;
    let mut total = 0u64;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let split = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (digits, tail) = rest.split_at(split);
        let value: u64 = digits.parse().map_err(|_| bad())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        total = value.checked_mul(scale).and_then(|part| total.checked_add(part)).ok_or_else(bad)?;
        rest = next;
    }
    Ok(total)
}

/// A model name as it goes into object names and label keys: lowercase, runs of other characters as `-`.
pub fn slug(model: &str) -> String {
    let mut out = String::new();
    for c in model.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_owned();
    if out.is_empty() { "gpu".to_owned() } else { out }
}

/// A model name as a label value: at most 63 characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
pub fn label_value(model: &str) -> String {
    let cleaned: String = model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    trimmed.chars().take(63).collect::<String>().trim_end_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

/// The slug of a model set (sorted, distinct models): the models' slugs joined by `.`, or, past a label name's 63
/// characters, `set-` and 16 hex digits of their SHA-256.
pub fn set_slug(models: &[String]) -> String {
    let joined = models.iter().map(|m| slug(m)).collect::<Vec<_>>().join(".");
    if joined.len() <= 63 {
        return joined;
    }
    let digest = Sha256::digest(models.join("|").as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("set-{hex}")
}

/// The label nodes of every model in `models` carry (a class admitting those models selects it).
pub fn set_label(models: &[String]) -> String {
    format!("{SET_LABEL_PREFIX}{}", set_slug(models))
}

/// A GPUClass the scenario declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassOut {
    pub name: String,
    pub resource_name: String,
    /// `Passthrough` or `VGPU`.
    pub mode: &'static str,
    pub max_count: u32,
    pub node_selector: BTreeMap<String, String>,
}

/// `count` equal nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGroupOut {
    pub prefix: String,
    pub count: u32,
    pub cpu_millis: u64,
    pub memory_mib: u64,
    pub devices: BTreeMap<String, u64>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantOut {
    pub name: String,
    pub vgpu_entitled: bool,
}

/// One timed VM: created at `at_ms`, stopped (and deleted, whether it ran or not) `lifetime_ms` later, at its
/// trace deletion time (`None`: runs to the end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmOut {
    pub at_ms: u64,
    pub tenant: String,
    pub name: String,
    pub cpu_millis: u64,
    pub memory_mib: u64,
    pub lifetime_ms: Option<u64>,
    /// A claim template: class and units (`None`: a VM without GPUs).
    pub gpu: Option<(String, u32)>,
}

/// An imported scenario, before it is written.
#[derive(Clone, Debug, Default)]
pub struct Imported {
    pub name: String,
    /// Comment lines at the top of the file (where it came from, the options).
    pub header: Vec<String>,
    pub description: String,
    pub duration_ms: u64,
    pub classes: Vec<ClassOut>,
    pub nodes: Vec<NodeGroupOut>,
    pub tenants: Vec<TenantOut>,
    pub vms: Vec<VmOut>,
    /// What the import counted (rows read, tasks kept and dropped by reason, VMs by kind, nodes).
    pub summary: BTreeMap<String, u64>,
}

/// Milliseconds as a scenario duration: whole seconds as `<n>s`, else `<n>ms`.
pub fn duration_text(ms: u64) -> String {
    if ms.is_multiple_of(1_000) { format!("{}s", ms / 1_000) } else { format!("{ms}ms") }
}

/// A JSON value as a YAML flow node: mappings with bare keys where a key is a plain word (quoted otherwise, as the
/// label keys `nvidia.com/gpu.product` are), scalars in JSON's form, which YAML reads the same.
fn flow(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => flow_mapping(map.iter().map(|(key, value)| (key.as_str(), value)), out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&value_text(scalar)),
    }
}

fn flow_mapping<'a>(pairs: impl Iterator<Item = (&'a str, &'a Value)>, out: &mut String) {
    out.push('{');
    for (i, (key, value)) in pairs.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        if key.chars().all(|c| c.is_ascii_alphanumeric()) {
            out.push_str(key);
        } else {
            out.push_str(&value_text(&json!(key)));
        }
        out.push_str(": ");
        flow(value, out);
    }
    out.push('}');
}

fn value_text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value serializes")
}

/// An ordered JSON object from (key, value) pairs (serde_json's map keeps insertion order only with a feature this
/// workspace does not enable, so rows are built in the order the scenario format documents by hand).
struct Row(Vec<(&'static str, Value)>);

impl Row {
    /// The row with `map` under `key`, when there is anything in it (empty maps are left out, as the format's
    /// optional fields are).
    fn with_map(mut self, key: &'static str, map: &BTreeMap<String, impl serde::Serialize>) -> Row {
        if !map.is_empty() {
            self.0.push((key, json!(map)));
        }
        self
    }

    fn yaml(&self) -> String {
        let mut out = String::new();
        flow_mapping(self.0.iter().map(|(key, value)| (*key, value)), &mut out);
        out
    }

    fn json(&self) -> String {
        let fields: Vec<String> =
            self.0.iter().map(|(key, value)| format!("{}: {}", value_text(&json!(key)), value_text(value))).collect();
        format!("{{{}}}", fields.join(", "))
    }
}

impl Imported {
    fn class_rows(&self) -> Vec<Row> {
        let rows = self.classes.iter().map(|class| {
            Row(vec![
                ("name", json!(class.name)),
                ("resourceName", json!(class.resource_name)),
                ("mode", json!(class.mode)),
                ("maxCount", json!(class.max_count)),
            ])
            .with_map("nodeSelector", &class.node_selector)
        });
        rows.collect()
    }

    fn node_rows(&self) -> Vec<Row> {
        let rows = self.nodes.iter().map(|group| {
            Row(vec![
                ("prefix", json!(group.prefix)),
                ("count", json!(group.count)),
                ("cpu", json!(format!("{}m", group.cpu_millis))),
                ("memory", json!(format!("{}Mi", group.memory_mib))),
                ("devices", json!(group.devices)),
            ])
            .with_map("labels", &group.labels)
        });
        rows.collect()
    }

    fn tenant_rows(&self) -> Vec<Row> {
        let rows =
            self.tenants.iter().map(|t| Row(vec![("name", json!(t.name)), ("vgpuEntitled", json!(t.vgpu_entitled))]));
        rows.collect()
    }

    fn vm_rows(&self) -> impl Iterator<Item = Row> + '_ {
        self.vms.iter().map(|vm| {
            let gpus = match &vm.gpu {
                Some((class, count)) => json!([{"claimTemplate": {"class": class, "count": count}}]),
                None => json!([]),
            };
            let mut row = vec![
                ("at", json!(duration_text(vm.at_ms))),
                ("tenant", json!(vm.tenant)),
                ("name", json!(vm.name)),
                ("cpu", json!(format!("{}m", vm.cpu_millis))),
                ("memory", json!(format!("{}Mi", vm.memory_mib))),
                ("gpus", gpus),
            ];
            // The trace's deletion time, absolute: the tenant deletes the VM then, started or not.
            if let Some(ms) = vm.lifetime_ms {
                row.push(("stopAt", json!(duration_text(vm.at_ms + ms))));
            }
            Row(row)
        })
    }

    /// Writes the scenario (docs/twin.md's format) as YAML: the header as comments, one line per class, node
    /// group, tenant and VM.
    pub fn write_yaml(&self, out: &mut dyn Write) -> io::Result<()> {
        for line in &self.header {
            writeln!(out, "# {line}")?;
        }
        writeln!(out, "name: {}", value_text(&json!(self.name)))?;
        if !self.description.is_empty() {
            writeln!(out, "description: {}", value_text(&json!(self.description)))?;
        }
        writeln!(out, "seed: 1")?;
        writeln!(out, "duration: {}", duration_text(self.duration_ms))?;
        writeln!(out, "cluster:")?;
        for (field, rows) in [("classes", self.class_rows()), ("nodes", self.node_rows())] {
            writeln!(out, "  {field}:")?;
            if rows.is_empty() {
                writeln!(out, "  []")?;
            }
            for row in rows {
                writeln!(out, "  - {}", row.yaml())?;
            }
        }
        let tenants = self.tenant_rows();
        if !tenants.is_empty() {
            writeln!(out, "  tenants:")?;
            for row in tenants {
                writeln!(out, "  - {}", row.yaml())?;
            }
        }
        if !self.vms.is_empty() {
            writeln!(out, "vms:")?;
        }
        for row in self.vm_rows() {
            writeln!(out, "- {}", row.yaml())?;
        }
        Ok(())
    }

    /// Writes the same scenario as JSON (which is YAML too, and read about ten times faster: docs/import.md), one
    /// line per class, node group, tenant and VM. JSON has no comments: the header is kept as the scenario's
    /// `notes`.
    pub fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        let list = |rows: Vec<Row>| -> String {
            let lines: Vec<String> = rows.iter().map(|row| format!("\n    {}", row.json())).collect();
            format!("[{}]", lines.join(","))
        };
        writeln!(out, "{{\"name\": {},", value_text(&json!(self.name)))?;
        writeln!(out, "\"notes\": {},", value_text(&json!(self.header)))?;
        if !self.description.is_empty() {
            writeln!(out, "\"description\": {},", value_text(&json!(self.description)))?;
        }
        writeln!(out, "\"seed\": 1,")?;
        writeln!(out, "\"duration\": {},", value_text(&json!(duration_text(self.duration_ms))))?;
        write!(out, "\"cluster\": {{\n  \"classes\": {},", list(self.class_rows()))?;
        write!(out, "\n  \"nodes\": {}", list(self.node_rows()))?;
        let tenants = self.tenant_rows();
        if !tenants.is_empty() {
            write!(out, ",\n  \"tenants\": {}", list(tenants))?;
        }
        write!(out, "}},\n\"vms\": [")?;
        for (i, row) in self.vm_rows().enumerate() {
            write!(out, "{}\n  {}", if i == 0 { "" } else { "," }, row.json())?;
        }
        writeln!(out, "]}}")
    }

    /// The scenario as YAML text.
    pub fn to_yaml(&self) -> String {
        let mut out = Vec::new();
        self.write_yaml(&mut out).expect("writing to memory does not fail");
        String::from_utf8(out).expect("the scenario is UTF-8")
    }

    /// The scenario as JSON text.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out).expect("writing to memory does not fail");
        String::from_utf8(out).expect("the scenario is UTF-8")
    }

    pub(crate) fn count(&mut self, key: &str, by: u64) {
        *self.summary.entry(key.to_owned()).or_insert(0) += by;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_plain_and_go_style() {
        assert_eq!(parse_seconds("86400"), Ok(86_400));
        assert_eq!(parse_seconds("1d12h"), Ok(129_600));
        assert_eq!(parse_seconds("90s"), Ok(90));
        assert!(parse_seconds("soon").is_err());
        assert!(parse_seconds("").is_err());
        assert!(parse_seconds("5x").is_err());
    }

    #[test]
    fn names_and_labels_are_valid() {
        assert_eq!(slug("A100-SXM4-80GB"), "a100-sxm4-80gb");
        assert_eq!(slug("GPU series/1 "), "gpu-series-1");
        assert_eq!(slug("+++"), "gpu");
        assert_eq!(label_value("Tesla V100 (32GB)"), "Tesla_V100__32GB");
        let sets = vec!["V100M16".to_owned(), "V100M32".to_owned()];
        assert_eq!(set_label(&sets), "sets.gpu.cozystack.io/v100m16.v100m32");
        let long: Vec<String> = (0..12).map(|n| format!("MODEL-{n}")).collect();
        assert!(set_slug(&long).starts_with("set-") && set_slug(&long).len() == 20);
        assert_eq!(duration_text(3_000), "3s");
        assert_eq!(duration_text(1_500), "1500ms");
    }
}
