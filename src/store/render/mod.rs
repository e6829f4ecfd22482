//! The readable transcript (issue 16): a transcript's events rendered as
//! Markdown, line by line, append-only.
//!
//! The Markdown of a line depends only on the lines before it, carried in a
//! small [`RenderState`] (a few counters, the header facts until they are
//! written, the stream block being written): feeding more lines appends to
//! what was produced, never changes it, so a rendering continues from a
//! persisted state and `tail -f` follows it.
//!
//! What is shown (event types and shapes of the reference's
//! `@deepseek-ai/dsh-session` `SessionEventMap`, and its packed chunk rows):
//! * a title line (`# ` and the session title, or `# Untitled session`
//!   when it is empty) and the header facts (id, project cwd, created time
//!   in the local time zone, parent session, seed length, subagent origin),
//!   written before the first event other than an opening `turn/start`.
//!   The title is the views' ([`crate::store::title::scan_title`]: the
//!   first `user/message` of the transcript, whatever events come before
//!   it), given by the caller ([`Renderer::set_title`]) before that event:
//!   [`render_range`] looks for it first and renders nothing while the
//!   transcript holds no user message yet (within
//!   [`crate::store::title::TITLE_SCAN_LIMIT`]), so the title line is never
//!   written before it is known and a rendering stays append-only;
//! * `turn/start` as a `## Turn N` heading with its local date and time;
//!   `step/start` as `### Step N`; `user/message` text verbatim;
//! * assistant text and reasoning from the stream: `text-delta` and
//!   `reasoning-delta` chunks and `text-chunks` / `reasoning-chunks` rows,
//!   each block's pieces written one after the other with nothing between
//!   them (whole paragraphs); a block seen only whole (`block-end` without
//!   deltas, or an `assistant/message` of a step with no stream) is written
//!   from it; `assistant/message` otherwise adds only an `(interrupted)`
//!   mark when it has one;
//! * `tool/call`: name, call id and the raw arguments in a fenced block
//!   (streamed tool-call deltas and `tool-call-chunks` rows are the same
//!   arguments and add nothing);
//! * `tool/result`: each text in a fenced block, shortened to
//!   [`RESULT_MAX_LINES`] lines and [`RESULT_MAX_BYTES`] bytes, with a note
//!   of the lines and bytes left out;
//! * `turn/end` with its reason; `todo/write` as a task list;
//!   `request/header` as one line (provider, model, reason);
//!   `session/end-seed` as a rule and a note; `step/end`, `block-start`,
//!   `usage` and successful `finish` chunks add nothing;
//! * every other event (unknown types, and known ones with nothing to
//!   read, such as `request/context`), and an event whose shape is not the
//!   reference's, as one list line: `` - `TYPE` event, seq N ``.
//!
//! A line that is not a JSON object with a `type`, a malformed packed row,
//! a first line that is not a session header, or a frame that fails to
//! decode stops the rendering: a last paragraph says at which line and
//! byte of `session.jsonl` and why, and nothing after it is rendered. A
//! line longer than [`MAX_RENDERED_LINE`] is listed with its length and
//! skipped (memory stays bounded).

pub mod cache;
pub mod clock;
pub mod json;
pub mod markdown;
mod reader;
mod show;

use serde::{Deserialize, Serialize};

pub use super::long_lines::LONG_LINES_AT_ONCE;
use json::{J, NULL};
use markdown::{code, one_line};
pub use reader::{cut_deep, parse_line, render_range, ParsedLine, KEPT_LEVELS};
use show::{content_blocks, request_header, todo_write, tool_call, tool_result, turn_end};

/// Version of the rendering; a cached rendering of another version is
/// rebuilt (3: control characters shown, lines deeper than serde_json
/// goes rendered; 4: lines over 4 MiB listed, deep lines read down to
/// [`KEPT_LEVELS`] levels; 5: bytes that are not UTF-8 shown as U+FFFD,
/// where the rendering stopped before).
pub const RENDER_FORMAT: u32 = 5;

