//! Unit tests of the line renderer: hand-written transcripts whose every
//! expected paragraph is spelled out here.

use super::*;

const HEADER: &str = r#"{"type":"session","version":0,"id":"s-1","createdAt":1767614400000,"cwd":"/w","parentSession":"p-0","seedLength":3}"#;

/// A renderer given the title of `lines` (the header first), as
/// [`render_range`] gives it: the first user message's, whatever comes
/// before it; none when there is no user message.
fn titled(lines: &[&str]) -> Renderer {
    let mut r = Renderer::new();
    if let Some(title) = lines[1..]
        .iter()
        .find_map(|l| crate::store::title::user_message_title(l.as_bytes()))
    {
        r.set_title(title);
    }
    r
}

/// Renders `lines` (the header first) in one go.
fn render(lines: &[&str]) -> String {
    let mut r = titled(lines);
    let mut out = Vec::new();
    for l in lines {
        r.line(l.as_bytes(), &mut out);
    }
    assert_eq!(r.state().md_len, out.len() as u64);
    String::from_utf8(out).unwrap()
}

#[test]
fn header_waits_for_the_first_user_message_and_titles_it() {
    let start = r#"{"type":"turn/start","seq":0,"time":1767614401000,"data":{"turn":1}}"#;
    assert_eq!(
        render(&[HEADER, start]),
        "",
        "nothing before the first message"
    );
    let user = r#"{"type":"user/message","seq":1,"time":1767614401000,"data":{"id":"m","role":"user","content":[{"type":"text","text":"Fix src/lib.rs now.\nPlease"}],"source":{"kind":"user"}}}"#;
    let md = render(&[HEADER, start, user]);
    assert!(
        md.starts_with(
            "# Fix src_lib.rs now. Please\n\n- **Session:** `s-1`\n- **Project:** `/w`\n"
        ),
        "{md}"
    );
    assert!(md.contains("- **Parent session:** `p-0`\n- **Seed:** the first 3 events come from the parent session\n"));
    assert!(md.contains("## Turn 1 · "), "{md}");
    assert!(md.ends_with("Fix src/lib.rs now.\nPlease\n\n"), "{md}");
    let other = r#"{"type":"x/y","seq":1}"#;
    let md = render(&[HEADER, start, other]);
    assert!(md.starts_with("# Untitled session\n"), "{md}");
    assert!(md.ends_with("- `x/y` event, seq 1\n\n"), "{md}");
}

#[test]
fn deltas_and_packed_rows_join_into_one_paragraph() {
    let lines = [
        HEADER,
        r#"{"type":"user/message","seq":0,"data":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"type":"assistant/chunk","seq":1,"data":{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}}"#,
        r#"{"type":"assistant/chunk","seq":2,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Hel"}}}"#,
        r#"{"type":"text-chunks","seq0":3,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["lo, ","wor"]}}"#,
        r#"{"type":"assistant/chunk","seq":5,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"ld."}}}"#,
        r#"{"type":"assistant/chunk","seq":6,"data":{"turn":1,"step":1,"chunk":{"type":"block-end","index":0,"block":{"type":"text","text":"Hello, world."}}}}"#,
        r#"{"type":"assistant/message","seq":7,"data":{"turn":1,"step":1,"message":{"content":[{"type":"text","text":"Hello, world."}]}}}"#,
    ];
    let md = render(&lines);
    assert!(md.contains("**Assistant:**\n\nHello, world.\n\n"), "{md}");
    assert_eq!(md.matches("Hello, world.").count(), 1, "shown once: {md}");
}

#[test]
fn a_step_without_stream_is_shown_from_its_message() {
    let lines = [
        HEADER,
        r#"{"type":"user/message","seq":0,"data":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"type":"assistant/message","seq":1,"data":{"turn":1,"step":1,"message":{"content":[{"type":"reasoning","text":"think"},{"type":"text","text":"answer"}]},"interrupted":true}}"#,
    ];
    let md = render(&lines);
    assert!(
        md.ends_with("**Reasoning:**\n\nthink\n\n**Assistant:**\n\nanswer\n\n*(interrupted)*\n\n"),
        "{md}"
    );
}

#[test]
fn long_tool_results_are_shortened_with_a_note() {
    let text: String = (1..=100).map(|i| format!("line {i}\\n")).collect();
    let result = format!(
        r#"{{"type":"tool/result","seq":2,"data":{{"turn":1,"step":1,"message":{{"content":[{{"type":"tool-result","toolCallId":"c1","content":[{{"type":"text","text":"{text}"}}],"isError":true}}]}}}}}}"#
    );
    let lines = [
        HEADER,
        r#"{"type":"user/message","seq":0,"data":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"type":"tool/call","seq":1,"data":{"turn":1,"step":1,"callId":"c1","name":"bash","arguments":"{\"command\":\"x ``` y\"}"}}"#,
        &result,
    ];
    let md = render(&lines);
    assert!(
        md.contains("**Tool call** `bash` · `c1`\n\n````json\n{\"command\":\"x ``` y\"}\n````\n\n"),
        "{md}"
    );
    assert!(
        md.contains("**Tool result** `c1` — error\n\n```\nline 1\n"),
        "{md}"
    );
    assert!(md.contains("line 40\n```\n\n*… 60 more lines ("), "{md}");
    assert!(!md.contains("line 41\n"));
}

