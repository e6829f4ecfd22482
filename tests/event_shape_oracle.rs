//! The write-time event checks (`store::event_shape`) agree with the
//! reference: each case is one event after a header, written as the
//! reference's own frames would be, and loaded by the reference
//! (`tests/oracle/load.mjs`); sessionfs refuses the line exactly when the
//! reference refuses to load the session. The envelope cases take one
//! member away or change it; the others keep the envelope valid.

mod common;

use std::fs;

use serde_json::{json, Value};
use sessionfs::store::lines::SeqCursor;
use sessionfs::store::naming::{encode_id, project_dir_name};

use common::oracle;

fn user(extra: Value) -> Value {
    let mut m = json!({"id": "m1", "role": "user", "content": [{"type": "text", "text": "hi"}],
                       "source": {"kind": "user"}});
    merge(&mut m, extra);
    m
}

fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, extra) {
        for (k, v) in b {
            if v.is_null() {
                a.remove(&k);
            } else {
                a.insert(k, v);
            }
        }
    }
}

fn event(kind: &str, data: Value, envelope: Value) -> Value {
    let mut e = json!({"type": kind, "seq": 0, "time": 1767614401003u64, "data": data});
    merge(&mut e, envelope);
    e
}

/// Every case: a name and one event line.
fn cases() -> Vec<(&'static str, Value)> {
    let append = json!({"surfaceOp": "append"});
    let model = json!({"kind": "model", "provider": "deepseek", "model": "deepseek-chat"});
    let assistant = |source: Value, extra: Value| {
        let mut m = json!({"id": "a1", "role": "assistant", "content": [], "source": source});
        merge(&mut m, extra);
        json!({"turn": 1, "step": 1, "message": m})
    };
    let tool = |call: &str, block_id: &str, blocks: Value| {
        let content = if blocks.is_null() {
            json!([{"type": "tool-result", "toolCallId": block_id, "content": [], "isError": false}])
        } else {
            blocks
        };
        json!({"turn": 1, "step": 1, "message": {"id": "t1", "role": "user", "content": content,
               "source": {"kind": "tool", "callId": call}}})
    };
    let header = |config: Value, extra: Value| {
        let mut h = json!({"config": config, "system": "s", "tools": []});
        merge(&mut h, extra);
        json!({"header": h})
    };
    let cfg = json!({"provider": "deepseek", "model": "deepseek-chat"});
    vec![
        (
            "user ok",
            event("user/message", user(json!({})), append.clone()),
        ),
        (
            "user no source",
            event(
                "user/message",
                user(json!({"source": null})),
                append.clone(),
            ),
        ),
        (
            "user source no kind",
            event("user/message", user(json!({"source": {}})), append.clone()),
        ),
        (
            "user empty kind",
            event(
                "user/message",
                user(json!({"source": {"kind": ""}})),
                append.clone(),
            ),
        ),
        (
            "user no id",
            event("user/message", user(json!({"id": null})), append.clone()),
        ),
        (
            "user empty id",
            event("user/message", user(json!({"id": ""})), append.clone()),
        ),
        (
            "user role assistant",
            event(
                "user/message",
                user(json!({"role": "assistant"})),
                append.clone(),
            ),
        ),
        (
            "user content object",
            event("user/message", user(json!({"content": {}})), append.clone()),
        ),
        (
            "user data array",
            event("user/message", json!([1]), append.clone()),
        ),
        (
            "user no surfaceOp",
            event("user/message", user(json!({})), json!({})),
        ),
        (
            "user surfaceOp other",
            event(
                "user/message",
                user(json!({})),
                json!({"surfaceOp": "prepend"}),
            ),
        ),
        (
            "user surfaceOp replace shape",
            event(
                "user/message",
                user(json!({})),
                json!({"surfaceOp": {"op": "replace", "start": 0}}),
            ),
        ),
        (
            "user sourceEventSeqs empty",
            event(
                "user/message",
                user(json!({})),
                json!({"surfaceOp": "append", "sourceEventSeqs": []}),
            ),
        ),
        (
            "user sourceEventSeqs later",
            event(
                "user/message",
                user(json!({})),
                json!({"surfaceOp": "append", "sourceEventSeqs": [0]}),
            ),
        ),
        (
            "user ignorable false",
            event(
                "user/message",
                user(json!({})),
                json!({"surfaceOp": "append", "ignorable": false}),
            ),
        ),
        (
            "assistant ok",
            event(
                "assistant/message",
                assistant(model.clone(), json!({})),
                append.clone(),
            ),
        ),
        (
            "assistant user source",
            event(
                "assistant/message",
                assistant(json!({"kind": "user"}), json!({})),
                append.clone(),
            ),
        ),
        (
            "assistant no model",
            event(
                "assistant/message",
                assistant(json!({"kind": "model", "provider": "deepseek"}), json!({})),
                append.clone(),
            ),
        ),
        (
            "assistant role user",
            event(
                "assistant/message",
                assistant(model.clone(), json!({"role": "user"})),
                append.clone(),
            ),
        ),
        (
            "assistant no message",
            event("assistant/message", json!({"turn": 1}), append.clone()),
        ),
        (
            "assistant empty sourceEventSeqs",
            event(
                "assistant/message",
                assistant(model, json!({})),
                json!({"surfaceOp": "append", "sourceEventSeqs": []}),
            ),
        ),
        (
            "tool ok",
            event("tool/result", tool("c1", "c1", Value::Null), append.clone()),
        ),
        (
            "tool mismatched ids",
            event("tool/result", tool("c1", "c2", Value::Null), append.clone()),
        ),
        (
            "tool empty call",
            event("tool/result", tool("", "", Value::Null), append.clone()),
        ),
        (
            "tool two blocks",
            event(
                "tool/result",
                tool(
                    "c1",
                    "c1",
                    json!([{"type": "tool-result", "toolCallId": "c1", "content": []},
                   {"type": "tool-result", "toolCallId": "c1", "content": []}]),
                ),
                append.clone(),
            ),
        ),
        (
            "tool text block",
            event(
                "tool/result",
                tool("c1", "c1", json!([{"type": "text", "text": "x"}])),
                append.clone(),
            ),
        ),
        (
            "header ok",
            event("request/header", header(cfg.clone(), json!({})), json!({})),
        ),
        (
            "header no model",
            event(
                "request/header",
                header(json!({"provider": "deepseek"}), json!({})),
                json!({}),
            ),
        ),
        (
            "header empty effort",
            event(
                "request/header",
                header(
                    json!({"provider": "p", "model": "m", "reasoningEffort": ""}),
                    json!({}),
                ),
                json!({}),
            ),
        ),
        (
            "header defaults ok",
            event(
                "request/header",
                header(
                    json!({"provider": "p", "model": "m", "maxTokens": 5}),
                    json!({"adapterDefaults": {"maxTokens": true}}),
                ),
                json!({}),
            ),
        ),
        (
            "header defaults unset",
            event(
                "request/header",
                header(cfg.clone(), json!({"adapterDefaults": {"maxTokens": true}})),
                json!({}),
            ),
        ),
        (
            "header defaults other key",
            event(
                "request/header",
                header(
                    cfg.clone(),
                    json!({"adapterDefaults": {"temperature": true}}),
                ),
                json!({}),
            ),
        ),
        (
            "header fallback",
            event(
                "request/header",
                json!({"header": {"config": cfg, "system": "s", "tools": []}, "reason": "fallback"}),
                json!({}),
            ),
        ),
        (
            "header delta",
            event("request/header-delta", json!({}), json!({})),
        ),
        (
            "turn ok",
            event("turn/start", json!({"turn": 1}), json!({})),
        ),
        (
            "turn with surfaceOp",
            event(
                "turn/start",
                json!({"turn": 1}),
                json!({"surfaceOp": "append"}),
            ),
        ),
        (
            "turn with sourceEventSeqs",
            event(
                "turn/start",
                json!({"turn": 1}),
                json!({"sourceEventSeqs": []}),
            ),
        ),
        (
            "turn ignorable true",
            event("turn/start", json!({"turn": 1}), json!({"ignorable": true})),
        ),
        // Legacy shapes the reference upgrades before its checks.
        (
            "legacy user",
            event(
                "user/message",
                json!({"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}),
                append.clone(),
            ),
        ),
        (
            "legacy user no source",
            event(
                "user/message",
                json!({"content": [{"type": "text", "text": "hi"}]}),
                append.clone(),
            ),
        ),
        (
            "legacy assistant",
            event(
                "assistant/message",
                json!({"content": [], "provenance": {"provider": "p", "model": "m"}}),
                append.clone(),
            ),
        ),
        (
            "legacy assistant no model",
            event(
                "assistant/message",
                json!({"content": [], "provenance": {"provider": "p"}}),
                append.clone(),
            ),
        ),
        (
            "legacy tool",
            event(
                "tool/result",
                json!({"callId": "c", "content": [], "isError": false}),
                append.clone(),
            ),
        ),
        (
            "legacy steering",
            event(
                "steering/message",
                json!({"turn": 1, "content": [], "source": {"kind": "user"}}),
                append.clone(),
            ),
        ),
        (
            "legacy steering wrapped",
            event(
                "steering/message",
                json!({"turn": 1, "message": {"id": "s1", "role": "user", "content": [], "source": {"kind": "user"}}}),
                append.clone(),
            ),
        ),
        (
            "legacy steering extra key",
            event(
                "steering/message",
                json!({"turn": 1, "content": [], "source": {"kind": "user"}, "x": 1}),
                append.clone(),
            ),
        ),
        (
            "mode/set",
            event("mode/set", json!({}), json!({"ignorable": true})),
        ),
        (
            "turn/start trigger",
            event(
                "turn/start",
                json!({"turn": 1, "trigger": {"kind": "user"}}),
                json!({}),
            ),
        ),
        (
            "turn/start trigger turn 0",
            event(
                "turn/start",
                json!({"turn": 0, "trigger": {"kind": "user"}}),
                json!({}),
            ),
        ),
        (
            "turn/end completed",
            event(
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "completed"}}),
                json!({}),
            ),
        ),
        (
            "turn/end completed extra",
            event(
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "completed", "x": 1}}),
                json!({}),
            ),
        ),
        (
            "turn/end extra data key",
            event(
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "completed"}, "x": 1}),
                json!({}),
            ),
        ),
        (
            "turn/end aborted legacy",
            event(
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "aborted"}}),
                json!({}),
            ),
        ),
        (
            "turn/end error legacy",
            event(
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "error", "step": 0, "message": "m"}}),
                json!({}),
            ),
        ),
        (
            "turn/end error legacy bad",
            event(
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "error", "step": -1, "message": "m"}}),
                json!({}),
            ),
        ),
        // Members the reference reads on every load (the third tester's).
        (
            "step/start data null",
            event("step/start", json!(null), json!({})),
        ),
        (
            "tool/call data null",
            event("tool/call", json!(null), json!({})),
        ),
        (
            "turn/end data null",
            event("turn/end", json!(null), json!({})),
        ),
        (
            "turn/start data null",
            event("turn/start", json!(null), json!({})),
        ),
        (
            "turn/start no turn",
            event("turn/start", json!({}), json!({})),
        ),
        (
            "turn/start turn 0",
            event("turn/start", json!({"turn": 0}), json!({})),
        ),
        (
            "turn/start turn string",
            event("turn/start", json!({"turn": "1"}), json!({})),
        ),
        (
            "step/end data null",
            event("step/end", json!(null), json!({})),
        ),
        (
            "step/start step",
            event("step/start", json!({"turn": 1, "step": 1}), json!({})),
        ),
        // The envelope (assertSessionEventEnvelope).
        ("envelope ok", event("goal/change", json!({}), json!({}))),
        (
            "envelope no time",
            event("goal/change", json!({}), json!({"time": null})),
        ),
        (
            "envelope time string",
            event("goal/change", json!({}), json!({"time": "1767614401003"})),
        ),
        (
            "envelope time fraction",
            event("goal/change", json!({}), json!({"time": 1.5})),
        ),
        (
            "envelope time negative",
            event("goal/change", json!({}), json!({"time": -5})),
        ),
        (
            "envelope time unsafe",
            event(
                "goal/change",
                json!({}),
                json!({"time": 9007199254740993u64}),
            ),
        ),
        (
            "envelope no data",
            event("goal/change", json!({}), json!({"data": null})),
        ),
        (
            "envelope data false",
            event("goal/change", json!(false), json!({})),
        ),
        (
            "envelope extra key",
            event("goal/change", json!({}), json!({"meta": 1})),
        ),
        (
            "envelope seq string",
            event("goal/change", json!({}), json!({"seq": "0"})),
        ),
        (
            "envelope ignorable true",
            event("note/x", json!({}), json!({"ignorable": true})),
        ),
        (
            "envelope ignorable false",
            event("goal/change", json!({}), json!({"ignorable": false})),
        ),
        (
            "turn/end other kind",
            event(
                "turn/end",
                json!({"turn": 1, "reason": {"kind": "zzz", "y": 2}}),
                json!({}),
            ),
        ),
    ]
}

