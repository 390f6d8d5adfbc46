//! Label and field selectors as the Kubernetes API server parses, matches and writes them (k8s.io/apimachinery's
//! `labels.Parse` and `fields.ParseSelector`): the `labelSelector` and `fieldSelector` query parameters of a list or
//! watch. A selector that does not parse is the request's fault (the served API answers 400 BadRequest with the
//! error's text, which is apimachinery's); an unsupported field is refused by [`FieldSelector::check_supported`].
//!
//! No maintained crate parses selector strings (kube-core's `Selector` is built from a `LabelSelector` object and
//! only written out; `simple-selectors` 0.1 is unmaintained since 2018 and not exact), so this module does. Grammar
//! and messages follow apimachinery's source as of July 2026 (lengths are "no more than 63 bytes"; `(a,,)` parses).
//!
//! Label selectors: requirements separated by `,`, each `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`,
//! `key notin (a,b)`, `key>N` or `key<N`; keys are qualified names and values label values. Whitespace (space, tab,
//! CR, LF) separates tokens and is otherwise ignored. `!=` and `notin` match objects without the key. The parsed
//! requirements are sorted by key (stably: apimachinery's sort is only stable for up to 12 requirements) and their
//! values sorted and deduplicated, and [`Display`](fmt::Display) writes them back as apimachinery's `String()` does.
//!
//! Field selectors: terms separated by unescaped `,`, each `field=value`, `field==value` or `field!=value`, with
//! `\\`, `\,` and `\=` escaping in values. Terms are kept in the order of their sorted text, as apimachinery keeps
//! them; a field the object lacks reads as the empty string.
//!
//! ```
//! use std::borrow::Cow;
//! use std::collections::BTreeMap;
//! use gpuclaim_sim::served::select::{FieldSelector, LabelSelector};
//!
//! let selector = LabelSelector::parse("gpu.cozystack.io/claims!=true").unwrap();
//! assert!(selector.matches(&BTreeMap::new()));
//! let phase = FieldSelector::parse("status.phase!=Succeeded,status.phase!=Failed").unwrap();
//! assert!(phase.matches(|_| Some(Cow::Borrowed("Running"))));
//! assert_eq!(
//!     LabelSelector::parse("x in (a b)").unwrap_err().to_string(),
//!     "unable to parse requirement: found 'b', expected: ',' or ')'"
//! );
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A selector the API server refuses, with apimachinery's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A label selector requirement that does not parse or holds an invalid key or value.
    #[error("unable to parse requirement: {0}")]
    Requirement(RequirementError),
    /// A label selector token between requirements that is not where it stands.
    #[error("found '{found}', expected: {expected}")]
    Unexpected { found: String, expected: &'static str },
    /// A field selector term without `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldTerm { selector: String, term: String },
    /// A backslash in a field selector value not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// An unescaped `,` or `=` in a field selector value (apimachinery prints the character's code point).
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedCharacter(char),
    /// A field the resource does not select on.
    #[error("field label not supported: {0}")]
    FieldNotSupported(String),
}

/// Why one label selector requirement was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// A token that is not where it stands.
    #[error("found '{found}', expected: {expected}")]
    Unexpected { found: String, expected: &'static str },
    /// `in` or `notin` not followed by `(` (apimachinery writes this one without the comma).
    #[error("found '{found}' expected: '('")]
    OpenParenthesis { found: String },
    /// The key or values failed validation; more than one failure is written `[a, b]`.
    #[error("{}", aggregate(.0))]
    Invalid(Vec<InvalidValue>),
}

/// One value refused by validation, as apimachinery's `field.Invalid` writes it: `path: Invalid value: "v": why`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: Invalid value: {}: {detail}", super::go::quote(.value))]
pub struct InvalidValue {
    pub path: String,
    pub value: String,
    pub detail: String,
}

/// apimachinery's aggregate of errors: one is written as itself, several (duplicates dropped) as `[a, b]`.
fn aggregate(errors: &[InvalidValue]) -> String {
    let mut seen = Vec::new();
    for message in errors.iter().map(ToString::to_string) {
        if !seen.contains(&message) {
            seen.push(message);
        }
    }
    match seen.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A parsed label selector: every requirement must match. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One requirement of a label selector: a key, an operator and its values (sorted, without duplicates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: LabelOperator,
    values: Vec<String>,
}

/// A label selector operator; `=` and `==` are kept apart because the selector is written back as it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelOperator {
    /// `key=value`: the key is present with the value.
    Equals,
    /// `key==value`: the same as `=`.
    DoubleEquals,
    /// `key!=value`: the key is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the key is present with one of the values.
    In,
    /// `key notin (a,b)`: the key is absent or has none of the values.
    NotIn,
    /// `key`: the key is present.
    Exists,
    /// `!key`: the key is absent.
    DoesNotExist,
    /// `key>N`: the key's value is an integer greater than N.
    GreaterThan,
    /// `key<N`: the key's value is an integer less than N.
    LessThan,
}

