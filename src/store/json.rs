//! One JSON line as the reference reads it: ECMAScript `JSON.parse` over
//! the line decoded as UTF-8.
//!
//! Source: FORMAT.md ("Event lines", "Header line"); the reference reads
//! every line with `JSON.parse(buffer.toString("utf8"))`, so this module
//! accepts exactly what that accepts:
//!
//! * any nesting depth (V8's `JSON.parse` has no depth limit; measured with
//!   the oracle at 10,000,000 levels). The scanner is iterative: it keeps
//!   one byte per open container it does not return (see [`KEPT_DEPTH`]),
//!   so memory is bounded by the line's length, and no recursion depth is
//!   chosen by the input;
//! * every escape `JSON.parse` accepts, lone surrogate escapes included
//!   (kept as U+FFFD in the returned strings, as `String.toWellFormed`
//!   would show them);
//! * numbers as JavaScript reads them: the nearest `f64` (`1.0` and `1e0`
//!   are 1, `9007199254740993` is 2^53, `-0` stays negative zero, an
//!   exponent past the `f64` range is ±Infinity);
//! * the last of duplicate keys wins (at the first key's position).
//!
//! serde_json is not used for this: it refuses lone surrogate escapes and
//! numbers past the `f64` range, and it recurses per nesting level (its
//! `unbounded_depth` with serde_stacker moves that recursion to heap-grown
//! stacks, and dropping a deep `Value` recurses again), so the depth a line
//! reaches would choose the recursion depth. This scanner is the JSON
//! grammar (ECMA-404) and nothing more.
//!
//! Bytes that are not valid UTF-8 are handled as the caller asks
//! ([`Utf8::Replace`] when reading a committed file, as the reference's
//! decoder does; [`Utf8::Require`] when checking a line to be written).

use serde_json::{Map, Number, Value};

/// The deepest level whose containers' contents are returned (the line's
/// object is level 1), under the top-level keys a caller asks for (see
/// [`parse_object_keeping`]). Other containers are checked but not kept:
/// they appear in the returned map as an empty array or an empty object of
/// the same kind, and cost no memory beyond one byte per open level. Level
/// 3 holds everything sessionfs reads (a packed row's `data.texts` array).
pub const KEPT_DEPTH: usize = 3;

/// What to do with bytes that are not valid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Utf8 {
    /// Refuse the line (FORMAT.md: a written line must be UTF-8).
    Require,
    /// Decode with U+FFFD replacement first, as the reference's
    /// `Buffer.toString("utf8")` does when it reads a file.
    Replace,
}

/// Why a line is not one JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// 0-based byte offset in the (decoded) line where the problem is.
    pub offset: usize,
    /// What is wrong, as a sentence fragment.
    pub reason: &'static str,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            NOT_OBJECT => write!(f, "not a JSON object"),
            NOT_UTF8 => write!(f, "not valid UTF-8 (byte {} of the line)", self.offset + 1),
            why => write!(
                f,
                "not valid JSON ({why} at byte {} of the line)",
                self.offset + 1
            ),
        }
    }
}

const NOT_OBJECT: &str = "a JSON value that is not an object";
const NOT_UTF8: &str = "not valid UTF-8";

impl std::error::Error for JsonError {}

/// Parses one line (without its `\n`) as exactly one JSON object, the way
/// `JSON.parse` does, and returns its top-level members: scalars as read,
/// arrays and objects as empty placeholders of their kind.
///
/// Errors: [`JsonError`] when the line is not valid UTF-8 (with
/// [`Utf8::Require`]), not JSON, or JSON but not an object.
pub fn parse_object(line: &[u8], utf8: Utf8) -> Result<Map<String, Value>, JsonError> {
    parse_object_keeping(line, utf8, &[])
}

/// As [`parse_object`], but the arrays and objects under the top-level
/// keys in `nested` are returned with their contents, down to
/// [`KEPT_DEPTH`] (a packed row's `data`).
///
/// Errors: as [`parse_object`].
pub fn parse_object_keeping(
    line: &[u8],
    utf8: Utf8,
    nested: &[&str],
) -> Result<Map<String, Value>, JsonError> {
    let text = decoded(line, utf8)?;
    object_of(Parser::new(text.as_bytes(), nested).parse()?)
}

