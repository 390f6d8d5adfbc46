//! Go's formatting, where the API server's messages use it: the twin's messages are the API server's word for word.

/// Go's `strconv.Quote`: printable characters as they are, the rest escaped.
pub fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for character in text.chars() {
        match character {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\u{7}' => quoted.push_str("\\a"),
            '\u{8}' => quoted.push_str("\\b"),
            '\u{c}' => quoted.push_str("\\f"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            '\u{b}' => quoted.push_str("\\v"),
            ' ' => quoted.push(' '),
            character if (character as u32) < 0x20 || character == '\u{7f}' => {
                quoted.push_str(&format!("\\x{:02x}", character as u32));
            }
            character if !is_go_printable(character) => match character as u32 {
                code if code < 0x10000 => quoted.push_str(&format!("\\u{code:04x}")),
                code => quoted.push_str(&format!("\\U{code:08x}")),
            },
            character => quoted.push(character),
        }
    }
    quoted.push('"');
    quoted
}

/// Go's `unicode.IsPrint`, near enough: not a control, a space other than U+0020, a line or paragraph separator, or
/// one of the common format characters.
fn is_go_printable(character: char) -> bool {
    !(character.is_control()
        || character.is_whitespace()
        || matches!(character, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}')
        || character == '\u{feff}')
}
