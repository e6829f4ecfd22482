//! sessionfs reads a line's JSON exactly as the reference does.
//!
//! A property test over generated lines (objects with every escape form,
//! non-BMP characters, lone surrogate escapes, big, negative and
//! fractional numbers in every spelling, duplicate keys, nesting up to
//! 100,000 deep; near-JSON that is not JSON; JSON values that are not
//! objects; now and then a byte sequence that is not UTF-8): all lines go
//! into one transcript of a raw store, the
//! reference reads it once (`readRaw` through the oracle, then
//! `JSON.parse` of each line, as its scanner does), and for every line
//! sessionfs must accept it as an object exactly when the reference does,
//! and read the same `type` and `seq`. Event-line validation
//! (`parse_record`) must then accept exactly the objects whose `type` is a
//! string and whose `seq` is a non-negative safe integer, with that `seq`;
//! a line that is not UTF-8 is read with replacement, as the reference
//! reads a file, and always refused for writing.
//!
//! The oracle is the one `.ci/run` installs (`SESSIONFS_ORACLE_DIR`, default
//! `/tmp/sessionfs-oracle`); the test fails, never skips, without it.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::Value;

use sessionfs::store::json::{parse_object, Utf8};
use sessionfs::store::lines::{
    parse_record, read_record, Record, MAX_LOADABLE_DEPTH, MAX_SAFE_INTEGER,
};
use sessionfs::store::naming::{encode_id, project_dir_name};

mod common;

use common::oracle;

/// Lines generated per run (the issue asks for at least 2,000).
const LINES: usize = 2_400;

// ---------------------------------------------------------------------------
// Generators: JSON text spelled in every way JSON.parse reads
// ---------------------------------------------------------------------------

fn ws() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(String::new()),
        1 => prop::sample::select(vec![" ", "\t", "\r", "  \t\r "]).prop_map(str::to_string),
    ]
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..3000).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (-1e300f64..1e300).prop_map(|f| format!("{f:e}")),
        (-1e6f64..1e6).prop_map(|f| format!("{f}")),
        (0u64..100, 0u32..20, any::<bool>()).prop_map(|(n, z, up)| format!(
            "{n}.{}{}",
            "0".repeat(z as usize),
            if up { "E+0" } else { "e-0" }
        )),
        prop::sample::select(vec![
            "1.0",
            "1e0",
            "1E0",
            "10E-1",
            "0.1e1",
            "100e-2",
            "-0",
            "-0.0",
            "0e5",
            "-0e-5",
            "9007199254740991",
            "9007199254740992",
            "9007199254740993",
            "9007199254740991.0",
            "-9007199254740991",
            "18446744073709551616",
            "1e400",
            "-1e400",
            "1e-400",
            "123456789012345678901234567890",
            "4.9e-324",
            "2.5",
            "0.5",
            "1E+2",
            "5e-1",
        ])
        .prop_map(str::to_string),
    ]
}

/// One piece of a JSON string's body.
fn string_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9 ]{0,6}",
        1 => any::<char>()
            .prop_filter("raw-allowed", |c| *c >= ' ' && *c != '"' && *c != '\\')
            .prop_map(|c| c.to_string()),
        1 => prop::sample::select(vec!["\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"])
            .prop_map(str::to_string),
        1 => (any::<u16>(), any::<bool>()).prop_map(|(u, up)| if up {
            format!("\\u{u:04X}")
        } else {
            format!("\\u{u:04x}")
        }),
        1 => (0xD800u16..0xE000).prop_map(|u| format!("\\u{u:04x}")),
        1 => (0x10000u32..0x110000).prop_map(|c| {
            let c = c - 0x10000;
            format!("\\u{:04x}\\u{:04X}", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF))
        }),
        1 => prop::sample::select(vec!["😀", "𝄞", "\u{10FFFF}", "\u{2028}", "\u{7f}", "é"])
            .prop_map(str::to_string),
    ]
}

fn string() -> impl Strategy<Value = String> {
    prop::collection::vec(string_piece(), 0..5).prop_map(|p| format!("\"{}\"", p.concat()))
}

