//! The reference's load-time checks of one event that need no other event
//! (`@deepseek-ai/dsh-session` 0.1.0-rc.8: `assertSessionEventEnvelope`,
//! `assertSupportedRequestHeader`, `assertCurrentLlmShape`,
//! `assertMessageEventShape`, and the event-local parts of `surfaceOpOf`
//! and `assertProvenance`). The reference refuses to load a whole session
//! when one of its events fails them, so a line failing them is refused
//! when it is written, and `sessionfs doctor` reports one already stored.
//! Not checked here: what depends on earlier events (a replacement's range
//! and shadowed nodes), event types the reference does not know (accepted;
//! the doctor reports them), and, not yet, the rest of the envelope
//! (`time` a safe integer, `data` present, no keys beyond `type`, `seq`,
//! `time`, `data`, `surfaceOp`, `sourceEventSeqs` and `ignorable`).
//! Packed chunk rows are not events: the reference expands them itself.
//!
//! The line is read lazily: each object the checks look into is split
//! into its members, whose values stay unparsed slices of the line
//! (`RawValue`), so a long message costs a scan, not a tree of values.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;

use super::event_legacy::{upgrade, Upgrade};
use super::lines::{is_row_type, safe_non_negative};

/// Whether [`refusal`] can refuse an event of type `kind` whose
/// top-level members `member` tells of (`member("surfaceOp")`: present;
/// `member("ignorable")`: present and not `true`): the types whose `data`
/// the checks look into or whose legacy shapes the reference upgrades,
/// and any event carrying what only some may carry. A caller that has the
/// top-level members already (the doctor) skips the rest cheaply.
pub fn may_refuse(kind: &str, member: impl Fn(&str) -> bool) -> bool {
    SURFACE_TYPES.contains(&kind)
        || LEGACY_TYPES.contains(&kind)
        || kind == "request/header"
        || ["surfaceOp", "sourceEventSeqs", "ignorable"]
            .into_iter()
            .any(member)
}

/// Event types the reference upgrades from legacy shapes, or refuses as
/// legacy, before its checks ([`super::event_legacy`]).
const LEGACY_TYPES: &[&str] = &[
    "request/header-delta",
    "mode/set",
    "steering/message",
    "turn/start",
    "turn/end",
];

/// The event types whose message joins the model-visible surface.
const SURFACE_TYPES: &[&str] = &["user/message", "assistant/message", "tool/result"];

/// An object's members (the last of a repeated key, as `JSON.parse`).
type Obj<'a> = BTreeMap<Cow<'a, str>, &'a RawValue>;

/// The members of `raw` when it is an object; an array counts as an
/// object without members (as `typeof` says); `None` for anything else.
fn object(raw: &RawValue) -> Option<Obj<'_>> {
    match raw.get().as_bytes().first() {
        Some(b'{') => serde_json::from_str(raw.get()).ok(),
        Some(b'[') => Some(Obj::new()),
        _ => None,
    }
}

/// Only a JSON object (not an array).
fn plain_object(raw: &RawValue) -> Option<Obj<'_>> {
    raw.get().starts_with('{').then(|| object(raw)).flatten()
}

fn string<'a>(raw: Option<&&'a RawValue>) -> Option<Cow<'a, str>> {
    serde_json::from_str::<Cow<'a, str>>(raw?.get()).ok()
}

fn non_empty_str(raw: Option<&&RawValue>) -> bool {
    string(raw).is_some_and(|s| !s.is_empty())
}

fn is_array(raw: Option<&&RawValue>) -> bool {
    raw.is_some_and(|r| r.get().starts_with('['))
}

fn is_true(raw: Option<&&RawValue>) -> bool {
    raw.is_some_and(|r| r.get() == "true")
}

fn non_negative(raw: Option<&&RawValue>) -> Option<u64> {
    let v: Value = serde_json::from_str(raw?.get()).ok()?;
    safe_non_negative(Some(&v))
}

fn has_provider_model(raw: Option<&&RawValue>) -> bool {
    raw.and_then(|r| object(r))
        .is_some_and(|m| non_empty_str(m.get("provider")) && non_empty_str(m.get("model")))
}