/// Lines of a tool result shown at most; the rest is summarized.
pub const RESULT_MAX_LINES: usize = 40;
/// Bytes of a tool result shown at most; the rest is summarized.
pub const RESULT_MAX_BYTES: usize = 16 * 1024;
/// Longest line rendered, in bytes without its newline (4 MiB); a longer
/// line is listed with its length and skipped without being held (read
/// over in chunks), so memory stays bounded whatever the transcript
/// holds. Renderings holding a line longer than a read chunk (512 KiB) at
/// once are limited ([`LONG_LINES_AT_ONCE`]).
pub const MAX_RENDERED_LINE: usize = 4 << 20;

/// The header facts shown (FORMAT.md, the header line).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
struct HeaderFacts {
    id: String,
    cwd: Option<String>,
    created_at: Option<i64>,
    parent: Option<String>,
    seed_length: Option<u64>,
    origin: Option<String>,
    depth: Option<u64>,
    preset: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
enum BlockKind {
    Text,
    Reasoning,
}

/// The stream block being written.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
struct OpenBlock {
    kind: BlockKind,
    turn: u64,
    step: u64,
    index: u64,
}

/// Everything the rendering of the next line depends on. Small (the
/// header facts are dropped once written); persisted beside a cached
/// rendering.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct RenderState {
    /// Lines consumed, the header line included.
    pub lines: u64,
    /// Bytes of the transcript view consumed (whole lines).
    pub plain_offset: u64,
    /// Bytes of Markdown produced.
    pub md_len: u64,
    /// Whether the rendering stopped at damage (nothing more is rendered).
    pub stopped: bool,
    /// The session title, once known ([`Renderer::set_title`]; empty: none).
    #[serde(default)]
    title: Option<String>,
    /// View offset up to which the lines were looked at for the title
    /// while it is not known ([`crate::store::title::TitleScan::NotYet`]).
    #[serde(default)]
    pub title_checked: u64,
    header: Option<HeaderFacts>,
    header_written: bool,
    pending_turn: Option<(u64, Option<i64>)>,
    open: Option<OpenBlock>,
    /// The (turn, step) whose text or reasoning was shown from its stream.
    shown_step: Option<(u64, u64)>,
}

/// The line-by-line renderer (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Renderer {
    state: RenderState,
}

pub(super) fn u64_of(v: &J, key: &str) -> Option<u64> {
    v.get(key).and_then(J::as_u64)
}

pub(super) fn str_of<'a>(v: &'a J, key: &str) -> Option<&'a str> {
    v.get(key).and_then(J::as_str)
}

/// Appends `s` with its control characters made visible, so that `cat
/// session.md` sends a terminal no escape sequence and `grep` sees text:
/// C0 controls other than tab and newline as their Control Pictures
/// (ESC as `␛`, NUL as `␀`), DEL as `␡`, C1 controls as U+FFFD; a CR before
/// a newline is dropped (CRLF text shows as lines).
pub(super) fn push(out: &mut Vec<u8>, s: &str) {
    let plain = !s
        .bytes()
        .any(|b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f || b == 0xc2);
    if plain {
        out.extend_from_slice(s.as_bytes());
        return;
    }
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let shown = match c {
            '\r' if chars.peek() == Some(&'\n') => continue,
            '\n' | '\t' => c,
            c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
            '\u{7f}' => '\u{2421}',
            '\u{80}'..='\u{9f}' => '\u{fffd}',
            c => c,
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(shown.encode_utf8(&mut buf).as_bytes());
    }
}

impl Renderer {
    /// A renderer at the start of a transcript.
    pub fn new() -> Self {
        Renderer::default()
    }

    /// A renderer continuing from `state`.
    pub fn from_state(state: RenderState) -> Self {
        Renderer { state }
    }

    /// Where this renderer is.
    pub fn state(&self) -> &RenderState {
        &self.state
    }