impl LabelSelector {
    /// Parses a `labelSelector` as apimachinery's `labels.Parse` does, refusing it with the same message.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let mut tokens = Tokens::new(text);
        let mut requirements = Vec::new();
        // Every turn consumes at least one token, so the loop ends with the text.
        loop {
            match tokens.peek() {
                Token::Identifier(_) | Token::Not => {
                    requirements.push(requirement(&mut tokens).map_err(SelectorError::Requirement)?);
                    match tokens.next() {
                        Token::End => break,
                        Token::Comma => {
                            let after = tokens.peek();
                            if !matches!(after, Token::Identifier(_) | Token::Not) {
                                return Err(unexpected(after, "identifier after ','"));
                            }
                        }
                        other => return Err(unexpected(other, "',' or 'end of string'")),
                    }
                }
                Token::End => break,
                other => return Err(unexpected(other, "!, identifier, or 'end of string'")),
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether every requirement matches the labels (true for the empty selector).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|requirement| requirement.matches(labels))
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// apimachinery's canonical form: requirements by key, joined by `,`.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, requirement) in self.requirements.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> LabelOperator {
        self.operator
    }

    /// The values, sorted and without duplicates (none for `Exists` and `DoesNotExist`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether the labels satisfy this requirement: `!=` and `notin` hold without the key, `>` and `<` need an
    /// integer value.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let listed = |value: &String| self.values.binary_search(value).is_ok();
        match self.operator {
            LabelOperator::Equals | LabelOperator::DoubleEquals | LabelOperator::In => value.is_some_and(listed),
            LabelOperator::NotEquals | LabelOperator::NotIn => value.is_none_or(|value| !listed(value)),
            LabelOperator::Exists => value.is_some(),
            LabelOperator::DoesNotExist => value.is_none(),
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                let integer = |text: &String| text.parse::<i64>().ok();
                let (Some(value), Some(bound)) = (value.and_then(integer), self.values.first().and_then(integer))
                else {
                    return false;
                };
                if self.operator == LabelOperator::GreaterThan { value > bound } else { value < bound }
            }
        }
    }
}

/// apimachinery's `Requirement.String()`: `!key`, `key`, `key=v`, `key in (a,b)`, `key>N`.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.values.join(",");
        let key = &self.key;
        match self.operator {
            LabelOperator::Equals => write!(f, "{key}={values}"),
            LabelOperator::DoubleEquals => write!(f, "{key}=={values}"),
            LabelOperator::NotEquals => write!(f, "{key}!={values}"),
            LabelOperator::In => write!(f, "{key} in ({values})"),
            LabelOperator::NotIn => write!(f, "{key} notin ({values})"),
            LabelOperator::Exists => write!(f, "{key}"),
            LabelOperator::DoesNotExist => write!(f, "!{key}"),
            LabelOperator::GreaterThan => write!(f, "{key}>{values}"),
            LabelOperator::LessThan => write!(f, "{key}<{values}"),
        }
    }
}

/// A token of apimachinery's label selector lexer. `in` and `notin` are identifiers everywhere but in operator
/// position (`in in (in)` is the key `in` in the set `{in}`), so the lexer leaves them identifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    End,
    Identifier(&'a str),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
}

impl Token<'_> {
    /// The text apimachinery's errors quote for the token (empty at the end of the string).
    fn literal(&self) -> &str {
        match self {
            Token::End => "",
            Token::Identifier(text) => text,
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        }
    }
}

fn unexpected(found: Token<'_>, expected: &'static str) -> SelectorError {
    SelectorError::Unexpected { found: found.literal().to_owned(), expected }
}

fn unexpected_in_requirement(found: Token<'_>, expected: &'static str) -> RequirementError {
    RequirementError::Unexpected { found: found.literal().to_owned(), expected }
}