/// A key: often one sessionfs reads, sometimes spelled with escapes.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "\"type\"", "\"seq\"", "\"seq0\"", "\"id\"", "\"cwd\"", "\"data\"",
            "\"\\u0073eq\"", "\"s\\u0065q\"", "\"\\u0074ype\"", "\"__proto__\"", "\"constructor\"",
        ])
        .prop_map(str::to_string),
        1 => string(),
    ]
}

/// A value nested `depth` levels deep (arrays and objects mixed), built
/// without recursion.
fn deep() -> impl Strategy<Value = String> {
    (
        prop_oneof![1usize..100, 100usize..5_000, 5_000usize..=100_000],
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(depth, mut pattern, broken)| {
            let mut open = String::new();
            let mut close = Vec::with_capacity(depth);
            for _ in 0..depth {
                pattern ^= pattern << 13;
                pattern ^= pattern >> 7;
                pattern ^= pattern << 17;
                if pattern & 3 == 0 {
                    open.push_str("{\"k\":");
                    close.push('}');
                } else {
                    open.push('[');
                    close.push(']');
                }
            }
            open.push_str("\"x\"");
            if broken {
                // One closer wrong or missing somewhere: not JSON.
                let at = (pattern as usize) % close.len();
                if pattern & 4 == 0 {
                    close.remove(at);
                } else {
                    close[at] = if close[at] == ']' { '}' } else { ']' };
                }
            }
            open.extend(close.iter().rev());
            open
        })
}

fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        number(),
        string(),
        prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_string),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec((ws(), inner.clone()), 0..5).prop_map(|items| {
                let items: Vec<String> =
                    items.into_iter().map(|(w, v)| format!("{w}{v}")).collect();
                format!("[{}]", items.join(","))
            }),
            prop::collection::vec((key(), ws(), inner), 0..5).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(k, w, v)| format!("{k}:{w}{v}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// A member's value: `seq`-like numbers and `type`-like strings often.
fn member_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => number(),
        2 => string(),
        1 => prop::sample::select(vec!["\"log\"", "\"session\"", "\"text-chunks\"", "\"5\"", "null", "true"])
            .prop_map(str::to_string),
        2 => value(),
        1 => deep(),
    ]
}

fn object() -> impl Strategy<Value = String> {
    (
        prop::collection::vec((ws(), key(), ws(), ws(), member_value(), ws()), 0..7),
        ws(),
        ws(),
    )
        .prop_map(|(members, before, after)| {
            let members: Vec<String> = members
                .into_iter()
                .map(|(a, k, b, c, v, d)| format!("{a}{k}{b}:{c}{v}{d}"))
                .collect();
            format!("{before}{{{}}}{after}", members.join(","))
        })
}

/// An event-like object: a `type` string, a `seq`, a `time` and a `data`
/// among other members (duplicates of any possible), in any order.
fn event_like() -> impl Strategy<Value = String> {
    (
        (string(), number(), number(), member_value()),
        prop::collection::vec((key(), member_value()), 0..4),
        any::<u64>(),
        ws(),
    )
        .prop_map(|((ty, seq, time, data), rest, order, w)| {
            let mut members = vec![
                format!("\"type\":{w}{ty}"),
                format!("\"seq\"{w}:{seq}"),
                format!("\"time\":{time}"),
                format!("\"data\":{w}{data}"),
            ];
            for (k, v) in rest {
                members.push(format!("{k}:{v}"));
            }
            let n = members.len();
            members.rotate_left((order as usize) % n);
            format!("{{{}}}", members.join(","))
        })
}

/// A valid line, mutated into near-JSON (mostly not JSON any more).
fn near_json() -> impl Strategy<Value = String> {
    (
        object(),
        any::<u64>(),
        0u8..9,
        prop::sample::select(vec![
            ",", ":", "]", "}", "[", "{", "\"", "\\", "\t", "\u{1}", "x", "0", "-", ".", "e",
            "\u{feff}", "\u{a0}",
        ]),
    )
        .prop_map(|(line, at, how, piece)| {
            let chars: Vec<char> = line.chars().collect();
            let i = (at as usize) % (chars.len() + 1);
            let (head, tail): (String, String) =
                (chars[..i].iter().collect(), chars[i..].iter().collect());
            match how {
                0 => format!("{head}{}", tail.chars().skip(1).collect::<String>()),
                1 | 2 => format!("{head}{piece}{tail}"),
                3 => head,
                4 => format!("{line},"),
                5 => format!("\u{feff}{line}"),
                6 => format!("[{line}]"),
                7 => format!("{line} {{}}"),
                _ => format!("{head}{piece}{}", tail.chars().skip(1).collect::<String>()),
            }
        })
}

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => object(),
        3 => event_like(),
        3 => near_json(),
        1 => value(),
        1 => deep(),
    ]
}

