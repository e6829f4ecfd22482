//! Reading a transcript's view for the renderer: whole lines out of
//! 512 KiB reads (halved near damage so that every line before it is
//! rendered), oversized lines skipped, and the second half of each read's
//! lines parsed on another thread while the first half is rendered.

use std::io;

use super::super::error::{Result, StoreError};
use super::super::long_lines::{LongLine, LONG_LINE_BYTES};
use super::super::title::{scan_title, TitleScan};
use super::super::transcript::Transcript;
use super::json::J;
use super::{Renderer, MAX_RENDERED_LINE};

/// Bytes of the transcript view read at once while rendering: less than
/// the read-ahead decodes (16 frames, 2 MiB), so that the next read finds
/// its frames decoded on the other core.
const READ_CHUNK: u32 = 512 << 10;

/// A line parsed for [`Renderer::parsed_line`], or why it cannot be.
pub type ParsedLine<'a> = std::result::Result<J<'a>, String>;

/// Parses one line (without its `\n`) for [`Renderer::parsed_line`].
/// Lines the reference reads (its `TextDecoder`, then `JSON.parse`) and
/// serde_json refuses:
///
/// - one holding a lone surrogate escape is read with each shown as
///   U+FFFD ([`super::super::json::lone_surrogates_replaced`]);
/// - one nested deeper than serde_json goes (128 levels) is checked by the
///   store's iterative scanner ([`super::super::json::parse_object`]),
///   then read with every container deeper than [`KEPT_LEVELS`] levels
///   shown empty ([`cut_deep`]): a message's text is read whatever a
///   member beside it holds.
///
/// - one holding bytes that are not UTF-8 is read with each maximal
///   invalid sequence shown as U+FFFD, as the reference's `TextDecoder`
///   decodes the file (`String::from_utf8_lossy` follows the same rule);
///
/// The rendering goes on after any of these.
pub fn parse_line(line: &[u8]) -> ParsedLine<'_> {
    J::parse(line).or_else(|e| {
        let first = e.to_string();
        let decoded: Option<Vec<u8>> = std::str::from_utf8(line)
            .is_err()
            .then(|| String::from_utf8_lossy(line).into_owned().into_bytes());
        let text = decoded.as_deref().unwrap_or(line);
        let fixed = super::super::json::lone_surrogates_replaced(text).or(decoded);
        // The error that settles it: the fixed line's, when there is one.
        let last = match &fixed {
            Some(f) => match serde_json::from_slice::<serde_json::Value>(f) {
                Ok(v) => return Ok(J::from_value(v)),
                Err(e) => e.to_string(),
            },
            None => first.clone(),
        };
        if !last.starts_with("recursion limit exceeded") {
            return Err(format!("the line is not valid JSON ({first})"));
        }
        // Checked as `JSON.parse` reads it, without recursion, then read
        // with its deep containers cut.
        if let Err(e) = super::super::json::parse_object(line, super::super::json::Utf8::Replace) {
            return Err(format!("the line is {e}"));
        }
        let cut = cut_deep(fixed.as_deref().unwrap_or(line), KEPT_LEVELS);
        serde_json::from_slice::<serde_json::Value>(&cut)
            .map(J::from_value)
            .map_err(|e| format!("the line is not valid JSON ({e})"))
    })
}

/// Levels of a line nested deeper than serde_json goes that are read (the
/// line's object is level 1); deeper containers are shown empty. Below
/// serde_json's limit of 128, so that reading, converting and dropping the
/// value recurse at most this many times whatever the line holds.
pub const KEPT_LEVELS: usize = 64;