#[test]
fn write_time_event_checks_agree_with_the_reference_load() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let cases = cases();
    let mut ids = Vec::new();
    for (i, (_, e)) in cases.iter().enumerate() {
        let id = format!("shape-{i}");
        let dir = root
            .join(project_dir_name(None).unwrap())
            .join(encode_id(&id).unwrap());
        fs::create_dir_all(&dir).unwrap();
        let header = format!(
            "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1767614401000,\"delegationDepth\":0}}\n"
        );
        let line = format!("{e}\n");
        let mut bytes = zstd::encode_all(header.as_bytes(), 3).unwrap();
        bytes.extend(zstd::encode_all(line.as_bytes(), 3).unwrap());
        fs::write(dir.join("session.jsonl.zstd"), bytes).unwrap();
        ids.push(id);
    }
    let mut args = vec![root.clone().into_os_string()];
    args.extend(ids.iter().map(|i| i.into()));
    let loaded: Value = serde_json::from_slice(&oracle::script("load.mjs", args).stdout).unwrap();
    let mut refused_both = 0;
    for ((name, e), id) in cases.iter().zip(&ids) {
        let reference_ok = loaded[id]["ok"] == true;
        let line = e.to_string();
        let ours = SeqCursor::after(0).check_line(line.as_bytes(), 1);
        assert_eq!(
            ours.is_ok(),
            reference_ok,
            "{name}: sessionfs {ours:?}, the reference {}\n{line}",
            loaded[id]
        );
        refused_both += usize::from(!reference_ok);
    }
    // The cases hold refusals and acceptances both.
    assert!(
        refused_both >= 20 && refused_both < cases.len(),
        "{refused_both}"
    );
}