/// `line` as text, as `utf8` asks (see [`Utf8`]).
fn decoded(line: &[u8], utf8: Utf8) -> Result<std::borrow::Cow<'_, str>, JsonError> {
    match (std::str::from_utf8(line), utf8) {
        (Ok(s), _) => Ok(std::borrow::Cow::Borrowed(s)),
        (Err(e), Utf8::Require) => Err(JsonError {
            offset: e.valid_up_to(),
            reason: NOT_UTF8,
        }),
        (Err(_), Utf8::Replace) => Ok(String::from_utf8_lossy(line)),
    }
}

fn object_of(value: Value) -> Result<Map<String, Value>, JsonError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(JsonError {
            offset: 0,
            reason: NOT_OBJECT,
        }),
    }
}

/// As [`parse_object`], and in the same scan the byte spans of the
/// members of every container down to [`SPAN_DEPTH`] levels, for reading
/// nested values without parsing the line again ([`super::json_view`]).
/// The spans index the returned text: the line itself, or with
/// [`Utf8::Replace`] its decoding with U+FFFD replacement when it is not
/// UTF-8.
///
/// Errors: as [`parse_object`].
pub fn parse_object_spans(
    line: &[u8],
    utf8: Utf8,
) -> Result<(Map<String, Value>, super::json_view::Spanned<'_>), JsonError> {
    let text = decoded(line, utf8)?;
    let mut parser = Parser::new(text.as_bytes(), &[]);
    parser.rec = Some(Recorder::default());
    let value = parser.parse_in_place()?;
    let mut spans = parser.rec.take().map(|r| r.spans).unwrap_or_default();
    spans.max_depth = parser.max_depth;
    let map = object_of(value)?;
    Ok((map, super::json_view::Spanned::new(text, spans)))
}

/// The deepest level whose containers' member spans
/// [`parse_object_spans`] returns (the line's object is level 1): level 5
/// holds a tool result's block (`data.message.content[0]`), the deepest
/// container the event checks look into.
pub const SPAN_DEPTH: usize = 5;

/// The member spans of one line's containers (see [`parse_object_spans`]),
/// in the order the containers open, so by their start.
#[derive(Debug, Default)]
pub struct Spans {
    pub(crate) nodes: Vec<SpanNode>,
    /// The deepest nesting level of the line (its object is level 1).
    pub(crate) max_depth: usize,
}

/// One container: where it starts and ends (`{` or `[` to past its
/// closing byte) and its members in order.
#[derive(Debug)]
pub(crate) struct SpanNode {
    pub start: usize,
    pub end: usize,
    pub members: Vec<SpanMember>,
}

/// One member: its key's string literal (quotes included; `None` in an
/// array) and its value, as byte spans.
#[derive(Debug)]
pub(crate) struct SpanMember {
    pub key: Option<ByteSpan>,
    pub start: usize,
    pub end: usize,
}

/// Bytes `start..end` of the line.
type ByteSpan = (usize, usize);

/// The state of span recording during a scan.
#[derive(Default)]
struct Recorder {
    spans: Spans,
    /// Every open container: its start, its node when recorded, and the
    /// key (its literal's span) whose value comes next.
    open: Vec<(usize, Option<usize>, Option<ByteSpan>)>,
    /// The start of the container closed last.
    closed_start: usize,
}

impl Recorder {
    fn open(&mut self, start: usize) {
        let node = (self.open.len() < SPAN_DEPTH).then(|| {
            self.spans.nodes.push(SpanNode {
                start,
                end: start,
                members: Vec::new(),
            });
            self.spans.nodes.len() - 1
        });
        self.open.push((start, node, None));
    }

    fn close(&mut self, end: usize) {
        if let Some((start, node, _)) = self.open.pop() {
            if let Some(node) = node {
                self.spans.nodes[node].end = end;
            }
            self.closed_start = start;
        }
    }

