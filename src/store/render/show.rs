//! The paragraphs of single events that need no renderer state: tool
//! calls and results, user content, turn ends, todo lists, request
//! headers. Each returns `None` (having written nothing) when the event's
//! shape is not the reference's, and the event is then listed instead.

use super::json::J;
use super::markdown::{code, fence, one_line, shorten};
use super::{clock, push, str_of, u64_of, RESULT_MAX_BYTES, RESULT_MAX_LINES};

/// User content: text verbatim, other blocks as a one-line mark.
pub(super) fn content_blocks(blocks: &[J], out: &mut Vec<u8>) {
    for block in blocks {
        match (str_of(block, "type"), str_of(block, "text")) {
            (Some("text"), Some(text)) => {
                push(out, text);
                push(out, "\n\n");
            }
            (ty, _) => push(
                out,
                &format!("*[{} block]*\n\n", one_line(ty.unwrap_or("unknown"))),
            ),
        }
    }
}

/// `tool/call`: name, call id, the raw arguments fenced.
pub(super) fn tool_call(data: &J, out: &mut Vec<u8>) -> Option<()> {
    let name = str_of(data, "name")?;
    let id = str_of(data, "callId")?;
    let args = str_of(data, "arguments")?;
    push(
        out,
        &format!("**Tool call** {} · {}\n\n", code(name), code(id)),
    );
    fence(out, "json", args);
    Some(())
}

/// `tool/result`: each text fenced and shortened, with a note of what
/// was left out; other blocks as a one-line mark.
pub(super) fn tool_result(data: &J, seq: Option<u64>, out: &mut Vec<u8>) -> Option<()> {
    let blocks = data.get("message")?.get("content")?.as_array()?;
    for block in blocks {
        let id = str_of(block, "toolCallId").unwrap_or("?");
        let failed = block.get("isError") == Some(&J::Bool(true)) || data.get("error").is_some();
        let error = match data.get("error").and_then(|e| str_of(e, "code")) {
            Some(c) => format!(" — error {}", code(c)),
            None if failed => " — error".into(),
            None => String::new(),
        };
        push(out, &format!("**Tool result** {}{error}\n\n", code(id)));
        let Some(parts) = block.get("content").and_then(J::as_array) else {
            continue;
        };
        for part in parts {
            match (str_of(part, "type"), str_of(part, "text")) {
                (Some("text"), Some(text)) => {
                    let s = shorten(text, RESULT_MAX_LINES, RESULT_MAX_BYTES);
                    fence(out, "", s.shown);
                    if s.bytes_left > 0 {
                        let at = seq.map_or(String::new(), |s| format!(" at seq {s}"));
                        push(
                            out,
                            &format!(
                                "*… {} more lines ({} bytes) not shown: the whole result is in session.jsonl{at}.*\n\n",
                                s.lines_left, s.bytes_left
                            ),
                        );
                    }
                }
                (ty, _) => push(
                    out,
                    &format!("*[{} block]*\n\n", one_line(ty.unwrap_or("unknown"))),
                ),
            }
        }
    }
    Some(())
}

/// `turn/end`: its reason (with the cancel cause or the error).
pub(super) fn turn_end(data: &J, time: Option<i64>, out: &mut Vec<u8>) -> Option<()> {
    let turn = u64_of(data, "turn")?;
    let reason = data.get("reason")?;
    let kind = str_of(reason, "kind")?;
    let detail = match kind {
        "aborted" => reason
            .get("reason")
            .and_then(|r| str_of(r, "kind"))
            .map(|k| format!(" ({})", one_line(k))),
        "error" => reason.get("error").map(|e| {
            let msg = str_of(e, "message").unwrap_or("");
            let c = str_of(e, "code").unwrap_or("");
            format!(
                " ({}{}{})",
                one_line(c),
                if c.is_empty() { "" } else { ": " },
                one_line(msg)
            )
        }),
        _ => None,
    }
    .unwrap_or_default();
    let when = time
        .map(|t| format!(" · {}", clock::clock(t)))
        .unwrap_or_default();
    push(
        out,
        &format!(
            "**Turn {turn} ended:** {}{detail}{when}\n\n",
            one_line(kind)
        ),
    );
    Some(())
}

/// `todo/write`: the list as Markdown tasks.
pub(super) fn todo_write(data: &J, out: &mut Vec<u8>) -> Option<()> {
    let todos = data.get("todos")?.as_array()?;
    push(out, "**Todo list:**\n\n");
    for t in todos {
        let content = one_line(str_of(t, "content").unwrap_or(""));
        let line = match str_of(t, "status") {
            Some("completed") => format!("- [x] {content}\n"),
            Some("in_progress") => format!("- [ ] {content} *(in progress)*\n"),
            _ => format!("- [ ] {content}\n"),
        };
        push(out, &line);
    }
    push(out, "\n");
    Some(())
}

/// `request/header`: reason, provider and model on one line.
pub(super) fn request_header(data: &J, out: &mut Vec<u8>) -> Option<()> {
    let config = data.get("header")?.get("config")?;
    let provider = str_of(config, "provider")?;
    let model = str_of(config, "model")?;
    let reason = str_of(data, "reason").unwrap_or("?");
    push(
        out,
        &format!(
            "*Request ({}): {} / {}*\n\n",
            one_line(reason),
            one_line(provider),
            one_line(model)
        ),
    );
    Some(())
}
