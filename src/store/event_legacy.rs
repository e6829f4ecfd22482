//! The reference's upgrades of legacy event shapes, which it applies to
//! each stored event before its checks (`@deepseek-ai/dsh-session-persistence`
//! 0.1.0-rc.8: `assertSupportedEvents`, `migrateLegacyTurnStartEvent`,
//! `migrateLegacyTurnEndEvent`, `migrateLegacySteeringEvent`,
//! `migrateLegacyMessageEvent`): a line of a shape it upgrades is judged
//! upgraded ([`super::event_shape`]), and one it refuses to upgrade is
//! refused, in its words.

use serde_json::{json, Map, Value};

/// What the reference makes of an event before its checks.
pub enum Upgrade {
    /// Judged as it is.
    Same,
    /// Judged as this event (its JSON).
    To(Value),
    /// Cannot be judged from this line alone (a legacy tool result that
    /// replaces another takes that one's message id).
    Unknown,
}

use super::lines::safe_integer as safe_int;

/// Whether an event of type `kind` whose `data` record has the keys `has`
/// tells of is of a shape [`upgrade`] upgrades or refuses (by its keys
/// alone; `mode/set`, `steering/message` and `turn/end` always).
pub fn legacy_shape(kind: &str, has: impl Fn(&str) -> bool) -> bool {
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

/// Only keys of `required` and `optional`, and every one of `required`.
fn has_only_keys(record: &Map<String, Value>, required: &[&str], optional: &[&str]) -> bool {
    record
        .keys()
        .all(|k| required.contains(&k.as_str()) || optional.contains(&k.as_str()))
        && required.iter().all(|k| record.contains_key(*k))
}

fn legacy_id(session: &str, seq: &Value) -> Value {
    Value::String(format!("legacy-message:{session}:{seq}"))
}

/// The reference's upgrade of `event` (parsed whole) of session `session`,
/// or why it refuses it.
pub fn upgrade(kind: &str, event: &Map<String, Value>, session: &str) -> Result<Upgrade, String> {
    if kind == "mode/set" {
        return Err("it is an unsupported legacy mode/set event".into());
    }
    let data = event.get("data").and_then(Value::as_object);
    let malformed = |what: &str| Err(format!("it is a malformed pre-react-loop {what}"));
    match kind {
        "turn/start" => {
            let Some(data) = data.filter(|d| legacy_shape(kind, |k| d.contains_key(k))) else {
                return Ok(Upgrade::Same);
            };
            let trigger = data.get("trigger").and_then(Value::as_object);
            let ok = safe_int(data.get("turn")).is_some_and(|t| t >= 1)
                && has_only_keys(data, &["turn", "trigger"], &[])
                && trigger
                    .and_then(|t| t.get("kind"))
                    .and_then(Value::as_str)
                    .is_some_and(|k| !k.is_empty());
            if ok {
                Ok(Upgrade::Same)
            } else {
                malformed("turn/start")
            }
        }
        "turn/end" => {
            let Some(data) = data else {
                return Ok(Upgrade::Same);
            };
            let reason = data.get("reason").and_then(Value::as_object);
            let kind_of = reason.and_then(|r| r.get("kind")).and_then(Value::as_str);
            let (Some(reason), Some(reason_kind)) = (reason, kind_of) else {
                return malformed("turn/end");
            };
            if safe_int(data.get("turn")).is_none_or(|t| t < 1)
                || !has_only_keys(data, &["turn", "reason"], &[])
            {
                return malformed("turn/end");
            }
            let only_kind = has_only_keys(reason, &["kind"], &[]);
            let ok = match reason_kind {
                "completed" | "blocked" | "max-tokens" | "interrupted" | "disposed" => only_kind,
                "aborted" => reason.contains_key("reason") || only_kind,
                "error" => reason.contains_key("error") || legacy_error_ok(reason),
                _ => true,
            };
            if ok {
                Ok(Upgrade::Same)
            } else {
                malformed("turn/end")
            }
        }
        "steering/message" => {
            let Some(data) = data else {
                return malformed("steering/message");
            };
            let turn_ok = safe_int(data.get("turn")).is_some();
            let mut up = event.clone();
            up.insert("type".into(), "user/message".into());
            if let Some(wrapped) = data.get("message").filter(|m| m.is_object()) {
                if turn_ok && has_only_keys(data, &["turn", "message"], &[]) {
                    up.insert("data".into(), wrapped.clone());
                    return Ok(Upgrade::To(Value::Object(up)));
                }
            }
            if !turn_ok || !has_only_keys(data, &["turn", "content", "source"], &[]) {
                return malformed("steering/message");
            }
            let mut message = data.clone();
            message.remove("turn");
            message.insert("id".into(), legacy_id(session, &event["seq"]));
            message.insert("role".into(), "user".into());
            up.insert("data".into(), Value::Object(message));
            Ok(Upgrade::To(Value::Object(up)))
        }
        _ => message(kind, event, data, session),
    }
}

/// A legacy `error` turn ending: `step` and either a `failure` record or a
/// `message` (and `code`).
fn legacy_error_ok(reason: &Map<String, Value>) -> bool {
    if safe_int(reason.get("step")).is_none_or(|s| s < 0) {
        return false;
    }
    if let Some(failure) = reason.get("failure").and_then(Value::as_object) {
        let opt_num = |k: &str| failure.get(k).is_none_or(Value::is_number);
        if has_only_keys(reason, &["kind", "step", "failure"], &[])
            && has_only_keys(
                failure,
                &["message", "code"],
                &["status", "providerRetryAfterMs", "requestId"],
            )
            && failure.get("message").is_some_and(Value::is_string)
            && failure.get("code").is_some_and(Value::is_string)
            && opt_num("status")
            && opt_num("providerRetryAfterMs")
            && failure.get("requestId").is_none_or(Value::is_string)
        {
            return true;
        }
    }
    let keys: &[&str] = if reason.contains_key("code") {
        &["kind", "step", "message", "code"]
    } else {
        &["kind", "step", "message"]
    };
    has_only_keys(reason, keys, &[])
        && reason.get("message").is_some_and(Value::is_string)
        && reason.get("code").is_none_or(Value::is_string)
}

fn message(
    kind: &str,
    event: &Map<String, Value>,
    data: Option<&Map<String, Value>>,
    session: &str,
) -> Result<Upgrade, String> {
    let Some(data) = data.filter(|d| legacy_shape(kind, |k| d.contains_key(k))) else {
        return Ok(Upgrade::Same);
    };
    let id = legacy_id(session, &event["seq"]);
    let new_data = match kind {
        "user/message" => {
            let mut d = data.clone();
            d.insert("id".into(), id);
            d.insert("role".into(), "user".into());
            Value::Object(d)
        }
        "assistant/message" => {
            let mut d = data.clone();
            let content = d.remove("content").unwrap_or(Value::Null);
            let provenance = d.remove("provenance").unwrap_or(Value::Null);
            let mut source = provenance.as_object().cloned().unwrap_or_default();
            source.insert("kind".into(), "model".into());
            d.insert(
                "message".into(),
                json!({"id": id, "role": "assistant", "content": content, "source": source}),
            );
            Value::Object(d)
        }
        "tool/result" => {
            let replaces = event
                .get("surfaceOp")
                .and_then(Value::as_object)
                .is_some_and(|op| {
                    op.get("op") == Some(&Value::from("replace"))
                        && op.get("start").is_some_and(Value::is_number)
                });
            if replaces {
                return Ok(Upgrade::Unknown);
            }
            let mut d = data.clone();
            let call = d.remove("callId").unwrap_or(Value::Null);
            let content = d.remove("content").unwrap_or(Value::Null);
            let is_error = d.remove("isError").unwrap_or(Value::Null);
            d.insert(
                "message".into(),
                json!({"id": id, "role": "user",
                       "content": [{"type": "tool-result", "toolCallId": call, "content": content,
                                    "isError": is_error}],
                       "source": {"kind": "tool", "callId": call}}),
            );
            Value::Object(d)
        }
        _ => return Ok(Upgrade::Same),
    };
    let mut up = event.clone();
    up.insert("data".into(), new_data);
    Ok(Upgrade::To(Value::Object(up)))
}