#[test]
fn damage_stops_the_rendering_for_good() {
    let lines = [
        HEADER,
        r#"{"type":"user/message","seq":0,"data":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"type":"turn/end","seq":1,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"boom","code":"X"}}}}"#,
        r#"{"type":"text-chunks","seq0":2,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a","b"]}}"#,
        r#"{"type":"user/message","seq":3,"data":{"content":[{"type":"text","text":"after"}]}}"#,
    ];
    let md = render(&lines);
    assert!(md.contains("**Turn 1 ended:** error (X: boom)\n\n"), "{md}");
    let offset: usize = lines[..3].iter().map(|l| l.len() + 1).sum();
    assert!(
        md.contains(&format!(
            "**Rendering stopped** at line 4 (byte {offset} of session.jsonl): malformed packed `text-chunks` row."
        )),
        "{md}"
    );
    assert!(!md.contains("\n\nafter\n"), "{md}");
    let md = render(&[HEADER, "{not json"]);
    assert!(md.contains("at line 2 (byte "), "{md}");
    assert!(
        md.starts_with("# Untitled session\n\n- **Session:** `s-1`"),
        "{md}"
    );
}

#[test]
fn continuing_from_a_saved_state_equals_rendering_at_once() {
    let lines = [
        HEADER,
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"user/message","seq":1,"data":{"content":[{"type":"text","text":"hi"}]}}"#,
        r#"{"type":"reasoning-chunks","seq0":2,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#,
        r#"{"type":"assistant/chunk","seq":4,"data":{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"c"}}}"#,
        r#"{"type":"todo/write","seq":5,"data":{"todos":[{"content":"x","status":"completed"}]}}"#,
    ];
    let whole = render(&lines);
    for cut in 0..lines.len() {
        let mut r = titled(&lines);
        let mut out = Vec::new();
        for l in &lines[..cut] {
            r.line(l.as_bytes(), &mut out);
        }
        let saved = serde_json::to_vec(r.state()).unwrap();
        let mut r = Renderer::from_state(serde_json::from_slice(&saved).unwrap());
        for l in &lines[cut..] {
            r.line(l.as_bytes(), &mut out);
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            whole,
            "cut after {cut} lines"
        );
    }
    assert!(
        whole.contains("**Reasoning:**\n\nabc\n\n**Todo list:**\n\n- [x] x\n"),
        "{whole}"
    );
}

#[test]
fn events_before_the_first_user_message_follow_the_title_given() {
    let lines = [
        HEADER,
        r#"{"type":"session/start","seq":0,"time":1767614400500,"data":{}}"#,
        r#"{"type":"user/message","seq":1,"time":1767614401000,"data":{"content":[{"type":"text","text":"Late title."}]}}"#,
    ];
    let md = render(&lines);
    assert!(
        md.starts_with("# Late title\n\n- **Session:** `s-1`"),
        "{md}"
    );
    assert!(
        md.contains("- `session/start` event, seq 0\n\n**User**"),
        "{md}"
    );
}

/// A line nested deeper than serde_json goes (the reference reads any
/// depth) is rendered from its top-level members, and what follows it is
/// rendered too.
#[test]
fn a_line_nested_deeper_than_serde_json_goes_does_not_stop_the_rendering() {
    let start = r#"{"type":"turn/start","seq":0,"time":1767614401000,"data":{"turn":1}}"#;
    let user = r#"{"type":"user/message","seq":1,"time":1767614401000,"data":{"id":"m","role":"user","content":[{"type":"text","text":"Hello"}],"source":{"kind":"user"}}}"#;
    let deep = format!(
        r#"{{"type":"x-deep","seq":2,"time":1767614402000,"ignorable":true,"data":{{"d":{}1{}}}}}"#,
        "[".repeat(3000),
        "]".repeat(3000)
    );
    let after = r#"{"type":"x/after","seq":3}"#;
    let md = render(&[HEADER, start, user, &deep, after]);
    assert!(!md.contains("Rendering stopped"), "{md}");
    assert!(md.contains("`x-deep` event, seq 2"), "{md}");
    assert!(md.ends_with("- `x/after` event, seq 3\n\n"), "{md}");
}