/// Why the reference would refuse to load the event on `line` (one event
/// line, not a header), in its own words; `None` when it passes, for a
/// packed row, and for a line serde_json cannot read (not one JSON object,
/// nested beyond its recursion limit, a lone surrogate escape: judged by
/// the line checks that read as `JSON.parse` does).
pub fn refusal(line: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(line).ok()?;
    let event: Obj = serde_json::from_str(text).ok()?;
    let kind = string(event.get("type"))?;
    let kind = kind.as_ref();
    if is_row_type(kind) {
        return None;
    }
    // `data`'s members, split once for every check below.
    let data = event.get("data").and_then(|d| object(d));
    // Legacy shapes are upgraded by the reference before its checks.
    if may_be_legacy(kind, data.as_ref()) {
        let whole: serde_json::Map<String, Value> = serde_json::from_str(text).ok()?;
        match upgrade(kind, &whole, "") {
            Err(why) => return Some(why),
            Ok(Upgrade::Unknown) => return None,
            Ok(Upgrade::To(up)) => {
                let up = up.to_string();
                let event: Obj = serde_json::from_str(&up).ok()?;
                let data = event.get("data").and_then(|d| object(d));
                return checks(&event, data.as_ref());
            }
            Ok(Upgrade::Same) => {}
        }
    }
    checks(&event, data.as_ref())
}

/// Whether the reference may upgrade (or refuse to upgrade) `event` of
/// type `kind` before its checks: the shapes of [`super::event_legacy`],
/// told by their keys alone.
fn may_be_legacy(kind: &str, data: Option<&Obj>) -> bool {
    // A record only (an array has no members here either).
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    match kind {
        "mode/set" | "steering/message" | "turn/end" => true,
        "turn/start" => has("trigger"),
        "user/message" => {
            !has("id") && !has("role") && !has("message") && has("content") && has("source")
        }
        "assistant/message" => !has("message") && has("content") && has("provenance"),
        "tool/result" => !has("message") && has("callId") && has("content") && has("isError"),
        _ => false,
    }
}

/// The checks of one event as the reference makes them once it is
/// upgraded.
fn checks(event: &Obj, data_members: Option<&Obj>) -> Option<String> {
    let kind = string(event.get("type"))?;
    let kind = kind.as_ref();
    if kind == "request/header-delta" {
        return Some("it uses the unsupported legacy request/header-delta format".into());
    }
    let seq = non_negative(event.get("seq"));
    let ignorable = event.get("ignorable");
    if seq.is_none() || (ignorable.is_some() && !is_true(ignorable)) {
        return Some(
            "it has an invalid event envelope (seq a non-negative safe integer, ignorable \
             absent or true)"
                .into(),
        );
    }
    let data = event.get("data").copied();
    if kind == "request/header" {
        if let Some(why) = request_header(data) {
            return Some(why);
        }
    }
    message_shape(kind, data_members)
        .or_else(|| surface(kind, event, seq.unwrap_or_default()))
        .map(|why| format!("{kind} {why}"))
}

fn request_header(data: Option<&RawValue>) -> Option<String> {
    let data = data.and_then(plain_object);
    if data
        .as_ref()
        .and_then(|d| string(d.get("reason")))
        .as_deref()
        == Some("fallback")
    {
        return Some("request/header uses the unsupported legacy reason \"fallback\"".into());
    }
    let header = data
        .as_ref()
        .and_then(|d| d.get("header").and_then(|h| plain_object(h)));
    let config = header.as_ref().and_then(|h| h.get("config").copied());
    if !has_provider_model(config.as_ref()) {
        return Some("request/header lacks provider/model".into());
    }
    let config = object(config?)?;
    if let Some(effort) = config.get("reasoningEffort") {
        if !non_empty_str(Some(effort)) {
            return Some("request/header has an invalid reasoningEffort".into());
        }
    }
    let defaults = header
        .as_ref()
        .and_then(|h| h.get("adapterDefaults").copied())?;
    let invalid = || Some("request/header has invalid adapterDefaults".to_string());
    let Some(defaults) = plain_object(defaults) else {
        return invalid();
    };
    let marked = |key: &str| is_true(defaults.get(key));
    if defaults
        .iter()
        .any(|(k, v)| !["reasoningEffort", "maxTokens"].contains(&k.as_ref()) || !is_true(Some(v)))
        || (marked("reasoningEffort") && !config.contains_key("reasoningEffort"))
        || (marked("maxTokens") && !config.contains_key("maxTokens"))
    {
        return invalid();
    }
    None
}