/// `line` (JSON text the store's scanner accepted) with every container
/// that opens deeper than `levels` levels replaced by an empty one of its
/// kind (`[]` or `{}`). Iterative: one pass over the bytes, no stack; the
/// result is at most as long as `line`.
pub fn cut_deep(line: &[u8], levels: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut depth = 0usize;
    // Depth at which the container being skipped opened (0: none).
    let mut skip_from = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in line {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            if skip_from == 0 {
                out.push(b);
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if skip_from == 0 && depth > levels {
                    skip_from = depth;
                    out.extend_from_slice(if b == b'{' { b"{}" } else { b"[]" });
                }
            }
            b'}' | b']' => {
                if skip_from == depth {
                    skip_from = 0;
                    depth -= 1;
                    continue;
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        if skip_from == 0 {
            out.push(b);
        }
    }
    out
}

/// Lines of a chunk parsed on a second thread when the chunk holds more
/// than this many bytes of them.
const PARALLEL_PARSE_BYTES: usize = 64 * 1024;

/// The lines of `part` (each ended by `\n`), without their `\n`.
fn lines_of(part: &[u8]) -> Vec<&[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', part)
        .map(|nl| {
            let line = &part[start..nl];
            start = nl + 1;
            line
        })
        .collect()
}

/// Renders the complete lines of `region` (each ended by `\n`): the
/// second half is parsed on another thread while the first is rendered.
fn render_lines(renderer: &mut Renderer, region: &[u8], out: &mut Vec<u8>) {
    let split = if region.len() > PARALLEL_PARSE_BYTES {
        memchr_nl(&region[region.len() / 2..]).map_or(region.len(), |i| region.len() / 2 + i + 1)
    } else {
        region.len()
    };
    let (first, second) = region.split_at(split);
    let each = lines_of;
    if second.is_empty() {
        for line in each(first) {
            renderer.line(line, out);
        }
        return;
    }
    std::thread::scope(|scope| {
        let parsed = scope.spawn(|| {
            each(second)
                .into_iter()
                .map(|l| (l.len(), parse_line(l)))
                .collect::<Vec<_>>()
        });
        for line in each(first) {
            renderer.line(line, out);
        }
        match parsed.join() {
            Ok(parsed) => {
                for (len, p) in parsed {
                    renderer.parsed_line(len, p, out);
                }
            }
            Err(_) => {
                for line in each(second) {
                    renderer.line(line, out);
                }
            }
        }
    });
}

/// Renders the lines of `t`'s view from where `renderer` stands up to view
/// offset `to` (a line boundary), handing the Markdown to `sink` piece by
/// piece (about one read chunk at a time: memory stays bounded). A frame
/// that fails to decode stops the rendering (the stop is rendered). A
/// line longer than [`MAX_RENDERED_LINE`] is read over, never held; one
/// longer than [`LONG_LINE_BYTES`] (512 KiB) is held only with one of the
/// process's [`LONG_LINES_AT_ONCE`](super::super::long_lines::LONG_LINES_AT_ONCE) permits, which this call may wait for
/// (until another rendering is done with its long line).
///
/// While the renderer needs the title ([`Renderer::needs_title`]), the
/// view up to `to` is first searched for it ([`scan_title`], from where an
/// earlier search stopped): when the transcript holds no user message yet,
/// nothing is rendered (the renderer only records how far it looked);
/// damage before the first user message settles the empty title, and the
/// rendering then stops at the damage.
///
/// Errors: [`StoreError::Io`] reading the transcript (the renderer is left
/// at the last whole line rendered); the sink's errors as
/// [`StoreError::Io`] on `t`'s path.
pub fn render_range(
    t: &Transcript,
    renderer: &mut Renderer,
    to: u64,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<()> {
    if renderer.needs_title() {
        match scan_title(t, renderer.state().title_checked, to) {
            Ok(TitleScan::Found(title)) => renderer.set_title(title),
            Ok(TitleScan::NotYet { checked }) => {
                renderer.title_checked(checked);
                return Ok(());
            }
            // Rendered up to the damage, which stops it.
            Err(e) if e.is_damage() => renderer.set_title(String::new()),
            Err(e) => return Err(e),
        }
    }
    let mut out = Vec::new();
    let mut carry: Vec<u8> = Vec::new();
    // Held while `carry` is longer than a read chunk (see [`LongLine`]).
    let mut permit: Option<LongLine> = None;
    // Bytes of an oversized line skipped so far (0: none).
    let mut skipping: u64 = 0;
    let mut at = renderer.state().plain_offset;
    let sink_err = |e: io::Error| StoreError::io("write the rendering of", t.path(), e);
    // Halved while reads fail at damage, so that every line before the
    // damage is rendered.
    let mut chunk_size = READ_CHUNK;
    while at < to && !renderer.state().stopped {
        let size = (to - at).min(u64::from(chunk_size)) as u32;
        let chunk = match t.read(at, size) {
            Ok(c) => c,
            Err(e) if e.is_damage() && chunk_size > 1 => {
                chunk_size /= 2;
                continue;
            }
            Err(e) if e.is_damage() => {
                renderer.stop_reading(&e.to_string(), &mut out);
                break;
            }
            Err(e) => {
                sink(&out).map_err(sink_err)?;
                return Err(e);
            }
        };
        if chunk.is_empty() {
            break;
        }
        at += chunk.len() as u64;
        let mut rest = chunk.as_slice();
        // A line begun in an earlier chunk is finished first ...
        if skipping > 0 || !carry.is_empty() {
            if let Some(nl) = memchr_nl(rest) {
                if skipping > 0 {
                    renderer.oversized_line(skipping + nl as u64 + 1, &mut out);
                    skipping = 0;
                } else if carry.len() + nl > MAX_RENDERED_LINE {
                    renderer.oversized_line((carry.len() + nl + 1) as u64, &mut out);
                } else {
                    if carry.len() + nl > LONG_LINE_BYTES && permit.is_none() {
                        permit = Some(LongLine::take());
                    }
                    carry.extend_from_slice(&rest[..nl]);
                    renderer.line(&carry, &mut out);
                }
                // The line's memory goes before its permit does.
                carry = Vec::new();
                rest = &rest[nl + 1..];
            }
        }
        // ... then the lines wholly inside this chunk, together.
        if skipping == 0 && carry.is_empty() {
            if let Some(last) = memchr::memrchr(b'\n', rest) {
                render_lines(renderer, &rest[..=last], &mut out);
                rest = &rest[last + 1..];
            }
        }
        if skipping > 0 {
            skipping += rest.len() as u64;
        } else if carry.len() + rest.len() > MAX_RENDERED_LINE {
            // Streamed over from here on: never held whole.
            skipping = (carry.len() + rest.len()) as u64;
            carry = Vec::new();
        } else {
            if carry.len() + rest.len() > LONG_LINE_BYTES && permit.is_none() {
                permit = Some(LongLine::take());
            }
            carry.extend_from_slice(rest);
        }
        if !out.is_empty() {
            sink(&out).map_err(sink_err)?;
            out.clear();
        }
        if out.capacity() > 2 * READ_CHUNK as usize {
            // The Markdown of a long line is not kept past its permit.
            out = Vec::new();
        }
        if carry.len() <= LONG_LINE_BYTES {
            permit = None;
        }
    }
    drop(permit);
    sink(&out).map_err(sink_err)
}

fn memchr_nl(s: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', s)
}