    /// The key `start..end` (its string literal) of the next member of the
    /// innermost open container.
    fn key(&mut self, start: usize, end: usize) {
        if let Some((_, Some(_), key)) = self.open.last_mut() {
            *key = Some((start, end));
        }
    }

    /// A complete value `start..end` in the innermost open container.
    fn member(&mut self, start: usize, end: usize) {
        if let Some((_, Some(node), key)) = self.open.last_mut() {
            let key = key.take();
            self.spans.nodes[*node]
                .members
                .push(SpanMember { key, start, end });
        }
    }
}

/// A container open at a kept level.
enum Open {
    Array(Vec<Value>),
    /// Members so far, and the key whose value comes next.
    Object(Map<String, Value>, Option<String>),
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    /// Top-level keys whose containers' contents are kept.
    nested: &'a [&'a str],
    /// Containers at levels 1..=KEPT_DEPTH.
    kept: Vec<Open>,
    /// Containers below the kept levels: `true` for an object.
    deep: Vec<bool>,
    /// Span recording, when asked ([`parse_object_spans`]).
    rec: Option<Recorder>,
    /// The deepest level any container reached (the line's object is 1).
    max_depth: usize,
}

fn err<T>(offset: usize, reason: &'static str) -> Result<T, JsonError> {
    Err(JsonError { offset, reason })
}