/// A lone surrogate escape (accepted on write, as `JSON.parse` accepts
/// it) is shown as U+FFFD; the title and the lines after it render (a
/// fresh tester's session.md stopped at it, with an empty title).
#[test]
fn a_lone_surrogate_is_shown_as_a_replacement_character() {
    let start = r#"{"type":"turn/start","seq":0,"time":1767614401000,"data":{"turn":1}}"#;
    let user = r#"{"type":"user/message","seq":1,"time":1767614401000,"data":{"id":"m","role":"user","content":[{"type":"text","text":"Broken \ud83d emoji"}],"source":{"kind":"user"}}}"#;
    let after = r#"{"type":"x/after","seq":2}"#;
    let md = render(&[HEADER, start, user, after]);
    assert!(md.starts_with("# Broken \u{FFFD} emoji\n"), "{md}");
    assert!(!md.contains("Rendering stopped"), "{md}");
    assert!(md.contains("Broken \u{FFFD} emoji\n\n"), "{md}");
    assert!(md.ends_with("- `x/after` event, seq 2\n\n"), "{md}");
}

/// Bytes that are not UTF-8 inside a string (not written by the
/// reference, which encodes its strings; a damaged or foreign file can
/// hold them) are shown as U+FFFD, one per maximal invalid sequence, as
/// the reference's `TextDecoder` reads the file (the oracle loads such a
/// session whole); the lines after them render. Until now the rendering
/// stopped there ("invalid unicode code point").
#[test]
fn bytes_that_are_not_utf8_are_shown_as_replacement_characters() {
    let user = b"{\"type\":\"user/message\",\"seq\":0,\"data\":{\"content\":[{\"type\":\"text\",\"text\":\"caf\xff\xfe \xe2\x82 end\"}]}}";
    let after = br#"{"type":"x/after","seq":1}"#;
    let mut r = Renderer::new();
    let mut out = Vec::new();
    for l in [HEADER.as_bytes(), &user[..], &after[..]] {
        r.line(l, &mut out);
    }
    let md = String::from_utf8(out).unwrap();
    assert!(!md.contains("Rendering stopped"), "{md}");
    assert!(md.contains("caf\u{FFFD}\u{FFFD} \u{FFFD} end\n\n"), "{md}");
    assert!(md.ends_with("- `x/after` event, seq 1\n\n"), "{md}");
}

/// A `seq` written as `1.04e2` or `104.0` (accepted on write: JavaScript
/// reads it as 104) is shown as seq 104.
#[test]
fn a_seq_written_with_an_exponent_is_shown_as_its_number() {
    let user =
        r#"{"type":"user/message","seq":0,"data":{"content":[{"type":"text","text":"hi"}]}}"#;
    let a = r#"{"type":"x/a","seq":1.04e2}"#;
    let b = r#"{"type":"x/b","seq":105.0}"#;
    let c = r#"{"type":"x/c","seq":1.5}"#;
    let md = render(&[HEADER, user, a, b, c]);
    assert!(md.contains("- `x/a` event, seq 104\n"), "{md}");
    assert!(md.contains("- `x/b` event, seq 105\n"), "{md}");
    assert!(md.contains("- `x/c` event, no seq\n"), "{md}");
}

/// Control characters of a transcript's text reach session.md visible, not
/// as bytes a terminal would act on.
#[test]
fn control_characters_are_shown_not_sent() {
    let start = r#"{"type":"turn/start","seq":0,"time":1767614401000,"data":{"turn":1}}"#;
    let user = r#"{"type":"user/message","seq":1,"time":1767614401000,"data":{"id":"m","role":"user","content":[{"type":"text","text":"esc \u001b[31mRED\u001b[0m nul \u0000 bell \u0007 del \u007f csi \u009b crlf a\r\nb"}],"source":{"kind":"user"}}}"#;
    let md = render(&[HEADER, start, user]);
    assert!(
        !md.bytes()
            .any(|b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f),
        "{md:?}"
    );
    assert!(!md.contains('\u{9b}'), "{md:?}");
    assert!(
        md.contains("esc \u{241b}[31mRED\u{241b}[0m nul \u{2400} bell \u{2407} del \u{2421} csi \u{fffd} crlf a\nb"),
        "{md:?}"
    );
}

#[test]
fn cut_deep_empties_containers_below_the_kept_levels_only() {
    use super::cut_deep;
    let line = br#"{"a":[["[{\"]",{"b":[1]}]],"c":{"d":{}}}"#;
    assert_eq!(cut_deep(line, 8), line.to_vec());
    assert_eq!(
        String::from_utf8(cut_deep(line, 2)).unwrap(),
        r#"{"a":[[]],"c":{"d":{}}}"#
    );
    assert_eq!(cut_deep(line, 1), br#"{"a":[],"c":{}}"#.to_vec());
    // The text of a string holding brackets is kept whole.
    assert_eq!(
        String::from_utf8(cut_deep(br#"{"t":"]]}{","x":[[[]]]}"#, 2)).unwrap(),
        r#"{"t":"]]}{","x":[[]]}"#
    );
}
