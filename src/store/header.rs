//! The header line: the first line of every transcript.
//!
//! Source: FORMAT.md, "Header line", and the reference's `isHeaderLine`,
//! `fromHeaderLine` and `toHeaderLine`.

use serde_json::{Map, Value};

use super::json::{parse_object, parse_object_spans, string_units, Utf8};
use super::json_view::Spanned;

/// Largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Key order of a header line as the reference writes it.
pub const HEADER_KEY_ORDER: [&str; 10] = [
    "type",
    "version",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "seedLength",
    "origin",
    "delegationDepth",
    "agentPreset",
];

/// A validated session header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The session id (`id`).
    pub id: String,
    /// The project path (`cwd`), absent for `_no-cwd` sessions.
    pub cwd: Option<String>,
    /// Creation time, milliseconds since the Unix epoch (`createdAt`).
    pub created_at_ms: u64,
    /// The UTF-16 code units of `id` and `cwd` as written, kept only when
    /// one holds a lone surrogate (which `id` and `cwd` show as U+FFFD):
    /// the names on disk derive from the units, as the reference's do.
    pub units: Option<Box<HeaderUnits>>,
    /// The header object's members in their stored key order, as
    /// [`super::json::parse_object`] returns them: scalars as read, arrays
    /// and objects (only ever in keys the format does not define) as empty
    /// placeholders of their kind.
    pub fields: Map<String, Value>,
}

/// See [`Header::units`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeaderUnits {
    pub id: Option<Vec<u16>>,
    pub cwd: Option<Vec<u16>>,
}

impl Header {
    /// The session directory name the id derives (FORMAT.md, Session
    /// directory), from the id's UTF-16 units.
    ///
    /// Errors: as [`super::naming::encode_id`].
    pub fn session_dir_name(&self) -> super::error::Result<String> {
        match self.units.as_ref().and_then(|u| u.id.as_deref()) {
            Some(units) => super::naming::encode_id_units(units),
            None => super::naming::encode_id(&self.id),
        }
    }

    /// The project directory name the cwd derives (`_no-cwd` without one).
    ///
    /// Errors: as [`super::naming::project_dir_name`].
    pub fn project_dir_name(&self) -> super::error::Result<String> {
        match (
            self.units.as_ref().and_then(|u| u.cwd.as_deref()),
            &self.cwd,
        ) {
            (Some(units), Some(_)) => super::naming::project_key_units(units),
            _ => super::naming::project_dir_name(self.cwd.as_deref()),
        }
    }
}

/// Why a line is not a valid header.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderError {
    /// Not JSON, not an object, or a field of the wrong shape.
    Invalid(String),
    /// A `version` other than 0: a format sessionfs does not read.
    UnsupportedVersion(String),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Invalid(why) => write!(f, "invalid header: {why}"),
            HeaderError::UnsupportedVersion(why) => {
                write!(f, "unsupported format version: {why}")
            }
        }
    }
}

fn safe_non_negative_integer(value: Option<&Value>) -> Option<u64> {
    let value = value?;
    if let Some(n) = value.as_u64() {
        return (n as f64 <= MAX_SAFE_INTEGER).then_some(n);
    }
    let f = value.as_f64()?;
    let ok = f.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&f) && !f.is_sign_negative();
    ok.then_some(f as u64)
}

/// Parses and validates one header line (`line` without its `\n`), read
/// as the reference reads a file: JSON as `JSON.parse` accepts it, bytes
/// that are not UTF-8 decoded with replacement (see [`super::json`]).
/// Writers check UTF-8 themselves before (FORMAT.md).
///
/// Errors: as [`header_from_fields`], and [`HeaderError::Invalid`] when the
/// line is not one JSON object.
pub fn parse_header(line: &[u8]) -> Result<Header, HeaderError> {
    if !may_hold_a_surrogate_escape(line) {
        return match parse_object(line, Utf8::Replace) {
            Ok(fields) => header_from_fields(fields),
            Err(e) => Err(HeaderError::Invalid(format!("header line is {e}"))),
        };
    }
    let (fields, spanned) = parse_object_spans(line, Utf8::Replace)
        .map_err(|e| HeaderError::Invalid(format!("header line is {e}")))?;
    header_from_line(fields, &spanned)
}

/// As [`header_from_fields`], with [`Header::units`] read from the line's
/// spans (for callers that scanned the line with
/// [`super::json::parse_object_spans`]).
///
/// Errors: as [`header_from_fields`].
pub fn header_from_line(
    fields: Map<String, Value>,
    spanned: &Spanned,
) -> Result<Header, HeaderError> {
    let mut header = header_from_fields(fields)?;
    header.units = units_of(&header, spanned);
    Ok(header)
}

/// The [`Header::units`] of `header`, read from its line (`spanned`): the
/// UTF-16 units of `id` and `cwd` where a replacement changed them (a
/// lone surrogate escape), `None` when neither holds one.
fn units_of(header: &Header, spanned: &Spanned) -> Option<Box<HeaderUnits>> {
    let of = |key: &str, text: Option<&str>| {
        let units = string_units(spanned.root().get(key)?.raw())?;
        let shown: Vec<u16> = text?.encode_utf16().collect();
        (units != shown).then_some(units)
    };
    let units = HeaderUnits {
        id: of("id", Some(&header.id)),
        cwd: of("cwd", header.cwd.as_deref()),
    };
    (units != HeaderUnits::default()).then(|| Box::new(units))
}