impl<'a> Parser<'a> {
    fn new(b: &'a [u8], nested: &'a [&'a str]) -> Self {
        Parser {
            b,
            i: 0,
            nested,
            kept: Vec::new(),
            deep: Vec::new(),
            rec: None,
            max_depth: 0,
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn depth(&self) -> usize {
        self.kept.len() + self.deep.len()
    }

    /// Whether a container opening here is kept: within [`KEPT_DEPTH`],
    /// inside kept containers, and (as a member of the line's object)
    /// under a key in `nested`.
    fn keep_next(&self) -> bool {
        if !self.deep.is_empty() || self.kept.len() >= KEPT_DEPTH {
            return false;
        }
        match (self.kept.len(), self.kept.last()) {
            (1, Some(Open::Object(_, Some(key)))) => self.nested.contains(&key.as_str()),
            (1, _) => false,
            _ => true,
        }
    }

    /// The whole text: one value, then only whitespace.
    fn parse(mut self) -> Result<Value, JsonError> {
        self.parse_in_place()
    }

    /// As [`Parser::parse`], keeping the parser (and its recorded spans).
    fn parse_in_place(&mut self) -> Result<Value, JsonError> {
        // The state machine: after a value is complete (`done`), it is
        // placed into the innermost open container or becomes the result.
        let mut result = None;
        loop {
            self.ws();
            // Expecting a value here.
            let start = self.i;
            let value = match self.b.get(self.i) {
                None => return err(self.i, "the JSON text ends early"),
                Some(b'{') | Some(b'[') => {
                    let object = self.b[self.i] == b'{';
                    if let Some(rec) = self.rec.as_mut() {
                        rec.open(self.i);
                    }
                    self.i += 1;
                    if self.keep_next() {
                        self.kept.push(if object {
                            Open::Object(Map::new(), None)
                        } else {
                            Open::Array(Vec::new())
                        });
                    } else {
                        self.deep.push(object);
                    }
                    self.max_depth = self.max_depth.max(self.depth());
                    self.ws();
                    let close = if object { b'}' } else { b']' };
                    if self.b.get(self.i) == Some(&close) {
                        self.i += 1;
                        Some(self.close_container())
                    } else if object {
                        self.key()?;
                        None
                    } else {
                        None
                    }
                }
                Some(b'"') => {
                    let keep = self.deep.is_empty();
                    Some(self.string(keep)?.map_or(Value::Null, Value::String))
                }
                Some(b'-' | b'0'..=b'9') => Some(self.number()?),
                Some(b't') => Some(self.literal(b"true", Value::Bool(true))?),
                Some(b'f') => Some(self.literal(b"false", Value::Bool(false))?),
                Some(b'n') => Some(self.literal(b"null", Value::Null)?),
                Some(_) => return err(start, "unexpected character where a value belongs"),
            };
            let Some(mut value) = value else {
                continue; // a container was opened; its first value follows
            };
            let mut value_start = start;
            // Place the value, then close every container that ends here.
            loop {
                if self.depth() == 0 {
                    result = Some(value);
                    break;
                }
                if let Some(rec) = self.rec.as_mut() {
                    rec.member(value_start, self.i);
                }
                self.place(value);
                self.ws();
                let object = self.innermost_is_object();
                match self.b.get(self.i) {
                    Some(b',') => {
                        self.i += 1;
                        if object {
                            self.ws();
                            self.key()?;
                        }
                        break;
                    }
                    Some(b'}') if object => {
                        self.i += 1;
                        value = self.close_container();
                        value_start = self.closed_start();
                    }
                    Some(b']') if !object => {
                        self.i += 1;
                        value = self.close_container();
                        value_start = self.closed_start();
                    }
                    None => return err(self.i, "the JSON text ends early"),
                    Some(_) => {
                        return err(
                            self.i,
                            if object {
                                "expected ',' or '}'"
                            } else {
                                "expected ',' or ']'"
                            },
                        )
                    }
                }
            }
            if let Some(value) = result.take() {
                self.ws();
                if self.i != self.b.len() {
                    return err(self.i, "text after the JSON value");
                }
                return Ok(value);
            }
        }
    }

    /// The start of the container closed last (0 when not recording).
    fn closed_start(&self) -> usize {
        self.rec.as_ref().map_or(0, |r| r.closed_start)
    }

    fn innermost_is_object(&self) -> bool {
        match self.deep.last() {
            Some(&object) => object,
            None => matches!(self.kept.last(), Some(Open::Object(..))),
        }
    }

    /// Pops the innermost container and returns it as a value (an empty
    /// placeholder of its kind below the kept levels).
    fn close_container(&mut self) -> Value {
        if let Some(rec) = self.rec.as_mut() {
            rec.close(self.i);
        }
        if let Some(object) = self.deep.pop() {
            return if object {
                Value::Object(Map::new())
            } else {
                Value::Array(Vec::new())
            };
        }
        match self.kept.pop() {
            Some(Open::Array(items)) => Value::Array(items),
            Some(Open::Object(map, _)) => Value::Object(map),
            None => Value::Null, // not reached: callers close only open containers
        }
    }

    /// Adds a complete value to the innermost container.
    fn place(&mut self, value: Value) {
        if !self.deep.is_empty() {
            return;
        }
        match self.kept.last_mut() {
            Some(Open::Array(items)) => items.push(value),
            Some(Open::Object(map, key)) => {
                if let Some(key) = key.take() {
                    // IndexMap insert: the last value wins, at the first key's place.
                    map.insert(key, value);
                }
            }
            None => {}
        }
    }

    /// A member's key and its `:`; remembers the key at a kept level.
    fn key(&mut self) -> Result<(), JsonError> {
        if self.b.get(self.i) != Some(&b'"') {
            return err(self.i, "expected a string key");
        }
        let keep = self.deep.is_empty();
        let open = self.i;
        let key = self.string(keep)?;
        if let Some(rec) = self.rec.as_mut() {
            rec.key(open, self.i);
        }
        if let (Some(Open::Object(_, slot)), true) = (self.kept.last_mut(), keep) {
            *slot = key;
        }
        self.ws();
        if self.b.get(self.i) != Some(&b':') {
            return err(self.i, "expected ':' after a key");
        }
        self.i += 1;
        Ok(())
    }

    fn hex4(&self, at: usize) -> Result<u16, JsonError> {
        let digits = self.b.get(at..at + 4).ok_or(JsonError {
            offset: at,
            reason: "the JSON text ends early",
        })?;
        hex_unit(digits).ok_or(JsonError {
            offset: at,
            reason: "bad \\u escape",
        })
    }

    /// A string starting at its opening quote. Returns its text when
    /// `keep` (lone surrogates as U+FFFD).
    fn string(&mut self, keep: bool) -> Result<Option<String>, JsonError> {
        let open = self.i;
        self.i += 1;
        let mut out = keep.then(String::new);
        let mut run = self.i; // start of the unescaped run being copied
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return err(open, "unterminated string");
            };
            match c {
                b'"' => {
                    if let Some(out) = out.as_mut() {
                        out.push_str(self.text(run, self.i));
                    }
                    self.i += 1;
                    return Ok(out);
                }
                0x00..=0x1f => return err(self.i, "control character inside a string"),
                b'\\' => {
                    if let Some(out) = out.as_mut() {
                        out.push_str(self.text(run, self.i));
                    }
                    let esc = self.i;
                    let Some(&kind) = self.b.get(self.i + 1) else {
                        return err(esc, "unterminated string");
                    };
                    self.i += 2;
                    let ch = match kind {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let unit = self.hex4(self.i)?;
                            self.i += 4;
                            self.code_unit(unit)?
                        }
                        _ => return err(esc, "bad escape"),
                    };
                    if let Some(out) = out.as_mut() {
                        out.push(ch);
                    }
                    run = self.i;
                }
                _ => self.i += 1,
            }
        }
    }

