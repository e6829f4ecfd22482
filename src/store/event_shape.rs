//! The reference's load-time checks of one event that need no other event
//! (`@deepseek-ai/dsh-session` 0.1.0-rc.8: `assertSessionEventEnvelope`,
//! `assertSupportedRequestHeader`, `assertCurrentLlmShape`,
//! `assertMessageEventShape`, and the event-local parts of `surfaceOpOf`
//! and `assertProvenance`). The reference refuses to load a whole session
//! when one of its events fails them, so a line failing them is refused
//! when it is written, and `sessionfs doctor` reports one already stored.
//! Not checked here: what depends on earlier events (a replacement's range
//! and shadowed nodes) and event types the reference does not know
//! (accepted; the doctor reports them).
//! Packed chunk rows are not events: the reference expands them itself.
//!
//! The line is read from the one scan that checked its JSON
//! ([`super::json::parse_object_spans`]): the checks look up members by
//! the recorded spans and read only the scalars they need, so a long
//! message costs that scan and nothing more.

use serde_json::Value;

use super::event_legacy::{legacy_shape, upgrade, Upgrade};
use super::json::{parse_object_spans, Utf8};
use super::json_view::{Spanned, Val};
use super::lines::{is_row_type, safe_integer, safe_non_negative};

/// The event types whose message joins the model-visible surface.
const SURFACE_TYPES: &[&str] = &["user/message", "assistant/message", "tool/result"];

/// A value the checks read members of: an object, or an array (an
/// object without members, as `typeof` says); `None` for anything else.
fn object<'l>(v: Option<Val<'l>>) -> Option<Val<'l>> {
    v.filter(|v| v.is_object() || v.is_array())
}

/// Only a JSON object (not an array).
fn plain_object<'l>(v: Option<Val<'l>>) -> Option<Val<'l>> {
    v.filter(Val::is_object)
}

fn string<'l>(v: Option<Val<'l>>) -> Option<std::borrow::Cow<'l, str>> {
    v?.string()
}

fn non_empty_str(v: Option<Val>) -> bool {
    string(v).is_some_and(|s| !s.is_empty())
}

fn is_array(v: Option<Val>) -> bool {
    v.is_some_and(|v| v.is_array())
}

fn is_true(v: Option<Val>) -> bool {
    v.is_some_and(|v| v.is_true())
}

fn non_negative(v: Option<Val>) -> Option<u64> {
    safe_non_negative(Some(&v?.number()?))
}

fn has_provider_model(v: Option<Val>) -> bool {
    object(v).is_some_and(|m| non_empty_str(m.get("provider")) && non_empty_str(m.get("model")))
}

/// Why the reference would refuse to load the event `line` (one event
/// line, not a header, as [`parse_object_spans`] read it), in its own
/// words; `None` when it passes, and for a packed row.
pub fn refusal(line: &Spanned) -> Option<String> {
    let event = line.root();
    let kind = string(event.get("type"))?;
    let kind = kind.as_ref();
    if is_row_type(kind) {
        return None;
    }
    let data = object(event.get("data"));
    // Legacy shapes are upgraded by the reference before its checks.
    if may_be_legacy(kind, data) {
        let whole: serde_json::Map<String, Value> = serde_json::from_str(line.text()).ok()?;
        match upgrade(kind, &whole, "") {
            Err(why) => return Some(why),
            Ok(Upgrade::Unknown) => return None,
            Ok(Upgrade::To(up)) => {
                let up = up.to_string();
                let (_, up) = parse_object_spans(up.as_bytes(), Utf8::Require).ok()?;
                let event = up.root();
                return checks(event, object(event.get("data")));
            }
            Ok(Upgrade::Same) => {}
        }
    }
    checks(event, data)
}

/// Whether the reference may upgrade (or refuse to upgrade) `event` of
/// type `kind` before its checks ([`super::event_legacy::legacy_shape`]).
fn may_be_legacy(kind: &str, data: Option<Val>) -> bool {
    // A record only (an array has no members here either).
    legacy_shape(kind, |k| data.is_some_and(|d| d.get(k).is_some()))
}

/// The checks of one event as the reference makes them once it is
/// upgraded.
fn checks(event: Val, data_members: Option<Val>) -> Option<String> {
    let kind = string(event.get("type"))?;
    let kind = kind.as_ref();
    if kind == "request/header-delta" {
        return Some("it uses the unsupported legacy request/header-delta format".into());
    }
    let seq = non_negative(event.get("seq"));
    if let Some(why) = envelope(event, seq) {
        return Some(format!("it has an invalid event envelope: {why}"));
    }
    let data = event.get("data");
    if let Some(why) = read_members(kind, data) {
        return Some(format!("{kind} {why}"));
    }
    if kind == "request/header" {
        if let Some(why) = request_header(data) {
            return Some(why);
        }
    }
    message_shape(kind, data_members)
        .or_else(|| surface(kind, event, seq.unwrap_or_default()))
        .map(|why| format!("{kind} {why}"))
}

/// The members an event line may have (`assertSessionEventEnvelope`).
const ENVELOPE_KEYS: &[&str] = &[
    "type",
    "seq",
    "time",
    "data",
    "surfaceOp",
    "sourceEventSeqs",
    "ignorable",
];