/// Whether `line` may hold a `\uD800`–`\uDFFF` escape (a surrogate).
fn may_hold_a_surrogate_escape(line: &[u8]) -> bool {
    line.windows(3)
        .any(|w| w[0] == b'\\' && w[1] == b'u' && (w[2] | 0x20) == b'd')
}

/// Validates the members of a header line's object.
///
/// Checks, in the reference's order: `version` a number and 0
/// (else [`HeaderError::UnsupportedVersion`]); `type` = "session", `id`
/// string, `createdAt` and `delegationDepth` non-negative safe integers,
/// `origin` absent or "subagent", `agentPreset` absent or a string; no
/// legacy `sandboxMode`/`approvalPolicy`. Beyond the reference, an optional
/// `cwd` or `parentSession` must be a string and `cwd` must not be empty
/// (FORMAT.md: an empty cwd is invalid).
pub fn header_from_fields(fields: Map<String, Value>) -> Result<Header, HeaderError> {
    let invalid = |why: &str| Err(HeaderError::Invalid(why.to_string()));
    if let Some(version) = fields.get("version").and_then(Value::as_f64) {
        if version != 0.0 {
            return Err(HeaderError::UnsupportedVersion(format!(
                "header version {} (only 0 is supported)",
                fields["version"]
            )));
        }
    }
    if fields.get("type").and_then(Value::as_str) != Some("session") {
        return invalid("first line is not a session header (type is not \"session\")");
    }
    if !fields.get("version").is_some_and(Value::is_number) {
        return invalid("header has no numeric version");
    }
    let Some(id) = fields.get("id").and_then(Value::as_str).map(str::to_string) else {
        return invalid("header id is not a string");
    };
    let Some(created_at_ms) = safe_non_negative_integer(fields.get("createdAt")) else {
        return invalid("header createdAt is not a non-negative safe integer");
    };
    if safe_non_negative_integer(fields.get("delegationDepth")).is_none() {
        return invalid("header delegationDepth is not a non-negative safe integer");
    }
    match fields.get("origin") {
        None => {}
        Some(Value::String(s)) if s == "subagent" => {}
        Some(_) => return invalid("header origin is not \"subagent\""),
    }
    for key in ["agentPreset", "parentSession"] {
        if fields.get(key).is_some_and(|v| !v.is_string()) {
            return invalid(&format!("header {key} is not a string"));
        }
    }
    if fields.get("seedLength").is_some_and(|v| !v.is_number()) {
        return invalid("header seedLength is not a number");
    }
    if fields.contains_key("sandboxMode") || fields.contains_key("approvalPolicy") {
        return invalid("session header uses retired policy baseline fields");
    }
    let cwd = match fields.get("cwd") {
        None => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return invalid("header cwd is not a non-empty string"),
    };
    Ok(Header {
        id,
        cwd,
        created_at_ms,
        units: None,
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_header() {
        let h = parse_header(br#"{"type":"session","version":0,"id":"a","createdAt":1,"cwd":"/x","delegationDepth":0}"#)
            .unwrap();
        assert_eq!(h.id, "a");
        assert_eq!(h.cwd.as_deref(), Some("/x"));
        assert_eq!(h.created_at_ms, 1);
    }

    #[test]
    fn headers_the_reference_reads() {
        let base =
            r#"{"type":"session","version":0,"id":"a","createdAt":1.0,"delegationDepth":0e3"#;
        let deep_array = format!(
            "{base},\"x\":{}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let deep_object = format!(
            "{base},\"x\":{}1{}}}",
            "{\"k\":".repeat(10_000),
            "}".repeat(10_000)
        );
        for line in [deep_array.as_bytes(), deep_object.as_bytes()] {
            let h = parse_header(line).unwrap();
            assert_eq!((h.id.as_str(), h.created_at_ms), ("a", 1));
        }
        let ff =
            parse_header(&[base.as_bytes(), b",\"agentPreset\":\"coder\xff\"}"].concat()).unwrap();
        assert_eq!(ff.fields["agentPreset"], "coder\u{FFFD}");
        let dup = parse_header(format!("{base},\"id\":\"b\",\"cwd\":\"/w\"}}").as_bytes()).unwrap();
        assert_eq!(dup.id, "b", "the last of duplicate keys wins");
        // createdAt -0 is refused by the reference (Object.is(-0)); version -0 is 0.
        assert!(parse_header(format!("{base},\"createdAt\":-0}}").as_bytes()).is_err());
        assert!(parse_header(format!("{base},\"version\":-0.0}}").as_bytes()).is_ok());
    }

    #[test]
    fn version_other_than_zero_is_unsupported_not_corrupt() {
        let r = parse_header(br#"{"type":"session","version":3,"id":"a"}"#);
        assert!(matches!(r, Err(HeaderError::UnsupportedVersion(_))));
    }

    #[test]
    fn invalid_headers() {
        for line in [
            &br#"{"type":"turn/start","seq":0}"#[..],
            br#"not json"#,
            br#"[1]"#,
            br#"{"type":"session","version":0,"id":"a","createdAt":-1,"delegationDepth":0}"#,
            br#"{"type":"session","version":0,"id":"a","createdAt":1,"delegationDepth":0.5}"#,
            br#"{"type":"session","version":0,"id":"a","createdAt":1,"delegationDepth":0,"origin":"x"}"#,
            br#"{"type":"session","version":0,"id":"a","createdAt":1,"delegationDepth":0,"sandboxMode":"x"}"#,
            br#"{"type":"session","version":0,"id":"a","createdAt":1,"delegationDepth":0,"cwd":""}"#,
        ] {
            assert!(
                matches!(parse_header(line), Err(HeaderError::Invalid(_))),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }
}