    /// The character of a `\uXXXX` escape whose unit is `unit` (already
    /// consumed): a high surrogate followed by a `\u` low surrogate joins
    /// it; any other surrogate is lone and reads as U+FFFD.
    fn code_unit(&mut self, unit: u16) -> Result<char, JsonError> {
        if (0xD800..0xDC00).contains(&unit) && self.b.get(self.i..self.i + 2) == Some(b"\\u") {
            if let Ok(low) = self.hex4(self.i + 2) {
                if (0xDC00..0xE000).contains(&low) {
                    self.i += 6;
                    let c =
                        0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                    return Ok(char::from_u32(c).unwrap_or('\u{FFFD}'));
                }
            }
        }
        Ok(char::from_u32(u32::from(unit)).unwrap_or('\u{FFFD}'))
    }

    fn text(&self, from: usize, to: usize) -> &str {
        // The input is UTF-8 and `from`/`to` sit at ASCII bytes.
        std::str::from_utf8(&self.b[from..to]).unwrap_or("\u{FFFD}")
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        self.i - start
    }

    /// A number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, read as
    /// the nearest `f64`.
    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return err(self.i, "bad number"),
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return err(self.i, "bad number (no digit after '.')");
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return err(self.i, "bad number (no digit in the exponent)");
            }
        }
        let f: f64 = self.text(start, self.i).parse().unwrap_or(f64::NAN);
        Ok(js_number(f))
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Result<Value, JsonError> {
        if self.b.get(self.i..self.i + word.len()) != Some(word) {
            return err(self.i, "unexpected character where a value belongs");
        }
        self.i += word.len();
        Ok(value)
    }
}

/// The code unit of the four hex digits `digits`, `None` when they are not.
fn hex_unit(digits: &[u8]) -> Option<u16> {
    digits.iter().try_fold(0u16, |unit, &d| {
        let v = (d as char).to_digit(16)?;
        Some(unit << 4 | v as u16)
    })
}

/// `line` with every lone surrogate escape (a `\uD800`-`\uDFFF` escape not
/// part of a high-low pair) replaced by `\uFFFD`, which has the same
/// length: serde_json, which refuses lone surrogates, then reads the line
/// as `JSON.parse` shows it (see [`Parser::code_unit`]). `None` when the
/// line holds no lone surrogate escape. Bytes outside escapes are not
/// looked at: a line that is not JSON stays not JSON.
pub fn lone_surrogates_replaced(line: &[u8]) -> Option<Vec<u8>> {
    let unit_at = |at: usize| {
        (line.get(at..at + 2) == Some(b"\\u"))
            .then(|| line.get(at + 2..at + 6).and_then(hex_unit))
            .flatten()
    };
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = unit_at(i) else {
            i += 2; // another escape: the escaped byte is not a backslash
            continue;
        };
        let paired = (0xD800..0xDC00).contains(&unit)
            && unit_at(i + 6).is_some_and(|low| (0xDC00..0xE000).contains(&low));
        if paired {
            i += 12;
        } else {
            if (0xD800..0xE000).contains(&unit) {
                out.get_or_insert_with(|| line.to_vec())[i..i + 6].copy_from_slice(b"\\uFFFD");
            }
            i += 6;
        }
    }
    out
}

