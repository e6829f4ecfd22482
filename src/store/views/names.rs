//! Names of the `.by-*` views (issue 14): a header `cwd` as directory
//! components, link names, and their escaping.
//!
//! Escaping of `.by-cwd` components (documented in the README):
//! * `.` is written `%2E` and `..` is written `%2E%2E`;
//! * a component longer than 255 bytes keeps its first bytes (cut at a
//!   character boundary) followed by `%~` and 16 hex digits of a hash of
//!   the whole component, 255 bytes at most;
//! * at the top of `.by-cwd`, a real directory named `_no-cwd` is written
//!   `%5Fno-cwd` (the name `_no-cwd` holds the sessions without a usable
//!   cwd), and a POSIX component that looks like a drive (`C:`) gets `%25`
//!   in front, so `/C:/x` never meets the Windows path `C:\x`;
//! * a component that already starts with `%25`, or equals `%2E`,
//!   `%2E%2E` or (at the top) `%5Fno-cwd`, gets `%25` in front, so no two
//!   different paths share a directory.

use crate::identity::{id_body, nfc};

/// Longest file name, in bytes (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// The `.by-cwd` directory of sessions without a usable cwd.
pub const NO_CWD: &str = "_no-cwd";

/// Longest usable cwd, in bytes (`PATH_MAX`): no directory can have a
/// longer path, and the depth of `.by-cwd` stays bounded whatever a header
/// holds.
pub const CWD_MAX: usize = 4096;

/// Most components of a usable cwd: a link `depth + 1` directories down in
/// `.by-cwd` points `../` that many times, then at most 511 bytes of
/// project and session names, and a link's target must stay under
/// `PATH_MAX` (4096) bytes, or the kernel refuses it (`readlink` fails).
pub const CWD_MAX_DEPTH: usize = 1000;

/// Characters of the short id.
const SHORT_ID_CHARS: usize = 8;

/// FNV-1a over `bytes`: a stable 64-bit hash (names and cache files).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The longest prefix of `s` of at most `max` bytes that ends at a
/// character boundary.
pub fn cut_to_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The `.by-cwd` components of a header `cwd`: the NFC form, with repeated
/// and trailing slashes collapsed; `/` is the empty list (the top of
/// `.by-cwd`). A Windows path (`C:\Users\dev`) keeps its drive as the first
/// component (`C:`, `Users`, `dev`). A missing, empty or relative cwd gives
/// `[_no-cwd]`, and so does one that no file system could hold: longer
/// than [`CWD_MAX`] bytes, holding a NUL, or deeper than [`CWD_MAX_DEPTH`]
/// components. Components are escaped as the module says.
pub fn cwd_components(cwd: Option<&str>) -> Vec<String> {
    let Some(cwd) = cwd.filter(|c| !c.is_empty() && c.len() <= CWD_MAX && !c.contains('\0')) else {
        return vec![NO_CWD.to_string()];
    };
    let cwd = nfc(cwd);
    let bytes = cwd.as_bytes();
    let windows = bytes.len() >= 2
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && (bytes.len() == 2 || bytes[2] == b'\\' || bytes[2] == b'/');
    let raw: Vec<&str> = if windows {
        cwd.split(['\\', '/']).filter(|c| !c.is_empty()).collect()
    } else if cwd.starts_with('/') {
        cwd.split('/').filter(|c| !c.is_empty()).collect()
    } else {
        return vec![NO_CWD.to_string()];
    };
    if raw.len() > CWD_MAX_DEPTH {
        return vec![NO_CWD.to_string()];
    }
    raw.iter()
        .enumerate()
        .map(|(i, c)| escape_component(c, i == 0, i == 0 && windows))
        .collect()
}

