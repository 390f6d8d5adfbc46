//! The media ranges of an Accept header, as the API server negotiates them: each `type/subtype;name=value;...`
//! with its quality, taken best first (stable among equals), those with `q=0` left out. Discovery
//! ([`super::discovery`]) and Tables ([`super::table`]) decide from them what they answer.

/// One media range: its type (lowercased), its parameters but `q` (names lowercased), its quality.
#[derive(Debug)]
pub struct MediaRange<'a> {
    pub essence: String,
    parameters: Vec<(String, &'a str)>,
    /// `q` in thousandths (1000 when absent).
    pub quality_millis: u32,
}

impl<'a> MediaRange<'a> {
    /// One range; `None` when it does not parse (it is then skipped, as the API server skips it).
    pub fn parse(text: &'a str) -> Option<MediaRange<'a>> {
        let mut parts = text.split(';');
        let essence = parts.next()?.trim().to_ascii_lowercase();
        if essence.is_empty() {
            return None;
        }
        let mut parameters = Vec::new();
        let mut quality_millis = 1000;
        for parameter in parts {
            let (name, value) = parameter.split_once('=')?;
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().trim_matches('"'));
            if name == "q" {
                quality_millis = quality(value)?;
            } else {
                parameters.push((name, value));
            }
        }
        Some(MediaRange { essence, parameters, quality_millis })
    }

    pub fn parameter(&self, name: &str) -> Option<&'a str> {
        self.parameters.iter().find(|(key, _)| key == name).map(|(_, value)| *value)
    }

    /// `application/json` itself.
    pub fn is_json(&self) -> bool {
        self.essence == "application/json"
    }

    /// A range JSON answers: `application/json`, `application/*` or `*/*`.
    pub fn takes_json(&self) -> bool {
        self.is_json() || self.essence == "*/*" || self.essence == "application/*"
    }
}

/// The ranges of `accept`, best first (stable among equal qualities), without those of quality 0.
pub fn ranges(accept: &str) -> Vec<MediaRange<'_>> {
    let mut ranges: Vec<MediaRange<'_>> =
        accept.split(',').filter_map(MediaRange::parse).filter(|range| range.quality_millis > 0).collect();
    ranges.sort_by_key(|range| std::cmp::Reverse(range.quality_millis));
    ranges
}

/// An HTTP quality value (`0`, `0.5`, `1.000`) in thousandths; `None` if it is not one.
fn quality(text: &str) -> Option<u32> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    match whole {
        "0" => {
            Some(fraction.bytes().chain(std::iter::repeat(b'0')).take(3).fold(0, |n, b| n * 10 + u32::from(b - b'0')))
        }
        "1" if fraction.bytes().all(|byte| byte == b'0') => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quality_values_read_as_thousandths() {
        assert_eq!(quality("1"), Some(1000));
        assert_eq!(quality("1.000"), Some(1000));
        assert_eq!(quality("0.5"), Some(500));
        assert_eq!(quality("0.05"), Some(50));
        assert_eq!(quality("0"), Some(0));
        assert_eq!(quality("2"), None);
        assert_eq!(quality("0.1234"), None);
        assert_eq!(quality("x"), None);
    }

    #[test]
    fn ranges_come_best_first_and_quality_zero_is_left_out() {
        let ranges = ranges("text/plain;q=0.5, application/json, application/yaml;q=0, */*;q=0.5");
        let essences: Vec<&str> = ranges.iter().map(|range| range.essence.as_str()).collect();
        assert_eq!(essences, ["application/json", "text/plain", "*/*"]);
        assert!(ranges[0].is_json() && ranges[2].takes_json() && !ranges[1].takes_json());
    }
}
