//! Hostile values and the mutations that plant them: in a JSON tree (valid shapes, hostile values) and in the text
//! it is written as (truncated, duplicated keys, numbers no integer holds, bytes that are not UTF-8).

use arbitrary::Unstructured;
use serde_json::{Map, Value, json};

/// The choices a case makes, read from its byte tape. A tape that runs out (or reads zeros) chooses the first
/// option, the smallest number and "no", so proptest's shrinking towards short, zero tapes shrinks towards the
/// unmutated fixture.
pub struct Tape<'a>(Unstructured<'a>);

impl<'a> Tape<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Tape(Unstructured::new(bytes))
    }

    /// An index below `count` (which must be positive).
    pub fn pick(&mut self, count: usize) -> usize {
        self.0.int_in_range(0..=count - 1).unwrap_or(0)
    }

    pub fn choose<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.pick(items.len())]
    }

    /// True `numerator` times in `denominator`.
    pub fn chance(&mut self, numerator: u32, denominator: u32) -> bool {
        self.0.int_in_range(0..=denominator - 1).unwrap_or(0) >= denominator - numerator
    }

    pub fn up_to(&mut self, max: usize) -> usize {
        self.0.int_in_range(0..=max).unwrap_or(0)
    }

    pub fn u64(&mut self) -> u64 {
        self.0.arbitrary().unwrap_or(0)
    }
}

/// The deepest nesting a mutation builds: past serde_json's limit of 128 and the YAML reader's of 64, but shallow
/// enough that building and dropping the value (both recursive) stays far from the stack's end.
pub const NESTING_MAX: usize = 300;
/// The long string: 64 KiB, a quarter of what one annotation may hold.
pub const LONG_STRING_BYTES: usize = 64 * 1024;

/// Integers at and past the edges of the types the fields are read into.
const INTEGERS: [i128; 16] = [
    0,
    1,
    -1,
    2,
    8,
    9,
    64,
    65,
    i32::MIN as i128,
    u32::MAX as i128,
    u32::MAX as i128 + 1,
    i64::MAX as i128,
    i64::MIN as i128,
    u64::MAX as i128,
    (1 << 53) + 1,
    1_000_000_000,
];

/// Strings a field may meet: empty, numeric, quantity-like, unicode, JSON pointer escapes, Kubernetes' length limits
/// and one past them.
pub fn hostile_string(tape: &mut Tape) -> String {
    match tape.pick(20) {
        0 => String::new(),
        1 => " ".to_owned(),
        2 => "0".to_owned(),
        3 => "-1".to_owned(),
        4 => tape
            .choose(&["1e999", "1e-30", "1Ei", "16Ei", "100m", "0.000000001", "+1", ".5", "Ki", "-", "9e18"])
            .to_string(),
        5 => "true".to_owned(),
        6 => "null".to_owned(),
        7 => "ẞ🚀\u{202e}ǅ\u{301}".to_owned(),
        8 => "\u{0}\n\t\"\\".to_owned(),
        9 => "a/b~1c~0d".to_owned(),
        10 if tape.chance(1, 4) => "x".repeat(LONG_STRING_BYTES),
        10 => "x".repeat(300),
        11 => "n".repeat(254),
        12 => "l".repeat(64),
        13 => "gpuclaim-0".to_owned(),
        14 => tape
            .choose(&["h100", "a100-40c", "train-a", "busy", "tenant-a", "nvidia.com/GH100_H100_SXM5_80GB"])
            .to_string(),
        15 => "[]".to_owned(),
        16 => r#"[{"claim":"train-a"}]"#.to_owned(),
        17 => "é".repeat(200),
        18 => "CREATE".to_owned(),
        _ => "🚀".repeat(70),
    }
}