/// A line as bytes: mostly a generated line, sometimes with a byte
/// sequence that is not UTF-8 put somewhere in it (read as the reference
/// reads a file: with U+FFFD replacement; refused for writing).
fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => line().prop_map(String::into_bytes),
        1 => (
            line(),
            any::<u64>(),
            prop::sample::select(vec![
                &b"\xff"[..], b"\xc0\xaf", b"\x80", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xfe",
            ]),
        )
            .prop_map(|(line, at, bad)| {
                let mut bytes = line.into_bytes();
                let at = (at as usize) % (bytes.len() + 1);
                bytes.splice(at..at, bad.iter().copied());
                bytes
            }),
    ]
}

// ---------------------------------------------------------------------------
// What each side reads
// ---------------------------------------------------------------------------

/// What one line is, as the oracle script reports it.
#[derive(Debug, Clone, PartialEq)]
struct Reading {
    object: bool,
    r#type: Option<String>,
    /// `typeof seq`, or `number:<f64 bits>`; None when not an object.
    seq: Option<String>,
    /// Whether its envelope passes the reference's load (the oracle's
    /// reading only; sessionfs's own is `parse_record`).
    envelope: bool,
}

/// What sessionfs reads, in the oracle script's terms.
fn sessionfs_reading(line: &[u8]) -> Reading {
    let Ok(map) = parse_object(line, Utf8::Replace) else {
        return Reading {
            object: false,
            r#type: None,
            seq: None,
            envelope: false,
        };
    };
    let seq = match map.get("seq") {
        None => "undefined".to_string(),
        Some(Value::Null | Value::Array(_) | Value::Object(_)) => "object".into(),
        Some(Value::Bool(_)) => "boolean".into(),
        Some(Value::String(_)) => "string".into(),
        Some(Value::Number(n)) => {
            let f = n.as_f64().expect("a number");
            // The json module keeps ±Infinity as ±f64::MAX (its doc).
            let f = if f.abs() == f64::MAX {
                f.signum() * f64::INFINITY
            } else {
                f
            };
            format!("number:{:016x}", f.to_bits())
        }
    };
    Reading {
        object: true,
        r#type: map.get("type").and_then(Value::as_str).map(str::to_string),
        seq: Some(seq),
        envelope: false,
    }
}

fn oracle_readings(root: &Path, id: &str) -> Vec<Reading> {
    let out = oracle::script(
        "read_lines.mjs",
        [root.as_os_str(), std::ffi::OsStr::new(id)],
    );
    let report: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    report
        .into_iter()
        .map(|r| Reading {
            object: r["object"].as_bool().expect("object"),
            r#type: r["type"].as_str().map(str::to_string),
            seq: r["seq"].as_str().map(str::to_string),
            envelope: r["envelope"] == true,
        })
        .collect()
}

fn shown(line: &[u8]) -> String {
    let line = String::from_utf8_lossy(line);
    if line.len() > 300 {
        let mut end = 300;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… ({} bytes)", &line[..end], line.len())
    } else {
        line.to_string()
    }
}