/// The text's tokens, read with one token of lookahead; past the end every read is [`Token::End`].
struct Tokens<'a> {
    tokens: Vec<Token<'a>>,
    next: usize,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Tokens<'a> {
        Tokens { tokens: lex(text), next: 0 }
    }

    fn peek(&self) -> Token<'a> {
        self.tokens.get(self.next).copied().unwrap_or(Token::End)
    }

    fn next(&mut self) -> Token<'a> {
        let token = self.peek();
        self.next += 1;
        token
    }
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(byte: u8) -> bool {
    matches!(byte, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the text as apimachinery's lexer does, up to and including the first [`Token::End`]: whitespace
/// separates; a run of special characters gives its longest operator (`!=`, `==`) or one character; anything else
/// up to whitespace or a special character is an identifier. A NUL byte ends the text, as in Go's lexer, except
/// right after an identifier, where it only ends the identifier.
fn lex(text: &str) -> Vec<Token<'_>> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    // Every turn consumes at least one byte or ends, so the loop is bounded by the text's length.
    loop {
        while bytes.get(at).copied().is_some_and(is_whitespace) {
            at += 1;
        }
        let Some(&first) = bytes.get(at).filter(|&&byte| byte != 0) else {
            tokens.push(Token::End);
            return tokens;
        };
        if is_special(first) {
            let (token, length) = special(&bytes[at..]);
            tokens.push(token);
            at += length;
        } else {
            let start = at;
            while bytes.get(at).is_some_and(|&byte| byte != 0 && !is_special(byte) && !is_whitespace(byte)) {
                at += 1;
            }
            tokens.push(Token::Identifier(&text[start..at]));
            if bytes.get(at) == Some(&0) {
                at += 1;
            }
        }
    }
}

/// The operator at the start of `bytes` (which starts with a special character) and its length.
fn special(bytes: &[u8]) -> (Token<'static>, usize) {
    match bytes {
        [b'!', b'=', ..] => (Token::NotEquals, 2),
        [b'=', b'=', ..] => (Token::DoubleEquals, 2),
        [b'!', ..] => (Token::Not, 1),
        [b'=', ..] => (Token::Equals, 1),
        [b'>', ..] => (Token::GreaterThan, 1),
        [b'<', ..] => (Token::LessThan, 1),
        [b'(', ..] => (Token::Open, 1),
        [b')', ..] => (Token::Close, 1),
        _ => (Token::Comma, 1), // the one special character left
    }
}

/// One requirement: `[!] key [operator values]`.
fn requirement(tokens: &mut Tokens<'_>) -> Result<Requirement, RequirementError> {
    let (key, unary) = key_and_unary_operator(tokens)?;
    if let Some(operator) = unary {
        return Ok(Requirement { key: key.to_owned(), operator, values: Vec::new() });
    }
    let operator = binary_operator(tokens)?;
    let values = match operator {
        LabelOperator::In | LabelOperator::NotIn => value_set(tokens)?,
        _ => exact_value(tokens)?,
    };
    validated(key, operator, values)
}

/// The key, and `DoesNotExist` after `!` or `Exists` when nothing follows the key. apimachinery validates the key
/// against no field path, so its error names the path `<nil>`.
fn key_and_unary_operator<'a>(tokens: &mut Tokens<'a>) -> Result<(&'a str, Option<LabelOperator>), RequirementError> {
    let mut token = tokens.next();
    let negated = token == Token::Not;
    if negated {
        token = tokens.next();
    }
    let Token::Identifier(key) = token else {
        return Err(unexpected_in_requirement(token, "identifier"));
    };
    if let Err(reasons) = label_key(key) {
        let invalid = InvalidValue { path: "<nil>".to_owned(), value: key.to_owned(), detail: reasons.join("; ") };
        return Err(RequirementError::Invalid(vec![invalid]));
    }
    let alone = matches!(tokens.peek(), Token::End | Token::Comma);
    let unary = match (negated, alone) {
        (true, _) => Some(LabelOperator::DoesNotExist),
        (false, true) => Some(LabelOperator::Exists),
        (false, false) => None,
    };
    Ok((key, unary))
}

fn binary_operator(tokens: &mut Tokens<'_>) -> Result<LabelOperator, RequirementError> {
    match tokens.next() {
        Token::Identifier("in") => Ok(LabelOperator::In),
        Token::Identifier("notin") => Ok(LabelOperator::NotIn),
        Token::Equals => Ok(LabelOperator::Equals),
        Token::DoubleEquals => Ok(LabelOperator::DoubleEquals),
        Token::NotEquals => Ok(LabelOperator::NotEquals),
        Token::GreaterThan => Ok(LabelOperator::GreaterThan),
        Token::LessThan => Ok(LabelOperator::LessThan),
        other => Err(unexpected_in_requirement(other, "in, notin, =, ==, !=, gt, lt")),
    }
}

