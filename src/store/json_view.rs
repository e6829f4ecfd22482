//! Reading nested values of one line through the member spans that the
//! line's one scan recorded ([`super::json::parse_object_spans`]): no
//! value is parsed again except the scalars asked for, which are read as
//! `JSON.parse` reads them ([`super::json::string_literal`],
//! [`super::json::number_literal`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{number_literal, string_literal, SpanMember, Spans};

/// One line's text and the spans of its containers down to
/// [`super::json::SPAN_DEPTH`] levels.
#[derive(Debug)]
pub struct Spanned<'a> {
    text: Cow<'a, str>,
    spans: Spans,
}

impl<'a> Spanned<'a> {
    pub(crate) fn new(text: Cow<'a, str>, spans: Spans) -> Self {
        Spanned { text, spans }
    }

    /// The deepest nesting level of the line: its object is level 1, a
    /// container in one of its members level 2, and so on.
    pub fn max_depth(&self) -> usize {
        self.spans.max_depth
    }

    /// The line as the spans index it (decoded with replacement when it
    /// was not UTF-8).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The line's value (its object).
    pub fn root(&self) -> Val<'_> {
        let end = self.spans.nodes.first().map_or(0, |n| n.end);
        let start = self.spans.nodes.first().map_or(0, |n| n.start);
        Val {
            line: self,
            start,
            end,
        }
    }
}

/// One value of a [`Spanned`] line: its bytes, and when it is a recorded
/// container its members.
#[derive(Debug, Clone, Copy)]
pub struct Val<'l> {
    line: &'l Spanned<'l>,
    start: usize,
    end: usize,
}

impl<'l> Val<'l> {
    /// The value's JSON text.
    pub fn raw(&self) -> &'l str {
        &self.line.text[self.start..self.end]
    }

    /// The value's byte span `[start, end)` in [`Spanned::text`].
    pub fn span(&self) -> (usize, usize) {
        (self.start, self.end)
    }

    fn first(&self) -> Option<u8> {
        self.raw().as_bytes().first().copied()
    }

    pub fn is_object(&self) -> bool {
        self.first() == Some(b'{')
    }

    pub fn is_array(&self) -> bool {
        self.first() == Some(b'[')
    }

    pub fn is_true(&self) -> bool {
        self.raw() == "true"
    }

    /// The members of a container within the recorded depth, in order;
    /// empty for anything else.
    fn members(&self) -> &'l [SpanMember] {
        let nodes = &self.line.spans.nodes;
        match nodes.binary_search_by_key(&self.start, |n| n.start) {
            Ok(i) if self.is_object() || self.is_array() => &nodes[i].members,
            _ => &[],
        }
    }

    fn at(&self, m: &SpanMember) -> Val<'l> {
        Val {
            line: self.line,
            start: m.start,
            end: m.end,
        }
    }

    /// The text of member `m`'s key (`None` in an array).
    fn key_of(&self, m: &SpanMember) -> Option<Cow<'l, str>> {
        let (start, end) = m.key?;
        literal_text(&self.line.text[start..end])
    }

    /// The value of `key` in an object (the last of a repeated key, as
    /// `JSON.parse` keeps); `None` in anything else.
    pub fn get(&self, key: &str) -> Option<Val<'l>> {
        self.members()
            .iter()
            .rev()
            .find(|m| self.key_of(m).as_deref() == Some(key))
            .map(|m| self.at(m))
    }

    /// An object's members by key, the last of a repeated key winning
    /// (as `JSON.parse`); empty for anything else.
    pub fn entries(&self) -> BTreeMap<Cow<'l, str>, Val<'l>> {
        self.members()
            .iter()
            .filter_map(|m| Some((self.key_of(m)?, self.at(m))))
            .collect()
    }

    /// An array's items in order; empty for anything else.
    pub fn items(&self) -> Vec<Val<'l>> {
        if !self.is_array() {
            return Vec::new();
        }
        self.members().iter().map(|m| self.at(m)).collect()
    }

    /// The text of a string value; `None` for anything else.
    pub fn string(&self) -> Option<Cow<'l, str>> {
        literal_text(self.raw())
    }

    /// A number value as `JSON.parse` reads it; `None` for anything else.
    pub fn number(&self) -> Option<Value> {
        number_literal(self.raw())
    }
}

/// The text of the string literal `raw` (quotes included): borrowed when
/// it holds no escape; `None` when `raw` is not a string.
fn literal_text(raw: &str) -> Option<Cow<'_, str>> {
    if !raw.starts_with('"') {
        return None;
    }
    if !raw.contains('\\') {
        return Some(Cow::Borrowed(&raw[1..raw.len() - 1]));
    }
    string_literal(raw).map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::super::json::{parse_object_spans, Utf8};

    #[test]
    fn members_of_nested_containers_are_read_from_the_one_scan() {
        let line =
            br#"{"type":"t","data":{"a":[1,{"b":"x\u0041"}],"a2":{},"n":1.0},"data":{"k":[]} }"#;
        let (map, spanned) = parse_object_spans(line, Utf8::Require).unwrap();
        assert_eq!(map["type"], "t");
        let root = spanned.root();
        assert!(root.is_object());
        // The last `data` wins.
        let data = root.get("data").unwrap();
        assert_eq!(data.raw(), r#"{"k":[]}"#);
        assert!(data.get("k").unwrap().is_array());
        assert!(data.get("a").is_none());
        let (_, spanned) = parse_object_spans(
            br#"{"data":{"a":[1,{"b":"x\u0041"}],"n":1.0,"s":"plain"}}"#,
            Utf8::Require,
        )
        .unwrap();
        let data = spanned.root().get("data").unwrap();
        let items = data.get("a").unwrap().items();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].number(), Some(serde_json::json!(1)));
        assert_eq!(items[1].get("b").unwrap().string().unwrap(), "xA");
        assert_eq!(data.get("n").unwrap().number(), Some(serde_json::json!(1)));
        assert_eq!(data.get("s").unwrap().string().unwrap(), "plain");
        assert_eq!(data.entries().len(), 3);
        assert!(data.get("s").unwrap().number().is_none());
    }

    #[test]
    fn containers_below_the_recorded_depth_have_no_members() {
        let line = br#"{"a":{"b":{"c":{"d":{"e":{"f":1}}}}}}"#;
        let (_, spanned) = parse_object_spans(line, Utf8::Require).unwrap();
        let mut v = spanned.root();
        for key in ["a", "b", "c", "d"] {
            v = v.get(key).unwrap();
        }
        // Level 5 is recorded; its member (level 6) is not.
        let e = v.get("e").unwrap();
        assert_eq!(e.raw(), r#"{"f":1}"#);
        assert!(e.get("f").is_none());
    }

    #[test]
    fn a_line_that_is_not_utf8_is_read_with_replacement() {
        let (_, spanned) = parse_object_spans(b"{\"s\":\"a\xffb\"}", Utf8::Replace).unwrap();
        assert_eq!(
            spanned.root().get("s").unwrap().string().unwrap(),
            "a\u{FFFD}b"
        );
        assert!(parse_object_spans(b"{\"s\":\"a\xffb\"}", Utf8::Require).is_err());
    }
}