/// `data`: the members of the event's `data` (see [`object`]).
fn message_shape(kind: &str, data: Option<&Obj>) -> Option<String> {
    if !SURFACE_TYPES.contains(&kind) {
        return None;
    }
    let lacks = || Some("lacks an identified message".to_string());
    let wrapped;
    let message = if kind == "user/message" {
        data
    } else {
        wrapped = data.and_then(|d| d.get("message")).and_then(|m| object(m));
        wrapped.as_ref()
    };
    let Some(message) = message else {
        return lacks();
    };
    if !non_empty_str(message.get("id")) {
        return lacks();
    }
    let role = if kind == "assistant/message" {
        "assistant"
    } else {
        "user"
    };
    if string(message.get("role")).as_deref() != Some(role) {
        return Some(format!("message must have role \"{role}\""));
    }
    let source_raw = message.get("source");
    let Some(source) = source_raw.and_then(|s| object(s)) else {
        return Some("message has invalid source".into());
    };
    if !non_empty_str(source.get("kind")) {
        return Some("message has invalid source".into());
    }
    if !is_array(message.get("content")) {
        return Some("message has invalid content".into());
    }
    let source_kind = string(source.get("kind"));
    if kind == "assistant/message" {
        if source_kind.as_deref() != Some("model") || !has_provider_model(source_raw) {
            return Some("message must have model source".into());
        }
        return None;
    }
    if kind != "tool/result" {
        return None;
    }
    let call = string(source.get("callId"));
    if source_kind.as_deref() != Some("tool") || call.as_deref().is_none_or(str::is_empty) {
        return Some("message must have tool source".into());
    }
    let content: Vec<&RawValue> = message
        .get("content")
        .and_then(|c| serde_json::from_str(c.get()).ok())
        .unwrap_or_default();
    let block = content.first().and_then(|b| object(b));
    let one_block = content.len() == 1
        && block.as_ref().is_some_and(|b| {
            string(b.get("type")).as_deref() == Some("tool-result") && is_array(b.get("content"))
        });
    if !one_block {
        return Some("message must contain one tool-result block".into());
    }
    if block.as_ref().and_then(|b| string(b.get("toolCallId"))) != call {
        return Some("message has mismatched tool call ids".into());
    }
    None
}

fn surface(kind: &str, event: &Obj, seq: u64) -> Option<String> {
    if !SURFACE_TYPES.contains(&kind) {
        if event.contains_key("surfaceOp") {
            return Some("is not surface-eligible and cannot carry surfaceOp".into());
        }
        if event.contains_key("sourceEventSeqs") {
            return Some("is not surface-eligible and cannot carry sourceEventSeqs".into());
        }
        return None;
    }
    let Some(op) = event.get("surfaceOp") else {
        return Some("is surface-eligible and requires a surfaceOp marker".into());
    };
    if string(Some(op)).as_deref() != Some("append") {
        let Some(op) = plain_object(op) else {
            return Some("carries an invalid surfaceOp".into());
        };
        let replace = op.len() == 3
            && string(op.get("op")).as_deref() == Some("replace")
            && non_negative(op.get("start")).is_some()
            && non_negative(op.get("end")).is_some();
        if !replace {
            return Some("carries an invalid replace surfaceOp".into());
        }
    }
    let sources = event.get("sourceEventSeqs")?;
    let Ok(sources) = serde_json::from_str::<Vec<&RawValue>>(sources.get()) else {
        return Some("sourceEventSeqs must be an array when present".into());
    };
    if sources.is_empty() && kind != "assistant/message" {
        return Some("sourceEventSeqs must not be empty except on assistant/message".into());
    }
    let mut seen = std::collections::HashSet::new();
    for s in &sources {
        let Some(n) = non_negative(Some(s)) else {
            return Some("sourceEventSeqs must densely contain non-negative safe integers".into());
        };
        if n >= seq {
            return Some(format!(
                "sourceEventSeqs must reference earlier events: {n} >= seq {seq}"
            ));
        }
        if !seen.insert(n) {
            return Some("sourceEventSeqs must not contain duplicates".into());
        }
    }
    None
}