/// `(a,b)`: the values of `in` and `notin`. `()` is the set of the empty value.
fn value_set(tokens: &mut Tokens<'_>) -> Result<Vec<String>, RequirementError> {
    let open = tokens.next();
    if open != Token::Open {
        return Err(RequirementError::OpenParenthesis { found: open.literal().to_owned() });
    }
    match tokens.peek() {
        Token::Identifier(_) | Token::Comma => {
            let values = value_list(tokens)?;
            tokens.next(); // the `)` the list ended at
            Ok(values.into_iter().map(str::to_owned).collect())
        }
        Token::Close => {
            tokens.next();
            Ok(vec![String::new()])
        }
        other => Err(unexpected_in_requirement(other, "',', ')' or identifier")),
    }
}

/// The values inside the parentheses, up to (not including) `)`. An empty place between commas, or before a comma
/// that opens the list or after one that closes it, is the empty value.
fn value_list<'a>(tokens: &mut Tokens<'a>) -> Result<BTreeSet<&'a str>, RequirementError> {
    let mut values = BTreeSet::new();
    // Every turn consumes at least one token, so the loop ends with the text.
    loop {
        match tokens.next() {
            Token::Identifier(value) => {
                values.insert(value);
                match tokens.peek() {
                    Token::Comma => {}
                    Token::Close => return Ok(values),
                    other => return Err(unexpected_in_requirement(other, "',' or ')'")),
                }
            }
            Token::Comma => {
                if values.is_empty() {
                    values.insert("");
                }
                match tokens.peek() {
                    Token::Close => {
                        values.insert("");
                        return Ok(values);
                    }
                    Token::Comma => {
                        values.insert("");
                    }
                    _ => {}
                }
            }
            other => return Err(unexpected_in_requirement(other, "',', or identifier")),
        }
    }
}

/// The one value of `=`, `==`, `!=`, `>` and `<`; nothing before `,` or the end is the empty value.
fn exact_value(tokens: &mut Tokens<'_>) -> Result<Vec<String>, RequirementError> {
    if matches!(tokens.peek(), Token::End | Token::Comma) {
        return Ok(vec![String::new()]);
    }
    match tokens.next() {
        Token::Identifier(value) => Ok(vec![value.to_owned()]),
        other => Err(unexpected_in_requirement(other, "identifier")),
    }
}

/// The requirement, if its values are label values (and integers for `>` and `<`); every failure is reported, as
/// apimachinery's `NewRequirement` does. The parser gives `in`/`notin` at least one value and the others exactly
/// one, so the counts need no check.
fn validated(key: &str, operator: LabelOperator, values: Vec<String>) -> Result<Requirement, RequirementError> {
    let mut invalid = Vec::new();
    if matches!(operator, LabelOperator::GreaterThan | LabelOperator::LessThan) {
        for (index, value) in values.iter().enumerate() {
            if value.parse::<i64>().is_err() {
                invalid.push(InvalidValue {
                    path: format!("values[{index}]"),
                    value: value.clone(),
                    detail: "for 'Gt', 'Lt' operators, the value must be an integer".to_owned(),
                });
            }
        }
    }
    for (index, value) in values.iter().enumerate() {
        if let Err(reason) = label_value(value) {
            invalid.push(InvalidValue {
                path: format!("values[{index}][{key}]"),
                value: value.clone(),
                detail: reason.join("; "),
            });
        }
    }
    if !invalid.is_empty() {
        return Err(RequirementError::Invalid(invalid));
    }
    Ok(Requirement { key: key.to_owned(), operator, values })
}

const LABEL_KEY_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
                                 with an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex \
                                 used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
    characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used \
    for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', \
    '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value', or '12345', \
    regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NAME_LENGTH_MAX: usize = 63;
const SUBDOMAIN_LENGTH_MAX: usize = 253;

