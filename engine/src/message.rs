//! Refusal messages quote what was written, and what was written may be a 64 KiB string or hold a newline:
//! [`readable`] keeps a message one line a person reads (the API server hands a webhook's message to the client
//! whole, and a reader's error is one line on a terminal). The errors keep the whole value as data; only their
//! messages are made readable.

use std::borrow::Cow;

/// The longest word a message keeps whole: past any Kubernetes name (253 bytes), a label value (63) or a quantity.
pub const WORD_BYTES_MAX: usize = 256;
/// What is kept of a longer word: its start, and its end (which holds the closing quote, if any).
const HEAD_BYTES: usize = 200;
const TAIL_BYTES: usize = 8;

/// `text` on one line: control characters (a newline a quoted value held) written as escapes, and every word (a
/// run without whitespace) longer than [`WORD_BYTES_MAX`] cut to its first 200 and last 8 bytes around
/// `…[N bytes]…`, N the bytes left out.
pub fn readable(text: &str) -> Cow<'_, str> {
    let text = escape_controls(text);
    if !text.split_whitespace().any(|word| word.len() > WORD_BYTES_MAX) {
        return text;
    }
    let mut out = String::with_capacity(text.len().min(4 * 1024));
    let mut rest = &*text;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, after) = rest.split_at(word_end);
        out.push_str(&cut(word));
        let space_end = after.find(|c: char| !c.is_whitespace()).unwrap_or(after.len());
        out.push_str(&after[..space_end]);
        rest = &after[space_end..];
    }
    Cow::Owned(out)
}

fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.contains(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect(),
    )
}

fn cut(word: &str) -> Cow<'_, str> {
    if word.len() <= WORD_BYTES_MAX {
        return Cow::Borrowed(word);
    }
    let mut head = HEAD_BYTES;
    while !word.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = word.len() - TAIL_BYTES;
    while !word.is_char_boundary(tail) {
        tail += 1;
    }
    Cow::Owned(format!("{}…[{} bytes]…{}", &word[..head], tail - head, &word[tail..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_quoted_value_is_cut_and_the_rest_of_the_message_kept() {
        let name = "y".repeat(64 * 1024);
        let message = format!("field spec.mode: unknown variant `{name}`, expected `Passthrough` or `Vgpu`");
        let short = readable(&message);
        assert!(short.len() < 400, "{}", short.len());
        assert!(short.starts_with("field spec.mode: unknown variant `yyy"), "{short}");
        // The word is the name between its backticks and the comma after: 3 bytes more than the name.
        assert!(short.contains(&format!("…[{} bytes]…", 64 * 1024 + 3 - 208)), "{short}");
        assert!(short.ends_with("y`, expected `Passthrough` or `Vgpu`"), "{short}");
    }

    #[test]
    fn messages_of_readable_words_are_left_as_they_are() {
        let message = format!("GPU claim {:?} does not exist in this namespace", "n".repeat(253));
        assert!(matches!(readable(&message), Cow::Borrowed(_)));
        assert_eq!(readable("a  b c"), "a  b c");
    }

    #[test]
    fn a_quoted_newline_is_written_as_an_escape() {
        assert_eq!(
            readable("unknown variant `a\nb\t\0`, expected `claim`"),
            r"unknown variant `a\nb\t\u{0}`, expected `claim`"
        );
    }

    #[test]
    fn cuts_fall_between_characters() {
        let rockets = "🚀".repeat(100);
        let short = readable(&rockets);
        assert!(short.starts_with(&"🚀".repeat(50)) && short.ends_with(&"🚀".repeat(2)), "{short}");
    }
}