/// The text of the JSON string literal `raw` (its quotes included), as
/// `JSON.parse` reads it (lone surrogate escapes as U+FFFD); `None` when
/// `raw` is not exactly one string literal.
pub fn string_literal(raw: &str) -> Option<String> {
    let mut parser = Parser::new(raw.as_bytes(), &[]);
    if raw.as_bytes().first() != Some(&b'"') {
        return None;
    }
    let text = parser.string(true).ok()??;
    (parser.i == raw.len()).then_some(text)
}

/// The UTF-16 code units of the JSON string literal `raw` (its quotes
/// included), as JavaScript holds the string: a lone surrogate escape
/// stays the unit it names (where [`string_literal`] shows U+FFFD).
/// `None` when `raw` is not one string literal.
pub fn string_units(raw: &str) -> Option<Vec<u16>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    let mut units = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u16; 2];
            units.extend_from_slice(c.encode_utf16(&mut buf));
            continue;
        }
        let unit = match chars.next()? {
            '"' => 0x22,
            '\\' => 0x5C,
            '/' => 0x2F,
            'b' => 0x08,
            'f' => 0x0C,
            'n' => 0x0A,
            'r' => 0x0D,
            't' => 0x09,
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                if hex.len() != 4 {
                    return None;
                }
                u16::from_str_radix(&hex, 16).ok()?
            }
            _ => return None,
        };
        units.push(unit);
    }
    Some(units)
}

/// The number of the JSON number literal `raw`, as `JSON.parse` reads it
/// (see [`js_number`]); `None` when `raw` is not exactly one number.
pub fn number_literal(raw: &str) -> Option<Value> {
    let mut parser = Parser::new(raw.as_bytes(), &[]);
    if !matches!(raw.as_bytes().first(), Some(b'-' | b'0'..=b'9')) {
        return None;
    }
    let n = parser.number().ok()?;
    (parser.i == raw.len()).then_some(n)
}