/// A scalar of any type: integers at the edges, floats where integers go, strings, booleans, null.
pub fn hostile_scalar(tape: &mut Tape) -> Value {
    match tape.pick(6) {
        0 => integer(*tape.choose(&INTEGERS)),
        1 => json!(*tape.choose(&[0.5, -0.0, 1.0, 1e308, -1e308, f64::MIN_POSITIVE, 8.000001, 4294967296.5])),
        2 => Value::String(hostile_string(tape)),
        3 => Value::Bool(tape.chance(1, 2)),
        4 => Value::Null,
        _ => integer(tape.u64() as i128 - if tape.chance(1, 2) { 0 } else { 1 << 63 }),
    }
}

fn integer(n: i128) -> Value {
    match (u64::try_from(n), i64::try_from(n)) {
        (Ok(n), _) => json!(n),
        (_, Ok(n)) => json!(n),
        _ => json!(n as f64),
    }
}

/// Any value: mostly a scalar, else an empty or small container, nesting past the parsers' limits, or (rarely: each
/// costs as much as a hundred reviews) a long list.
pub fn hostile_value(tape: &mut Tape) -> Value {
    match tape.pick(64) {
        0..=47 => hostile_scalar(tape),
        48..=52 => json!([]),
        53..=57 => json!({}),
        58..=62 => {
            let depth = *tape.choose(&[2, 64, 127, 128, 129, NESTING_MAX]);
            nested(depth, tape.chance(1, 2))
        }
        _ => {
            // A long list of small items (a long list of 64 KiB strings would be a test of memory, not of code).
            let count = *tape.choose(&[100, 1_000, 10_000]);
            Value::Array(vec![integer(*tape.choose(&INTEGERS)); count])
        }
    }
}

/// `depth` lists (or maps) inside each other.
pub fn nested(depth: usize, maps: bool) -> Value {
    let mut value = Value::Null;
    for _ in 0..depth {
        value = if maps { json!({"a": value}) } else { json!([value]) };
    }
    value
}

/// Mutates `tree` `count` times: at a random place in it, or at one of `targets` (JSON pointers of the fields the
/// code reads, whose parents are created when missing), a value is replaced, removed, added or wrapped.
pub fn mutate_tree(tape: &mut Tape, tree: &mut Value, targets: &[&str], count: usize) {
    for _ in 0..count {
        if !targets.is_empty() && tape.chance(3, 4) {
            let pointer = *tape.choose(targets);
            let value = hostile_value(tape);
            set_pointer(tree, pointer, value, tape.chance(1, 8));
        } else {
            mutate_somewhere(tape, tree);
        }
    }
}

/// Sets (or, with `remove`, removes) the value at `pointer`, creating missing parents as maps.
pub fn set_pointer(tree: &mut Value, pointer: &str, value: Value, remove: bool) {
    let tokens: Vec<String> = pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect();
    let Some((last, parents)) = tokens.split_last() else {
        *tree = value;
        return;
    };
    let mut node = tree;
    for token in parents {
        node = match node {
            Value::Array(items) => match token.parse::<usize>().ok().filter(|i| *i < items.len()) {
                Some(i) => &mut items[i],
                None => return,
            },
            _ => {
                if !node.is_object() {
                    *node = Value::Object(Map::new());
                }
                node.as_object_mut().expect("made a map above").entry(token.clone()).or_insert(Value::Null)
            }
        };
    }
    match node {
        Value::Array(items) => {
            if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < items.len()) {
                if remove { drop(items.remove(i)) } else { items[i] = value }
            }
        }
        _ => {
            if !node.is_object() {
                *node = Value::Object(Map::new());
            }
            let map = node.as_object_mut().expect("made a map above");
            if remove {
                map.remove(last);
            } else {
                map.insert(last.clone(), value);
            }
        }
    }
}