#[test]
fn sessionfs_reads_lines_as_the_reference_does() {
    let mut runner = TestRunner::default();
    let strategy = line_bytes();
    let lines: Vec<Vec<u8>> = (0..LINES)
        .map(|_| strategy.new_tree(&mut runner).expect("a line").current())
        .collect();
    assert!(lines.iter().all(|l| !l.contains(&b'\n')));
    let deepest = lines
        .iter()
        .map(|l| l.iter().filter(|&&b| b == b'[' || b == b'{').count())
        .max();
    assert!(deepest.unwrap_or(0) > 5_000, "the run holds deep lines");

    // One raw store, one transcript: the header, then every generated line.
    let tmp = tempfile::tempdir().unwrap();
    let id = "json-oracle-property";
    let session = tmp
        .path()
        .join(project_dir_name(Some("/p")).unwrap())
        .join(encode_id(id).unwrap());
    fs::create_dir_all(&session).unwrap();
    let mut text = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1,\"cwd\":\"/p\",\"delegationDepth\":0}}\n"
    )
    .into_bytes();
    for l in &lines {
        text.extend_from_slice(l);
        text.push(b'\n');
    }
    fs::write(session.join("session.jsonl"), &text).unwrap();

    let oracle = oracle_readings(tmp.path(), id);
    assert_eq!(oracle.len(), lines.len(), "the oracle read every line");
    let mut failures = String::new();
    let mut objects = 0;
    let mut events = 0;
    let mut written = 0;
    for (i, (line, want)) in lines.iter().zip(&oracle).enumerate() {
        let got = sessionfs_reading(line);
        if (got.object, &got.r#type, &got.seq) != (want.object, &want.r#type, &want.seq) {
            writeln!(
                failures,
                "line {}: {}\n  reference {want:?}\n  sessionfs {got:?}",
                i + 1,
                shown(line)
            )
            .unwrap();
            continue;
        }
        objects += usize::from(got.object);
        // Event-line validation on top: a string type (not a header or a
        // packed row) and a non-negative safe integer seq, read the same.
        let special = matches!(
            got.r#type.as_deref(),
            Some("session" | "text-chunks" | "reasoning-chunks" | "tool-call-chunks")
        );
        if !got.object || special {
            continue;
        }
        let safe = got
            .seq
            .as_deref()
            .and_then(|s| s.strip_prefix("number:"))
            .and_then(|bits| {
                let f = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
                (f.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(&f))
                    .then_some(f as u64)
            });
        let want_seq = got.r#type.as_ref().and(safe);
        // Written lines must be UTF-8: a line that is not is refused for
        // writing and read (committed by someone else) with replacement.
        let utf8 = std::str::from_utf8(line).is_ok();
        if !utf8 && parse_record(line).is_ok() {
            writeln!(
                failures,
                "line {}: not UTF-8 but accepted for writing",
                i + 1
            )
            .unwrap();
        }
        let seq_of = |record: &Result<Record, String>| match record {
            Ok(Record::Event(span)) if span.count == 1 => Some(span.first),
            _ => None,
        };
        let record = read_record(line);
        if seq_of(&record) != want_seq {
            writeln!(
                failures,
                "line {}: {}\n  expected seq {want_seq:?}, read_record {record:?}",
                i + 1,
                shown(line)
            )
            .unwrap();
        }
        // Written, an event line must also have the envelope the
        // reference's load asks for.
        if utf8 {
            // Nor may it nest deeper than the reference's load survives
            // (sessionfs takes at most MAX_LOADABLE_DEPTH levels).
            let want_written =
                want_seq.filter(|_| want.envelope && nesting_depth(line) <= MAX_LOADABLE_DEPTH);
            let record = parse_record(line);
            if seq_of(&record) != want_written {
                writeln!(
                    failures,
                    "line {}: {}\n  expected written seq {want_written:?} (envelope {}), \
                     parse_record {record:?}",
                    i + 1,
                    shown(line),
                    want.envelope
                )
                .unwrap();
            }
            written += usize::from(want_written.is_some());
        }
        events += usize::from(want_seq.is_some());
    }
    assert!(
        failures.is_empty(),
        "sessionfs and the reference disagree:\n{failures}"
    );
    // The run covered both sides of the property.
    assert!(
        objects > LINES / 3 && objects < LINES,
        "{objects} objects of {LINES}"
    );
    assert!(events > LINES / 20, "{events} event lines of {LINES}");
    assert!(
        written > events / 50 && written < events,
        "{written} writable event lines of {events}"
    );
    let not_utf8 = lines
        .iter()
        .filter(|l| std::str::from_utf8(l).is_err())
        .count();
    assert!(not_utf8 > LINES / 50, "{not_utf8} lines that are not UTF-8");
}

/// How deep `line` nests (its object is level 1), counted here byte by
/// byte, strings skipped: independent of the store's scanner.
fn nesting_depth(line: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in line {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}