fn looks_like_drive(c: &str) -> bool {
    let b = c.as_bytes();
    b.len() == 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

/// One component escaped (see the module rules); `top` for the first
/// component, `drive` when it is a Windows drive.
pub fn escape_component(c: &str, top: bool, drive: bool) -> String {
    match c {
        "." => return "%2E".into(),
        ".." => return "%2E%2E".into(),
        NO_CWD if top => return "%5Fno-cwd".into(),
        _ => {}
    }
    let needs_prefix = c.starts_with("%25")
        || c == "%2E"
        || c == "%2E%2E"
        || (top && c == "%5Fno-cwd")
        || (top && !drive && looks_like_drive(c));
    let c = if needs_prefix {
        format!("%25{c}")
    } else {
        c.to_string()
    };
    let c = escape_unshowable(&c);
    if c.len() <= NAME_MAX {
        return c;
    }
    let tail = format!("%~{:016x}", fnv1a(c.as_bytes()));
    format!("{}{tail}", cut_to_bytes(&c, NAME_MAX - tail.len()))
}

/// A component holding characters no listing should show as they are
/// (control characters: a newline splits `find`'s output; bidirectional
/// format characters such as U+202E: a name shown reversed) has each of
/// them written as `%` and two hex digits per UTF-8 byte (`\n` → `%0A`,
/// U+202E → `%E2%80%AE`), followed by `%~` and 16 hex digits of a hash of
/// the component as it was, so that it never meets a component that holds
/// that text literally. Others are returned as they are.
fn escape_unshowable(c: &str) -> String {
    let unshowable = |ch: char| ch.is_control() || crate::store::title::is_bidi_format(ch);
    if !c.contains(unshowable) {
        return c.to_string();
    }
    let mut out = String::with_capacity(c.len() + 24);
    for ch in c.chars() {
        if unshowable(ch) {
            let mut buf = [0u8; 4];
            for b in ch.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(ch);
        }
    }
    out.push_str(&format!("%~{:016x}", fnv1a(c.as_bytes())));
    out
}

/// `s` made usable inside a file name: control characters and NUL become
/// a space and `/` becomes `_` (the title's rules).
fn name_safe(s: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c == '/' || c.is_control();
    if !s.contains(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    s.chars()
        .map(|c| match c {
            '/' => '_',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// The short id: the first 8 characters of the id's body (after the last
/// `_`), made name-safe.
pub fn short_id(id: &str) -> String {
    let body = id_body(id);
    let end = body
        .char_indices()
        .nth(SHORT_ID_CHARS)
        .map_or(body.len(), |(at, _)| at);
    name_safe(&body[..end]).into_owned()
}

/// A link name `<prefix> <title> <tail>` (parts that are empty left out)
/// of at most [`NAME_MAX`] bytes: the title is shortened first (at a
/// character boundary, trailing spaces and dots removed), then the tail,
/// which then ends in a hash of itself. A name that would be `.` or `..`
/// gets `_` appended.
pub fn link_name(prefix: &str, title: &str, tail: &str) -> String {
    let tail = name_safe(tail);
    if prefix.len() + title.len() + tail.len() + 2 <= NAME_MAX
        && !prefix.is_empty()
        && !title.is_empty()
        && !tail.is_empty()
    {
        // The common case, made in one allocation.
        let mut name = String::with_capacity(prefix.len() + title.len() + tail.len() + 2);
        for (k, part) in [prefix, title, &tail].into_iter().enumerate() {
            if k > 0 {
                name.push(' ');
            }
            name.push_str(part);
        }
        return name;
    }
    let join = |parts: &[&str]| -> String {
        parts
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut name = join(&[prefix, title, &tail]);
    if name.len() > NAME_MAX {
        let fixed = join(&[prefix, &tail]).len() + 1;
        let room = NAME_MAX.saturating_sub(fixed);
        let short = cut_to_bytes(title, room).trim_end_matches([' ', '.']);
        name = join(&[prefix, short, &tail]);
    }
    if name.len() > NAME_MAX {
        let hash = format!("~{:08x}", fnv1a(tail.as_bytes()) as u32);
        let room = NAME_MAX.saturating_sub(join(&[prefix]).len() + 1 + hash.len());
        name = join(&[prefix, &format!("{}{hash}", cut_to_bytes(&tail, room))]);
    }
    if name == "." || name == ".." || name.is_empty() {
        name.push('_');
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_that_would_show_wrong_are_escaped_apart() {
        let newline = cwd_components(Some("/tmp/new\nline"));
        assert_eq!(newline[0], "tmp");
        assert!(newline[1].starts_with("new%0Aline%~"), "{newline:?}");
        let reversed = cwd_components(Some("/r\u{202E}tl"));
        assert!(reversed[0].starts_with("r%E2%80%AEtl%~"), "{reversed:?}");
        // The literal text of an escape is another directory.
        assert_eq!(cwd_components(Some("/tmp/new%0Aline"))[1], "new%0Aline");
        assert_ne!(newline, cwd_components(Some("/tmp/new%0Aline")));
        for c in newline.iter().chain(&reversed) {
            assert!(
                !c.contains(|ch: char| ch.is_control() || crate::store::title::is_bidi_format(ch))
            );
        }
    }

    #[test]
    fn cwd_components_collapse_and_escape() {
        assert_eq!(cwd_components(Some("/")), Vec::<String>::new());
        assert_eq!(cwd_components(Some("/root")), ["root"]);
        assert_eq!(
            cwd_components(Some("/srv//double/slash/")),
            ["srv", "double", "slash"]
        );
        assert_eq!(
            cwd_components(Some("C:\\Users\\dev\\repo")),
            ["C:", "Users", "dev", "repo"]
        );
        assert_eq!(cwd_components(Some("/C:/x")), ["%25C:", "x"]);
        // No file system holds these: listed with the cwd-less sessions.
        assert_eq!(cwd_components(Some("/t/a\0b")), [NO_CWD]);
        let deep = "/z".repeat(CWD_MAX_DEPTH + 1);
        assert_eq!(cwd_components(Some(&deep)), [NO_CWD]);
        let deepest = "/z".repeat(CWD_MAX_DEPTH);
        assert_eq!(cwd_components(Some(&deepest)).len(), CWD_MAX_DEPTH);
        // Its links' targets stay under PATH_MAX.
        let longest_target = 3 * (CWD_MAX_DEPTH + 1) + 2 * NAME_MAX + 1;
        assert!(longest_target < 4096, "{longest_target}");
        assert_eq!(cwd_components(None), [NO_CWD]);
        assert_eq!(cwd_components(Some("")), [NO_CWD]);
        assert_eq!(cwd_components(Some("rel/path")), [NO_CWD]);
        assert_eq!(cwd_components(Some(&"/a".repeat(CWD_MAX))), [NO_CWD]);
        assert_eq!(cwd_components(Some("/_no-cwd/a")), ["%5Fno-cwd", "a"]);
        assert_eq!(
            cwd_components(Some("/a/./../b")),
            ["a", "%2E", "%2E%2E", "b"]
        );
        assert_eq!(cwd_components(Some("/a/%2E")), ["a", "%25%2E"]);
        assert_eq!(
            cwd_components(Some("/p/cafe\u{301}")),
            cwd_components(Some("/p/caf\u{e9}"))
        );
        let long = "x".repeat(300);
        let c = cwd_components(Some(&format!("/{long}")));
        assert!(c[0].len() <= NAME_MAX && c[0].starts_with("xxx") && c[0].contains("%~"));
        assert_ne!(c, cwd_components(Some(&format!("/{}y", "x".repeat(299)))));
    }

    #[test]
    fn link_names_fit_and_short_ids_are_safe() {
        assert_eq!(short_id("session_01JH8Z4N7Q2W"), "01JH8Z4N");
        assert_eq!(short_id("feature/login.v2"), "feature_");
        assert_eq!(
            link_name("10-00-00", "Fix it", "01JH8Z4N"),
            "10-00-00 Fix it 01JH8Z4N"
        );
        assert_eq!(link_name("", "", "."), "._");
        let long_title = "é".repeat(100);
        let n = link_name("2026-01-05 10-00-00", &long_title, &"i".repeat(244));
        assert!(n.len() <= NAME_MAX, "{}", n.len());
        let n = link_name("2026-01-05 10-00-00", &long_title, "abc");
        assert!(n.len() <= NAME_MAX && n.ends_with(" abc"));
    }
}