/// A label key (apimachinery's `IsQualifiedName`): an optional DNS-subdomain prefix and `/`, then a name of 1–63
/// characters matching `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`. The reasons are apimachinery's, in its order.
fn label_key(key: &str) -> Result<(), Vec<String>> {
    let mut reasons = Vec::new();
    let name = match key.split('/').collect::<Vec<_>>().as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                reasons.push("prefix part must be non-empty".to_owned());
            } else {
                reasons.extend(dns1123_subdomain(prefix).into_iter().map(|reason| format!("prefix part {reason}")));
            }
            *name
        }
        _ => {
            return Err(vec![format!(
                "a valid label key {LABEL_KEY_MESSAGE} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')"
            )]);
        }
    };
    if name.is_empty() {
        reasons.push("name part must be non-empty".to_owned());
    } else if name.len() > NAME_LENGTH_MAX {
        reasons.push(format!("name part must be no more than {NAME_LENGTH_MAX} bytes"));
    }
    if !label_name_shaped(name) {
        reasons.push(format!("name part {LABEL_KEY_MESSAGE}"));
    }
    if reasons.is_empty() { Ok(()) } else { Err(reasons) }
}

/// A label value (apimachinery's `IsValidLabelValue`): empty, or at most 63 characters matching the key's name.
fn label_value(value: &str) -> Result<(), Vec<String>> {
    let mut reasons = Vec::new();
    if value.len() > NAME_LENGTH_MAX {
        reasons.push(format!("must be no more than {NAME_LENGTH_MAX} bytes"));
    }
    if !value.is_empty() && !label_name_shaped(value) {
        reasons.push(LABEL_VALUE_MESSAGE.to_owned());
    }
    if reasons.is_empty() { Ok(()) } else { Err(reasons) }
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric (any length).
fn label_name_shaped(name: &str) -> bool {
    let alphanumeric = |byte: &u8| byte.is_ascii_alphanumeric();
    name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
        && name.as_bytes().first().is_some_and(alphanumeric)
        && name.as_bytes().last().is_some_and(alphanumeric)
}

/// The reasons a label key's prefix is not a lowercase RFC 1123 subdomain (apimachinery's `IsDNS1123Subdomain`).
fn dns1123_subdomain(prefix: &str) -> Vec<String> {
    let mut reasons = Vec::new();
    if prefix.len() > SUBDOMAIN_LENGTH_MAX {
        reasons.push(format!("must be no more than {SUBDOMAIN_LENGTH_MAX} bytes"));
    }
    let label_ok = |label: &str| {
        label.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
            && label.as_bytes().first().is_some_and(|byte| byte.is_ascii_alphanumeric())
            && label.as_bytes().last().is_some_and(|byte| byte.is_ascii_alphanumeric())
    };
    if !prefix.split('.').all(label_ok) {
        reasons.push(DNS1123_SUBDOMAIN_MESSAGE.to_owned());
    }
    reasons
}

/// A parsed field selector: every term must match. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

/// One term of a field selector: a field, `=` (also written `==`) or `!=`, and the unescaped value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldTerm {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

/// A field selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FieldOperator {
    /// `field=value` or `field==value`: the field has the value.
    Equals,
    /// `field!=value`: the field has another value.
    NotEquals,
}

impl FieldSelector {
    /// Parses a `fieldSelector` as apimachinery's `fields.ParseSelector` does: the terms are split at unescaped
    /// commas and sorted as text; empty terms, and terms with neither field nor value (`=`), select everything.
    pub fn parse(text: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(text);
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts.into_iter().filter(|part| !part.is_empty()) {
            let Some((field, operator, escaped)) = split_term(part) else {
                return Err(SelectorError::FieldTerm { selector: text.to_owned(), term: part.to_owned() });
            };
            let value = unescape(escaped)?;
            if !field.is_empty() || !value.is_empty() {
                terms.push(FieldTerm { field: field.to_owned(), operator, value });
            }
        }
        Ok(FieldSelector { terms })
    }

    /// The terms, in the order of their sorted text.
    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether every term matches the object whose fields `field` reads; a field it does not have reads as empty,
    /// as the API server's field sets do.
    pub fn matches<'o>(&self, field: impl Fn(&str) -> Option<Cow<'o, str>>) -> bool {
        self.terms.iter().all(|term| {
            let actual = field(&term.field).unwrap_or_default();
            match term.operator {
                FieldOperator::Equals => actual == term.value,
                FieldOperator::NotEquals => actual != term.value,
            }
        })
    }

    /// Refuses the first term (in order) whose field is not one the resource selects on, with the API server's
    /// message.
    pub fn check_supported(&self, supported: &[&str]) -> Result<(), SelectorError> {
        match self.terms.iter().find(|term| !supported.contains(&term.field.as_str())) {
            Some(term) => Err(SelectorError::FieldNotSupported(term.field.clone())),
            None => Ok(()),
        }
    }
}