/// A JavaScript number as a JSON value: integers (not negative zero)
/// within the `i64` range as integers, other finite numbers as floats,
/// ±Infinity as ±`f64::MAX` (still a number, never a safe integer).
fn js_number(f: f64) -> Value {
    let f = if f.is_infinite() {
        f.signum() * f64::MAX
    } else {
        f
    };
    let integral = f.fract() == 0.0 && !(f == 0.0 && f.is_sign_negative());
    if integral && f.abs() < 9.2e18 {
        return Value::Number(Number::from(f as i64));
    }
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogate_escapes_are_replaced_in_place() {
        let fixed =
            |s: &str| lone_surrogates_replaced(s.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(
            fixed(r#"{"a":"x\ud800y"}"#).as_deref(),
            Some(r#"{"a":"x\uFFFDy"}"#)
        );
        assert_eq!(
            fixed(r#"{"a":"\uDC00\ud83d"}"#).as_deref(),
            Some(r#"{"a":"\uFFFD\uFFFD"}"#)
        );
        // A pair, an escaped backslash before `u`, other escapes: kept.
        assert_eq!(fixed(r#"{"a":"\ud83d\ude00 \\ud800 \n \u00e9"}"#), None);
        // A high surrogate before a non-surrogate escape is lone.
        assert_eq!(
            fixed(r#"["\ud83d\u0041"]"#).as_deref(),
            Some(r#"["\uFFFD\u0041"]"#)
        );
        // What serde_json reads then is what this module's scanner reads.
        let line = br#"{"type":"user/message","data":{"text":"hi \ud800 there"}}"#;
        assert!(serde_json::from_slice::<Value>(line).is_err());
        let v: Value = serde_json::from_slice(&lone_surrogates_replaced(line).unwrap()).unwrap();
        let ours = parse_object_keeping(line, Utf8::Require, &["data"]).unwrap();
        assert_eq!(v, Value::Object(ours));
    }

    fn ok(line: &str) -> Map<String, Value> {
        parse_object(line.as_bytes(), Utf8::Require).unwrap_or_else(|e| panic!("{line}: {e}"))
    }

    fn bad(line: &[u8]) {
        assert!(
            parse_object(line, Utf8::Require).is_err(),
            "{}",
            String::from_utf8_lossy(line)
        );
    }

    #[test]
    fn accepts_what_json_parse_accepts() {
        let line = r#" {"a":1,"b":[1,{"c":[true,false,null]}],"a":"x"} "#;
        let m = ok(line);
        assert_eq!(m["a"], "x");
        assert_eq!(m["b"], Value::Array(vec![]));
        let m = parse_object_keeping(line.as_bytes(), Utf8::Require, &["b"]).unwrap();
        assert_eq!(m["b"], serde_json::json!([1, {"c": []}]));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(ok(r#"{"s":1.0}"#)["s"].as_u64(), Some(1));
        assert_eq!(ok(r#"{"s":1e0}"#)["s"].as_u64(), Some(1));
        assert_eq!(ok(r#"{"s":10E-1}"#)["s"].as_u64(), Some(1));
        assert_eq!(
            ok(r#"{"s":9007199254740993}"#)["s"].as_u64(),
            Some(9_007_199_254_740_992)
        );
        assert!(ok(r#"{"s":-0}"#)["s"].as_f64().unwrap().is_sign_negative());
        assert_eq!(ok(r#"{"s":1e400}"#)["s"].as_f64(), Some(f64::MAX));
        assert_eq!(
            ok(r#"{"s":"\ud800\ud83d\ude80\u00e9\/\b"}"#)["s"],
            "\u{FFFD}🚀é/\u{8}"
        );
        assert_eq!(ok("{\"s\":\"\u{7f}\u{2028}\"}")["s"], "\u{7f}\u{2028}");
        assert_eq!(ok("{}\r\t ").len(), 0);
    }

    #[test]
    fn deep_nesting_without_recursion() {
        let depth = 1_000_000;
        let line = format!("{{\"v\":{}\"x\"{}}}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(ok(&line)["v"], Value::Array(vec![]));
        let m = parse_object_keeping(line.as_bytes(), Utf8::Require, &["v"]).unwrap();
        assert_eq!(
            m["v"],
            Value::Array(vec![Value::Array(vec![Value::Array(vec![])])])
        );
        let line = format!(
            "{{\"v\":{}1{}}}",
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        );
        ok(&line);
        let unclosed = format!("{{\"v\":{}", "[".repeat(depth));
        bad(unclosed.as_bytes());
    }

    #[test]
    fn refuses_near_json() {
        for line in [
            &b""[..],
            b"[]",
            b"1",
            b"\"s\"",
            b"null",
            b"{",
            b"{}}",
            b"{} {}",
            b"{,}",
            b"{\"a\"}",
            b"{\"a\":}",
            b"{\"a\":1,}",
            b"{\"a\":[1,]}",
            b"{a:1}",
            b"{'a':1}",
            b"{\"a\":01}",
            b"{\"a\":1.}",
            b"{\"a\":.5}",
            b"{\"a\":+1}",
            b"{\"a\":1e}",
            b"{\"a\":-}",
            b"{\"a\":NaN}",
            b"{\"a\":Infinity}",
            b"{\"a\":tru}",
            b"{\"a\":\"\\x\"}",
            b"{\"a\":\"\\u12G4\"}",
            b"{\"a\":\"\\u12\"}",
            b"{\"a\":\"\t\"}",
            b"{\"a\":\"unterminated}",
            b"\xef\xbb\xbf{}",
            b"{\"a\":\"\xff\"}",
            b"{\"a\":1}\x0c",
        ] {
            bad(line);
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_when_reading() {
        let m = parse_object(b"{\"p\":\"a\xffb\"}", Utf8::Replace).unwrap();
        assert_eq!(m["p"], "a\u{FFFD}b");
        assert!(parse_object(b"{\"p\":1}\xff", Utf8::Replace).is_err());
    }
}