/// What is wrong with the envelope of `event` (whose `seq`, read, is
/// `seq`): a member the reference does not know, a `seq` that is not a
/// non-negative safe integer, a `time` that is not a safe integer, no
/// `data`, or an `ignorable` that is not `true`.
fn envelope(event: Val, seq: Option<u64>) -> Option<String> {
    if let Some(key) = event
        .entries()
        .into_keys()
        .find(|k| !ENVELOPE_KEYS.contains(&k.as_ref()))
    {
        return Some(format!(
            "a member {key:?} (an event has only type, seq, time, data, surfaceOp, \
             sourceEventSeqs and ignorable)"
        ));
    }
    if seq.is_none() {
        return Some("seq is not a non-negative safe integer".into());
    }
    if event
        .get("time")
        .and_then(|t| safe_integer(Some(&t.number()?)))
        .is_none()
    {
        return Some("time is missing or not a safe integer (milliseconds)".into());
    }
    if event.get("data").is_none() {
        return Some("data is missing".into());
    }
    let ignorable = event.get("ignorable");
    if ignorable.is_some() && !is_true(ignorable) {
        return Some("ignorable is present and not true".into());
    }
    None
}

/// Event types whose `data` members the reference reads on every load
/// (`interruptedTurnClosers`: `turn`, `step`, `callId`): a `data` that is
/// not an object makes it throw.
const MEMBERS_READ: &[&str] = &["turn/start", "step/start", "tool/call"];

/// What the reference's load cannot read in `data` of an event of type
/// `kind`: a `data` that is not an object (or array) for the
/// [`MEMBERS_READ`] types, and a `turn/start` whose `turn` is not a safe
/// integer of at least 1 (the reference closes an open turn with a
/// `turn/end` of that turn, which its own check then refuses).
fn read_members(kind: &str, data: Option<Val>) -> Option<String> {
    if !MEMBERS_READ.contains(&kind) {
        return None;
    }
    let Some(data) = object(data) else {
        return Some("has a data that is not an object".into());
    };
    if kind == "turn/start" {
        let turn = data.get("turn").and_then(|t| t.number());
        if safe_integer(turn.as_ref()).is_none_or(|t| t < 1) {
            return Some("needs a turn, a safe integer of at least 1".into());
        }
    }
    None
}

fn request_header(data: Option<Val>) -> Option<String> {
    let data = plain_object(data);
    if data.and_then(|d| string(d.get("reason"))).as_deref() == Some("fallback") {
        return Some("request/header uses the unsupported legacy reason \"fallback\"".into());
    }
    let header = plain_object(data.and_then(|d| d.get("header")));
    let config = header.and_then(|h| h.get("config"));
    if !has_provider_model(config) {
        return Some("request/header lacks provider/model".into());
    }
    let config = object(config)?;
    if let Some(effort) = config.get("reasoningEffort") {
        if !non_empty_str(Some(effort)) {
            return Some("request/header has an invalid reasoningEffort".into());
        }
    }
    let defaults = header.and_then(|h| h.get("adapterDefaults"))?;
    let invalid = || Some("request/header has invalid adapterDefaults".to_string());
    let Some(defaults) = plain_object(Some(defaults)) else {
        return invalid();
    };
    let marked = |key: &str| is_true(defaults.get(key));
    if defaults
        .entries()
        .iter()
        .any(|(k, v)| !["reasoningEffort", "maxTokens"].contains(&k.as_ref()) || !v.is_true())
        || (marked("reasoningEffort") && config.get("reasoningEffort").is_none())
        || (marked("maxTokens") && config.get("maxTokens").is_none())
    {
        return invalid();
    }
    None
}

/// `data`: the members of the event's `data` (see [`object`]).
fn message_shape(kind: &str, data: Option<Val>) -> Option<String> {
    if !SURFACE_TYPES.contains(&kind) {
        return None;
    }
    let lacks = || Some("lacks an identified message".to_string());
    let message = if kind == "user/message" {
        data
    } else {
        object(data.and_then(|d| d.get("message")))
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
    let Some(source) = object(source_raw) else {
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
    let content = message
        .get("content")
        .map(|c| c.items())
        .unwrap_or_default();
    let block = object(content.first().copied());
    let one_block = content.len() == 1
        && block.is_some_and(|b| {
            string(b.get("type")).as_deref() == Some("tool-result") && is_array(b.get("content"))
        });
    if !one_block {
        return Some("message must contain one tool-result block".into());
    }
    if block.and_then(|b| string(b.get("toolCallId"))) != call {
        return Some("message has mismatched tool call ids".into());
    }
    None
}

fn surface(kind: &str, event: Val, seq: u64) -> Option<String> {
    if !SURFACE_TYPES.contains(&kind) {
        if event.get("surfaceOp").is_some() {
            return Some("is not surface-eligible and cannot carry surfaceOp".into());
        }
        if event.get("sourceEventSeqs").is_some() {
            return Some("is not surface-eligible and cannot carry sourceEventSeqs".into());
        }
        return None;
    }
    let Some(op) = event.get("surfaceOp") else {
        return Some("is surface-eligible and requires a surfaceOp marker".into());
    };
    if string(Some(op)).as_deref() != Some("append") {
        let Some(op) = plain_object(Some(op)) else {
            return Some("carries an invalid surfaceOp".into());
        };
        let replace = op.entries().len() == 3
            && string(op.get("op")).as_deref() == Some("replace")
            && non_negative(op.get("start")).is_some()
            && non_negative(op.get("end")).is_some();
        if !replace {
            return Some("carries an invalid replace surfaceOp".into());
        }
    }
    let sources = event.get("sourceEventSeqs")?;
    if !sources.is_array() {
        return Some("sourceEventSeqs must be an array when present".into());
    }
    let sources = sources.items();
    if sources.is_empty() && kind != "assistant/message" {
        return Some("sourceEventSeqs must not be empty except on assistant/message".into());
    }
    let mut seen = std::collections::HashSet::new();
    for s in sources {
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
