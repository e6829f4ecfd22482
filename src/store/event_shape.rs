//! The reference's load-time checks of one event that need no other event
//! (`@deepseek-ai/dsh-session` 0.1.0-rc.8: `assertSessionEventEnvelope`,
//! `assertSupportedRequestHeader`, `assertCurrentLlmShape`,
//! `assertMessageEventShape`, and the event-local parts of `surfaceOpOf`
//! and `assertProvenance`). The reference refuses to load a whole session
//! when one of its events fails them, so a line failing them is refused
//! when it is written. Not checked here: what depends on earlier events
//! (a replacement's range and shadowed nodes), event types the reference
//! does not know (accepted; `sessionfs doctor` reports them), and, not
//! yet, the rest of the envelope (`time` a safe integer, `data` present,
//! no keys beyond `type`, `seq`, `time`, `data`, `surfaceOp`,
//! `sourceEventSeqs` and `ignorable`).
//! Packed chunk rows are not events: the reference expands them itself.

use serde_json::{Map, Value};

use super::lines::safe_non_negative;

/// The event types whose message joins the model-visible surface.
const SURFACE_TYPES: &[&str] = &["user/message", "assistant/message", "tool/result"];

/// Why the reference would refuse to load `event` (one parsed event line,
/// not a header or a packed row), in its own words; `None` when it passes.
pub fn refusal(event: &Map<String, Value>) -> Option<String> {
    let kind = event.get("type").and_then(Value::as_str)?;
    if kind == "request/header-delta" {
        return Some("it uses the unsupported legacy request/header-delta format".into());
    }
    let seq = safe_non_negative(event.get("seq"));
    if seq.is_none()
        || event
            .get("ignorable")
            .is_some_and(|v| v != &Value::Bool(true))
    {
        return Some(
            "it has an invalid event envelope (seq a non-negative safe integer, ignorable \
             absent or true)"
                .into(),
        );
    }
    let data = event.get("data").unwrap_or(&Value::Null);
    if kind == "request/header" {
        if let Some(why) = request_header(data) {
            return Some(why);
        }
    }
    message_shape(kind, data)
        .or_else(|| surface(kind, event, seq.unwrap_or_default()))
        .map(|why| format!("{kind} {why}"))
}

fn non_empty_str(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

/// An object (arrays count, as `typeof` says): its map, or an empty one
/// for an array, whose keys the checks then do not find.
fn object(v: &Value) -> Option<&Map<String, Value>> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    match v {
        Value::Object(m) => Some(m),
        Value::Array(_) => Some(EMPTY.get_or_init(Map::new)),
        _ => None,
    }
}

fn has_provider_model(v: Option<&Value>) -> bool {
    v.and_then(object)
        .is_some_and(|m| non_empty_str(m.get("provider")) && non_empty_str(m.get("model")))
}

fn request_header(data: &Value) -> Option<String> {
    if let Value::Object(d) = data {
        if d.get("reason").and_then(Value::as_str) == Some("fallback") {
            return Some("request/header uses the unsupported legacy reason \"fallback\"".into());
        }
    }
    let header = match data.as_object().and_then(|d| d.get("header")) {
        Some(Value::Object(h)) => Some(h),
        _ => None,
    };
    let config = header.and_then(|h| h.get("config"));
    if !has_provider_model(config) {
        return Some("request/header lacks provider/model".into());
    }
    let config = config.and_then(object)?;
    if let Some(effort) = config.get("reasoningEffort") {
        if !non_empty_str(Some(effort)) {
            return Some("request/header has an invalid reasoningEffort".into());
        }
    }
    let defaults = header.and_then(|h| h.get("adapterDefaults"))?;
    let invalid = || Some("request/header has invalid adapterDefaults".to_string());
    let Value::Object(defaults) = defaults else {
        return invalid();
    };
    let marked = |key: &str| defaults.get(key) == Some(&Value::Bool(true));
    if defaults.iter().any(|(k, v)| {
        !["reasoningEffort", "maxTokens"].contains(&k.as_str()) || v != &Value::Bool(true)
    }) || (marked("reasoningEffort") && !config.contains_key("reasoningEffort"))
        || (marked("maxTokens") && !config.contains_key("maxTokens"))
    {
        return invalid();
    }
    None
}

fn message_shape(kind: &str, data: &Value) -> Option<String> {
    if !SURFACE_TYPES.contains(&kind) {
        return None;
    }
    let message = if kind == "user/message" {
        Some(data)
    } else {
        data.as_object().and_then(|d| d.get("message"))
    };
    let Some(message) = message.and_then(object) else {
        return Some("lacks an identified message".into());
    };
    if !non_empty_str(message.get("id")) {
        return Some("lacks an identified message".into());
    }
    let role = if kind == "assistant/message" {
        "assistant"
    } else {
        "user"
    };
    if message.get("role").and_then(Value::as_str) != Some(role) {
        return Some(format!("message must have role \"{role}\""));
    }
    let Some(source) = message.get("source").and_then(object) else {
        return Some("message has invalid source".into());
    };
    if !non_empty_str(source.get("kind")) {
        return Some("message has invalid source".into());
    }
    let Some(content) = message.get("content").and_then(Value::as_array) else {
        return Some("message has invalid content".into());
    };
    let source_kind = source.get("kind").and_then(Value::as_str);
    if kind == "assistant/message" {
        if source_kind != Some("model") || !has_provider_model(message.get("source")) {
            return Some("message must have model source".into());
        }
        return None;
    }
    if kind != "tool/result" {
        return None;
    }
    let call = source.get("callId").and_then(Value::as_str);
    if source_kind != Some("tool") || call.is_none_or(str::is_empty) {
        return Some("message must have tool source".into());
    }
    let block = content.first().and_then(object);
    let one_block = content.len() == 1
        && block.is_some_and(|b| {
            b.get("type").and_then(Value::as_str) == Some("tool-result")
                && b.get("content").is_some_and(Value::is_array)
        });
    if !one_block {
        return Some("message must contain one tool-result block".into());
    }
    if block
        .and_then(|b| b.get("toolCallId"))
        .and_then(Value::as_str)
        != call
    {
        return Some("message has mismatched tool call ids".into());
    }
    None
}

fn surface(kind: &str, event: &Map<String, Value>, seq: u64) -> Option<String> {
    if !SURFACE_TYPES.contains(&kind) {
        if event.contains_key("surfaceOp") {
            return Some("is not surface-eligible and cannot carry surfaceOp".into());
        }
        if event.contains_key("sourceEventSeqs") {
            return Some("is not surface-eligible and cannot carry sourceEventSeqs".into());
        }
        return None;
    }
    match event.get("surfaceOp") {
        None => return Some("is surface-eligible and requires a surfaceOp marker".into()),
        Some(Value::String(s)) if s == "append" => {}
        Some(Value::Object(op)) => {
            let replace = op.len() == 3
                && op.get("op").and_then(Value::as_str) == Some("replace")
                && safe_non_negative(op.get("start")).is_some()
                && safe_non_negative(op.get("end")).is_some();
            if !replace {
                return Some("carries an invalid replace surfaceOp".into());
            }
        }
        Some(_) => return Some("carries an invalid surfaceOp".into()),
    }
    let sources = event.get("sourceEventSeqs")?;
    let Some(sources) = sources.as_array() else {
        return Some("sourceEventSeqs must be an array when present".into());
    };
    if sources.is_empty() && kind != "assistant/message" {
        return Some("sourceEventSeqs must not be empty except on assistant/message".into());
    }
    let mut seen = std::collections::HashSet::new();
    for s in sources {
        let Some(n) = safe_non_negative(Some(s)) else {
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