/// apimachinery's canonical form: `field=value` or `field!=value` with the value escaped, joined by `,`.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, term) in self.terms.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{term}")?;
        }
        Ok(())
    }
}

impl fmt::Display for FieldTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let operator = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{operator}{}", self.field, escape(&self.value))
    }
}

/// The terms of a field selector: split at commas not escaped by a backslash (none for the empty text).
fn split_terms(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

/// A term split at its first operator, `!=`, `==` or `=` (the first that starts at the earliest position).
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    term.char_indices().find_map(|(at, _)| {
        let rest = &term[at..];
        let (operator, length) = if rest.starts_with("!=") {
            (FieldOperator::NotEquals, 2)
        } else if rest.starts_with("==") {
            (FieldOperator::Equals, 2)
        } else if rest.starts_with('=') {
            (FieldOperator::Equals, 1)
        } else {
            return None;
        };
        Some((&term[..at], operator, &term[at + length..]))
    })
}

/// A field selector value with `\\`, `\,` and `\=` unescaped; any other backslash, or a bare `,` or `=`, is refused.
fn unescape(value: &str) -> Result<String, SelectorError> {
    let mut unescaped = String::with_capacity(value.len());
    let mut escaped = false;
    for c in value.chars() {
        match c {
            '\\' | ',' | '=' if escaped => unescaped.push(c),
            _ if escaped => return Err(SelectorError::InvalidEscape(format!("\\{c}"))),
            '\\' => {
                escaped = true;
                continue;
            }
            ',' | '=' => return Err(SelectorError::UnescapedCharacter(c)),
            _ => unescaped.push(c),
        }
        escaped = false;
    }
    if escaped {
        return Err(SelectorError::InvalidEscape("\\".to_owned()));
    }
    Ok(unescaped)
}

/// A field selector value with `\`, `,` and `=` escaped, as apimachinery's `EscapeValue` writes it.
fn escape(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', ',', '=']) {
        return Cow::Borrowed(value);
    }
    let mut escaped = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// apimachinery's TestLexer: the first token of each text, the longest operator a run of symbols gives.
    #[test]
    fn the_lexer_reads_apimachinerys_tokens() {
        let cases = [
            ("", Token::End),
            (",", Token::Comma),
            ("notin", Token::Identifier("notin")),
            ("in", Token::Identifier("in")),
            ("=", Token::Equals),
            ("==", Token::DoubleEquals),
            (">", Token::GreaterThan),
            ("<", Token::LessThan),
            ("!", Token::Not),
            ("!=", Token::NotEquals),
            ("(", Token::Open),
            (")", Token::Close),
            ("~", Token::Identifier("~")),
            ("||", Token::Identifier("||")),
        ];
        for (text, token) in cases {
            assert_eq!(lex(text)[0], token, "{text:?}");
        }
    }

    /// apimachinery's TestLexerSequence, and the end a NUL byte makes.
    #[test]
    fn the_lexer_splits_a_selector_into_apimachinerys_sequence() {
        use Token::*;
        let cases: [(&str, &[Token<'_>]); 8] = [
            ("key in ( value )", &[Identifier("key"), Identifier("in"), Open, Identifier("value"), Close, End]),
            ("key notin ( value )", &[Identifier("key"), Identifier("notin"), Open, Identifier("value"), Close, End]),
            (
                "key in ( value1, value2 )",
                &[
                    Identifier("key"),
                    Identifier("in"),
                    Open,
                    Identifier("value1"),
                    Comma,
                    Identifier("value2"),
                    Close,
                    End,
                ],
            ),
            ("key", &[Identifier("key"), End]),
            ("!key", &[Not, Identifier("key"), End]),
            ("()", &[Open, Close, End]),
            (
                "x>0,y<=1",
                &[
                    Identifier("x"),
                    GreaterThan,
                    Identifier("0"),
                    Comma,
                    Identifier("y"),
                    LessThan,
                    Equals,
                    Identifier("1"),
                    End,
                ],
            ),
            ("a\0b \0c", &[Identifier("a"), Identifier("b"), End]),
        ];
        for (text, tokens) in cases {
            assert_eq!(lex(text), tokens, "{text:?}");
        }
    }

    #[test]
    fn go_quoting_escapes_what_go_escapes() {
        assert_eq!(crate::served::go::quote("a\"b\\c\u{1}\u{7f}\té\u{85}"), "\"a\\\"b\\\\c\\x01\\x7f\\té\\u0085\"");
    }
}