    /// Whether the title must be given ([`Renderer::set_title`]) before
    /// more lines are rendered: the header block is not written yet and
    /// the title is not known.
    pub fn needs_title(&self) -> bool {
        !self.state.header_written && self.state.title.is_none() && !self.state.stopped
    }

    /// Records that the lines up to view offset `checked` hold no user
    /// message ([`crate::store::title::TitleScan::NotYet`]).
    pub fn title_checked(&mut self, checked: u64) {
        self.state.title_checked = checked;
    }

    /// Sets the session title ([`crate::store::title::scan_title`]; empty
    /// for `# Untitled session`) written in the header block. A renderer
    /// given none writes `# Untitled session`. No effect once the header
    /// block is written.
    pub fn set_title(&mut self, title: String) {
        if !self.state.header_written {
            self.state.title = Some(title);
        }
    }

    /// Renders one complete line of the view (`line` without its `\n`),
    /// appending Markdown to `out`. Nothing happens once stopped.
    pub fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        if !self.state.stopped {
            self.parsed_line(line.len(), parse_line(line), out);
        }
    }

    /// [`Renderer::line`] of a line of `len` bytes (without its `\n`)
    /// already parsed by [`parse_line`] (on another thread, say).
    pub fn parsed_line(&mut self, len: usize, parsed: ParsedLine<'_>, out: &mut Vec<u8>) {
        if self.state.stopped {
            return;
        }
        let start = out.len();
        let number = self.state.lines + 1;
        let offset = self.state.plain_offset;
        let outcome = parsed.and_then(|v| {
            if self.state.lines == 0 {
                self.header_line(&v)
            } else {
                self.event_line(&v, out)
            }
        });
        self.state.lines += 1;
        self.state.plain_offset += len as u64 + 1;
        if let Err(why) = outcome {
            self.stop_at(number, offset, &why, out);
        }
        self.state.md_len += (out.len() - start) as u64;
    }

    /// Accounts for a line of `len` bytes (its `\n` included) too long to
    /// render: it is listed with its length and skipped.
    pub fn oversized_line(&mut self, len: u64, out: &mut Vec<u8>) {
        if self.state.stopped {
            return;
        }
        let start = out.len();
        let number = self.state.lines + 1;
        if self.state.lines == 0 {
            self.stop_at(number, 0, "the header line is too long", out);
        } else {
            self.begin(out);
            push(
                out,
                &format!(
                    "- line {number}: {len} bytes, not rendered (longer than the {MAX_RENDERED_LINE} bytes a line may have here); read it in session.jsonl at byte {}\n\n",
                    self.state.plain_offset
                ),
            );
        }
        self.state.lines += 1;
        self.state.plain_offset += len;
        self.state.md_len += (out.len() - start) as u64;
    }

    /// Stops the rendering at the current line because reading the view
    /// failed there (`why`: the store's error).
    pub fn stop_reading(&mut self, why: &str, out: &mut Vec<u8>) {
        if self.state.stopped {
            return;
        }
        let start = out.len();
        self.stop_at(self.state.lines + 1, self.state.plain_offset, why, out);
        self.state.md_len += (out.len() - start) as u64;
    }

    fn stop_at(&mut self, number: u64, offset: u64, why: &str, out: &mut Vec<u8>) {
        // The header facts (when the header line was read) say whose
        // rendering stopped.
        self.begin(out);
        self.close(out);
        push(
            out,
            &format!(
                "---\n\n**Rendering stopped** at line {number} (byte {offset} of session.jsonl): {}. \
                 What comes before is shown; nothing after it is rendered.\n",
                one_line(why)
            ),
        );
        self.state.stopped = true;
        self.state.open = None;
    }

    fn header_line(&mut self, v: &J) -> std::result::Result<(), String> {
        if str_of(v, "type") != Some("session") {
            return Err("the first line is not a session header".into());
        }
        let id = str_of(v, "id").ok_or("the header has no id")?;
        self.state.header = Some(HeaderFacts {
            id: id.to_string(),
            cwd: str_of(v, "cwd").map(str::to_string),
            created_at: v.get("createdAt").and_then(J::as_i64),
            parent: str_of(v, "parentSession").map(str::to_string),
            seed_length: u64_of(v, "seedLength"),
            origin: str_of(v, "origin").map(str::to_string),
            depth: u64_of(v, "delegationDepth"),
            preset: str_of(v, "agentPreset").map(str::to_string),
        });
        Ok(())
    }

    /// Writes the header block (once) and a pending turn heading.
    fn begin(&mut self, out: &mut Vec<u8>) {
        if !self.state.header_written {
            self.state.header_written = true;
            let h = self.state.header.take();
            let title = self.state.title.take().filter(|t| !t.is_empty());
            push(
                out,
                &format!("# {}\n\n", title.as_deref().unwrap_or("Untitled session")),
            );
            if let Some(h) = h {
                push(out, &format!("- **Session:** {}\n", code(&h.id)));
                let cwd = h.cwd.as_deref().map_or("*(none)*".into(), code);
                push(out, &format!("- **Project:** {cwd}\n"));
                if let Some(ms) = h.created_at {
                    push(
                        out,
                        &format!("- **Created:** {}\n", clock::date_time_zone(ms)),
                    );
                }
                if let Some(p) = &h.parent {
                    push(out, &format!("- **Parent session:** {}\n", code(p)));
                }
                if let Some(n) = h.seed_length {
                    push(
                        out,
                        &format!("- **Seed:** the first {n} events come from the parent session\n"),
                    );
                }
                let mut origin = Vec::new();
                if let Some(o) = &h.origin {
                    origin.push(one_line(o));
                }
                if let Some(d) = h.depth.filter(|&d| d > 0) {
                    origin.push(format!("delegation depth {d}"));
                }
                if let Some(p) = &h.preset {
                    origin.push(format!("agent preset {}", code(p)));
                }
                if !origin.is_empty() {
                    push(out, &format!("- **Origin:** {}\n", origin.join(", ")));
                }
                out.push(b'\n');
            }
        }
        if let Some((turn, time)) = self.state.pending_turn.take() {
            self.turn_heading(turn, time, out);
        }
    }

    fn turn_heading(&mut self, turn: u64, time: Option<i64>, out: &mut Vec<u8>) {
        match time {
            Some(ms) => push(
                out,
                &format!("## Turn {turn} · {}\n\n", clock::date_time(ms)),
            ),
            None => push(out, &format!("## Turn {turn}\n\n")),
        }
    }

    /// Ends the stream block being written, if any.
    fn close(&mut self, out: &mut Vec<u8>) {
        if self.state.open.take().is_some() {
            push(out, "\n\n");
        }
    }

    fn event_line(&mut self, v: &J, out: &mut Vec<u8>) -> std::result::Result<(), String> {
        if !v.is_object() {
            return Err("the line is not a JSON object".into());
        }
        let obj = v;
        let Some(ty) = obj.get("type").and_then(J::as_str) else {
            return Err("the line has no type".into());
        };
        match ty {
            "text-chunks" | "reasoning-chunks" | "tool-call-chunks" => self.chunk_row(ty, obj, out),
            _ => {
                self.event(ty, obj, out);
                Ok(())
            }
        }
    }

    /// A packed chunk row (the reference's `chunk-rows`): validated like the
    /// reference's decoder, then each member rendered as its delta.
    fn chunk_row(
        &mut self,
        ty: &str,
        row: &J,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let bad = || format!("malformed packed `{ty}` row");
        let data = row.get("data").ok_or_else(bad)?;
        row.get("seq0").and_then(J::as_u64).ok_or_else(bad)?;
        row.get("time0").and_then(J::as_i64).ok_or_else(bad)?;
        let (turn, step, index) = (
            u64_of(data, "turn").ok_or_else(bad)?,
            u64_of(data, "step").ok_or_else(bad)?,
            u64_of(data, "index").ok_or_else(bad)?,
        );
        let dt = data.get("dt").and_then(J::as_array).ok_or_else(bad)?;
        let key = if ty == "tool-call-chunks" {
            "args"
        } else {
            "texts"
        };
        let members = data.get(key).and_then(J::as_array).ok_or_else(bad)?;
        if members.len() != dt.len() + 1
            || !members.iter().all(J::is_string)
            || !dt.iter().all(J::is_integer)
        {
            return Err(bad());
        }
        if ty == "tool-call-chunks" {
            str_of(data, "id").ok_or_else(bad)?;
            return Ok(());
        }
        let kind = if ty == "text-chunks" {
            BlockKind::Text
        } else {
            BlockKind::Reasoning
        };
        for m in members {
            self.delta(kind, turn, step, index, m.as_str().unwrap_or_default(), out);
        }
        Ok(())
    }

    fn delta(
        &mut self,
        kind: BlockKind,
        turn: u64,
        step: u64,
        index: u64,
        text: &str,
        out: &mut Vec<u8>,
    ) {
        let block = OpenBlock {
            kind,
            turn,
            step,
            index,
        };
        if self.state.open != Some(block) {
            self.begin(out);
            self.close(out);
            push(
                out,
                match kind {
                    BlockKind::Text => "**Assistant:**\n\n",
                    BlockKind::Reasoning => "**Reasoning:**\n\n",
                },
            );
            self.state.open = Some(block);
            self.state.shown_step = Some((turn, step));
        }
        push(out, text);
    }

    fn event(&mut self, ty: &str, e: &J, out: &mut Vec<u8>) {
        let seq = e.get("seq").and_then(J::as_u64);
        let time = e.get("time").and_then(J::as_i64);
        let data = e.get("data").unwrap_or(&NULL);
        match ty {
            "turn/start" if !self.state.header_written && self.state.pending_turn.is_none() => {
                if let Some(turn) = u64_of(data, "turn") {
                    self.state.pending_turn = Some((turn, time));
                    return;
                }
            }
            "assistant/chunk" if !self.chunk_renders(data) => return,
            "step/end" => {
                self.close(out);
                return;
            }
            _ => {}
        }
        self.begin(out);
        if ty != "assistant/chunk" {
            self.close(out);
        }
        let mark = out.len();
        let shown = match ty {
            "turn/start" => u64_of(data, "turn").map(|t| self.turn_heading(t, time, out)),
            "step/start" => u64_of(data, "step").map(|s| push(out, &format!("### Step {s}\n\n"))),
            "user/message" => self.user_message(data, time, out),
            "assistant/chunk" => self.chunk(data, out),
            "assistant/message" => self.assistant_message(data, out),
            "tool/call" => tool_call(data, out),
            "tool/result" => tool_result(data, seq, out),
            "turn/end" => turn_end(data, time, out),
            "todo/write" => todo_write(data, out),
            "request/header" => request_header(data, out),
            "session/end-seed" => {
                push(
                    out,
                    "---\n\n*End of the seed: the events above come from the parent session.*\n\n",
                );
                Some(())
            }
            _ => None,
        };
        if shown.is_none() {
            out.truncate(mark);
            self.close(out);
            let seq = seq.map_or("no seq".to_string(), |s| format!("seq {s}"));
            let odd = if matches!(
                ty,
                "turn/start"
                    | "step/start"
                    | "user/message"
                    | "assistant/chunk"
                    | "assistant/message"
                    | "tool/call"
                    | "tool/result"
                    | "turn/end"
                    | "todo/write"
                    | "request/header"
            ) {
                " (unexpected shape)"
            } else {
                ""
            };
            push(out, &format!("- {} event, {seq}{odd}\n\n", code(ty)));
        }
    }

    /// Whether an `assistant/chunk` writes anything (deltas, whole blocks
    /// not streamed, failed finishes, unknown chunks).
    fn chunk_renders(&self, data: &J) -> bool {
        let Some(chunk) = data.get("chunk") else {
            return true;
        };
        match str_of(chunk, "type") {
            Some("block-start") | Some("usage") | Some("tool-call-delta") => false,
            Some("finish") => !matches!(
                chunk.get("reason").and_then(|r| str_of(r, "kind")),
                Some("stop") | Some("tool-calls")
            ),
            // A text or reasoning block is shown whole only when no delta of
            // it was streamed; the streamed block is closed either way.
            Some("block-end") => matches!(
                chunk.get("block").and_then(|b| str_of(b, "type")),
                Some("text") | Some("reasoning")
            ),
            _ => true,
        }
    }

    fn chunk(&mut self, data: &J, out: &mut Vec<u8>) -> Option<()> {
        let turn = u64_of(data, "turn")?;
        let step = u64_of(data, "step")?;
        let chunk = data.get("chunk")?;
        match str_of(chunk, "type")? {
            t @ ("text-delta" | "reasoning-delta") => {
                let kind = if t == "text-delta" {
                    BlockKind::Text
                } else {
                    BlockKind::Reasoning
                };
                let index = u64_of(chunk, "index")?;
                let text = str_of(chunk, "text")?;
                self.delta(kind, turn, step, index, text, out);
                Some(())
            }
            "block-end" => {
                let index = u64_of(chunk, "index")?;
                let block = chunk.get("block")?;
                let kind = match str_of(block, "type")? {
                    "text" => BlockKind::Text,
                    _ => BlockKind::Reasoning,
                };
                let open = OpenBlock {
                    kind,
                    turn,
                    step,
                    index,
                };
                if self.state.open == Some(open) {
                    self.close(out);
                } else {
                    let text = str_of(block, "text")?;
                    self.close(out);
                    self.delta(kind, turn, step, index, text, out);
                    self.close(out);
                }
                Some(())
            }
            "finish" => {
                self.close(out);
                let reason = chunk.get("reason")?;
                let kind = str_of(reason, "kind")?;
                let detail = reason
                    .get("failure")
                    .and_then(|f| str_of(f, "message"))
                    .map(|m| format!(": {}", one_line(m)))
                    .unwrap_or_default();
                push(
                    out,
                    &format!("*Model stopped: {}{detail}*\n\n", one_line(kind)),
                );
                Some(())
            }
            _ => None,
        }
    }

    fn user_message(&mut self, data: &J, time: Option<i64>, out: &mut Vec<u8>) -> Option<()> {
        let blocks = data.get("content")?.as_array()?;
        let source = data
            .get("source")
            .and_then(|s| str_of(s, "kind"))
            .unwrap_or("user");
        let when = time
            .map(|t| format!(" · {}", clock::clock(t)))
            .unwrap_or_default();
        if source == "user" {
            push(out, &format!("**User**{when}\n\n"));
        } else {
            push(out, &format!("**User** ({}){when}\n\n", one_line(source)));
        }
        content_blocks(blocks, out);
        Some(())
    }

    fn assistant_message(&mut self, data: &J, out: &mut Vec<u8>) -> Option<()> {
        let turn = u64_of(data, "turn")?;
        let step = u64_of(data, "step")?;
        let blocks = data.get("message")?.get("content")?.as_array()?;
        if self.state.shown_step != Some((turn, step)) {
            for block in blocks {
                let kind = match str_of(block, "type") {
                    Some("text") => BlockKind::Text,
                    Some("reasoning") => BlockKind::Reasoning,
                    _ => continue,
                };
                let text = str_of(block, "text").unwrap_or_default();
                self.delta(kind, turn, step, u64::MAX, text, out);
                self.close(out);
            }
        }
        if data.get("interrupted") == Some(&J::Bool(true)) {
            push(out, "*(interrupted)*\n\n");
        }
        Some(())
    }
}

#[cfg(test)]
mod tests;