/// One mutation at a place reached by a walk from the root that stops at random (bounded by the tree's depth).
fn mutate_somewhere(tape: &mut Tape, tree: &mut Value) {
    // The walk is chosen on a shared borrow first, then followed to change the place it reached.
    let mut path: Vec<Step> = Vec::new();
    let mut node = &*tree;
    for _ in 0..NESTING_MAX {
        if tape.chance(1, 4) {
            break;
        }
        match node {
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(tape.pick(map.len())).expect("index below len").clone();
                if tape.chance(1, 6) {
                    path.push(Step::Beside(key));
                    break;
                }
                node = &map[&key];
                path.push(Step::Key(key));
            }
            Value::Array(items) if !items.is_empty() => {
                let index = tape.pick(items.len());
                node = &items[index];
                path.push(Step::Index(index));
            }
            _ => break,
        }
    }
    let mut place = tree;
    for step in path {
        place = match step {
            Step::Key(key) => &mut place[key.as_str()],
            Step::Index(index) => &mut place[index],
            Step::Beside(key) => {
                // Remove the key, or add an unknown one beside it.
                let map = place.as_object_mut().expect("the walk stopped at a map");
                if tape.chance(1, 2) {
                    map.remove(&key);
                } else {
                    map.insert(format!("{key}X"), hostile_value(tape));
                }
                return;
            }
        };
    }
    *place = match tape.pick(4) {
        0 => Value::Array(vec![place.take()]),
        1 => Value::Null,
        _ => hostile_value(tape),
    };
}

enum Step {
    Key(String),
    Index(usize),
    Beside(String),
}

/// Number literals no integer field holds: too large for any type, negative zero, exponents, a float for an integer.
const NUMBER_LITERALS: [&str; 9] =
    ["1e400", "-0", "18446744073709551616", "1.0", "1e3", "-9223372036854775809", "0.1e1", "4294967296", "1E-400"];

/// Mutates the text a tree was written as: truncation, a duplicated key, a number literal, a byte that breaks UTF-8
/// or the syntax, a byte order mark, padding. `keys` are the keys worth duplicating.
pub fn mutate_text(tape: &mut Tape, text: &mut Vec<u8>, keys: &[&str]) {
    match tape.pick(8) {
        0 => {
            let at = tape.up_to(text.len());
            text.truncate(at);
        }
        1 => {
            // After an opening brace, a key the map may already have: JSON keeps the last, YAML refuses both.
            if let Some(at) = nth_byte(tape, text, b'{') {
                let key = tape.choose(keys);
                let value = hostile_scalar(tape);
                let entry = format!("\"{key}\":{value},");
                text.splice(at + 1..at + 1, entry.into_bytes());
            }
        }
        2 => {
            if let Some(at) = nth_byte(tape, text, b':') {
                let literal = tape.choose(&NUMBER_LITERALS);
                let end = text[at + 1..].iter().position(|b| b",}]".contains(b)).map_or(text.len(), |p| at + 1 + p);
                text.splice(at + 1..end, literal.bytes());
            }
        }
        3 => {
            let at = tape.up_to(text.len());
            let byte = *tape.choose(&[0xff, 0xc3, 0x00, b'"', b'\\', b'{', b']', b',', b'\n', b'&', b'*', b'!']);
            text.insert(at, byte);
        }
        4 => text.splice(0..0, "\u{feff}".bytes()).for_each(drop),
        5 => text.extend_from_slice(b" \n\t garbage"),
        6 => text.splice(0..0, " \n".repeat(tape.up_to(64)).into_bytes()).for_each(drop),
        _ => {
            if !text.is_empty() {
                let at = tape.pick(text.len());
                text[at] ^= 1 << tape.pick(8);
            }
        }
    }
}

/// The position of a random occurrence of `byte` (among the first few thousand), if any.
fn nth_byte(tape: &mut Tape, text: &[u8], byte: u8) -> Option<usize> {
    let positions: Vec<usize> =
        text.iter().enumerate().filter(|(_, b)| **b == byte).map(|(i, _)| i).take(4096).collect();
    (!positions.is_empty()).then(|| positions[tape.pick(positions.len())])
}
