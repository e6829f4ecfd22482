//! Names on disk: project keys (`--<key>--`) and encoded session ids.
//!
//! Source: FORMAT.md, "Project key" and "Session directory", which follow the
//! reference's `projectKey` and `encodeSegment`. Both work per UTF-16 code
//! unit, so a character outside the Basic Multilingual Plane becomes two
//! escapes (`🚀` → `~D83D~DE80`).

use super::error::{Result, StoreError};

/// Name of the project directory of sessions without a `cwd`.
pub const NO_CWD_DIR: &str = "_no-cwd";

/// Longest encoded session id that sessionfs creates, in bytes. The
/// reference probes `<project>/<encoded-id>.jsonl.zstd` on every lookup, so
/// a longer name (plus the 11-byte suffix) exceeds the 255-byte name limit
/// and can never be read back by it (FORMAT.md, Session directory).
pub const MAX_CREATABLE_ENCODED_ID: usize = 244;

/// Longest project key body, in characters, before the `--` wrapping.
const MAX_KEY_BODY: usize = 251;

fn is_safe_unit(unit: u16) -> bool {
    matches!(unit, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x2E | 0x5F | 0x2D)
}

fn push_escape(out: &mut String, unit: u16) {
    out.push_str(&format!("~{unit:04X}"));
}

/// The project directory name of a header `cwd`: `--<key>--`.
///
/// Separators `/`, `\` and `:` become `-` (a run of them one `-`), safe
/// units stay, every other UTF-16 unit becomes `~XXXX`; leading `-` are
/// stripped (`root` when nothing is left) and the key is cut to 251
/// characters, even inside an escape. No Unicode normalization is applied.
///
/// Errors: [`StoreError::InvalidName`] for an empty `cwd`.
pub fn project_key(cwd: &str) -> Result<String> {
    project_key_units(&cwd.encode_utf16().collect::<Vec<_>>())
}

/// [`project_key`] of a cwd given as UTF-16 code units (a lone surrogate
/// included, as JavaScript strings may hold one).
///
/// Errors: as [`project_key`].
pub fn project_key_units(cwd: &[u16]) -> Result<String> {
    if cwd.is_empty() {
        return Err(StoreError::InvalidName {
            name: String::new(),
            reason: "an empty cwd has no project key".into(),
        });
    }
    let mut readable = String::with_capacity(cwd.len());
    let mut in_separator_run = false;
    for &unit in cwd {
        if matches!(unit, 0x2F | 0x5C | 0x3A) {
            if !in_separator_run {
                readable.push('-');
            }
            in_separator_run = true;
        } else {
            in_separator_run = false;
            if is_safe_unit(unit) {
                readable.push(unit as u8 as char);
            } else {
                push_escape(&mut readable, unit);
            }
        }
    }
    let body = readable.trim_start_matches('-');
    let body = if body.is_empty() { "root" } else { body };
    // Every character of `body` is ASCII, so byte and character cuts agree.
    let cut = &body[..body.len().min(MAX_KEY_BODY)];
    Ok(format!("--{cut}--"))
}

/// The project directory name for an optional header `cwd`: its
/// [`project_key`], or [`NO_CWD_DIR`] when absent.
pub fn project_dir_name(cwd: Option<&str>) -> Result<String> {
    match cwd {
        Some(cwd) => project_key(cwd),
        None => Ok(NO_CWD_DIR.to_string()),
    }
}

/// Whether `name` is a project directory name sessionfs may create: a
/// `--…--` key or `_no-cwd` (MOUNT.md, Creating a session).
pub fn is_project_dir_name(name: &str) -> bool {
    is_project_dir_os(std::ffi::OsStr::new(name))
}

/// [`is_project_dir_name`] for a name as the file system gives it, judged
/// on its bytes: a `--…--` name that is not UTF-8 is a project directory
/// too (the mount and `list` take it as one, and find what is in it).
pub fn is_project_dir_os(name: &std::ffi::OsStr) -> bool {
    let b = name.as_encoded_bytes();
    b == NO_CWD_DIR.as_bytes() || (b.len() > 4 && b.starts_with(b"--") && b.ends_with(b"--"))
}

/// Why `name` (`--<key>--`) is not a project directory name some `cwd`
/// derives ([`project_key`], FORMAT.md, Project key), or `None` when one
/// does: the key holds only safe characters and `~XXXX` escapes (four
/// uppercase hex digits) of units that are neither safe nor separators,
/// does not start with `-`, and is at most 251 characters, the last
/// escape cut short only at that length. `_no-cwd` and names that are not
/// `--…--` are not judged here ([`is_project_dir_name`]).
pub fn non_canonical_key(name: &str) -> Option<String> {
    let key = name.strip_prefix("--")?.strip_suffix("--")?;
    if key.starts_with('-') {
        return Some(
            "a project key never starts with '-' (leading separators are stripped)".into(),
        );
    }
    if key.len() > MAX_KEY_BODY {
        return Some(format!(
            "a project key is at most {MAX_KEY_BODY} characters"
        ));
    }
    let bytes = key.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 && is_safe_unit(u16::from(b)) {
            i += 1;
            continue;
        }
        if b != b'~' {
            let c = key[i..].chars().next().unwrap_or('?');
            return Some(format!(
                "{c:?} is never in a project key (it is written ~{:04X} for each UTF-16 unit)",
                c.encode_utf16(&mut [0; 2])[0]
            ));
        }
        let hex = &bytes[i + 1..bytes.len().min(i + 5)];
        let well_formed = hex.iter().all(|h| matches!(h, b'0'..=b'9' | b'A'..=b'F'));
        if hex.len() < 4 {
            // Cut by the length limit: only at its very end.
            if well_formed && key.len() == MAX_KEY_BODY {
                return None;
            }
            return Some("an escape is ~ and four uppercase hex digits".into());
        }
        if !well_formed {
            return Some("an escape is ~ and four uppercase hex digits".into());
        }
        let unit = u16::from_str_radix(std::str::from_utf8(hex).unwrap_or("0"), 16).unwrap_or(0);
        if is_safe_unit(unit) || matches!(unit, 0x2F | 0x5C | 0x3A) {
            return Some(format!(
                "~{unit:04X} is never in a project key ({:?} is written as {})",
                char::from_u32(u32::from(unit)).unwrap_or('?'),
                if is_safe_unit(unit) { "itself" } else { "-" }
            ));
        }
        i += 5;
    }
    None
}

/// The session directory name of an id (injective, reversible escape).
///
/// Errors: [`StoreError::InvalidName`] for the empty id.
pub fn encode_id(id: &str) -> Result<String> {
    encode_id_units(&id.encode_utf16().collect::<Vec<_>>())
}

/// [`encode_id`] of an id given as UTF-16 code units (a lone surrogate
/// becomes `~D800`, as the reference writes it).
///
/// Errors: as [`encode_id`].
pub fn encode_id_units(id: &[u16]) -> Result<String> {
    match id {
        [] => Err(StoreError::InvalidName {
            name: String::new(),
            reason: "the empty session id cannot be stored".into(),
        }),
        [0x2E] => Ok("~002E".into()),
        [0x2E, 0x2E] => Ok("~002E~002E".into()),
        _ => {
            let mut out = String::with_capacity(id.len());
            for &unit in id {
                if is_safe_unit(unit) {
                    out.push(unit as u8 as char);
                } else {
                    push_escape(&mut out, unit);
                }
            }
            Ok(out)
        }
    }
}

/// Decodes a session directory name back to its id, accepting only the
/// canonical form that [`encode_id`] produces (uppercase hex escapes, no
/// literal unsafe characters, `.` and `..` only as escapes).
///
/// Errors: [`StoreError::InvalidName`] when `name` is not canonical or
/// decodes to a lone surrogate (not representable as a Rust string).
pub fn decode_id(name: &str) -> Result<String> {
    let invalid = |reason: &str| StoreError::InvalidName {
        name: name.to_string(),
        reason: format!("not a canonical encoded session id: {reason}"),
    };
    let bytes = name.as_bytes();
    let mut units: Vec<u16> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'~' {
            let hex = bytes
                .get(i + 1..i + 5)
                .ok_or_else(|| invalid("cut escape"))?;
            if !hex
                .iter()
                .all(|h| h.is_ascii_digit() || (b'A'..=b'F').contains(h))
            {
                return Err(invalid("escape is not four uppercase hex digits"));
            }
            let text = std::str::from_utf8(hex).map_err(|_| invalid("bad escape"))?;
            let unit = u16::from_str_radix(text, 16).map_err(|_| invalid("bad escape"))?;
            units.push(unit);
            i += 5;
        } else if is_safe_unit(u16::from(b)) {
            units.push(u16::from(b));
            i += 1;
        } else {
            return Err(invalid("unescaped character"));
        }
    }
    let id = String::from_utf16(&units).map_err(|_| invalid("lone surrogate"))?;
    if encode_id(&id).ok().as_deref() != Some(name) {
        return Err(invalid("escapes a character that stays literal"));
    }
    Ok(id)
}

/// Checks that an id may be created by sessionfs: non-empty and with an
/// encoded name of at most [`MAX_CREATABLE_ENCODED_ID`] bytes.
///
/// Errors: [`StoreError::InvalidName`] for the empty id,
/// [`StoreError::NameTooLong`] for a longer encoded name.
pub fn check_creatable_id(id: &str) -> Result<String> {
    let encoded = encode_id(id)?;
    if encoded.len() > MAX_CREATABLE_ENCODED_ID {
        return Err(StoreError::NameTooLong {
            name: encoded.clone(),
            reason: format!(
                "encoded session id is {} bytes; the reference cannot read back ids \
                 longer than {MAX_CREATABLE_ENCODED_ID} bytes, so sessionfs refuses to create it",
                encoded.len()
            ),
        });
    }
    Ok(encoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_the_format_examples() {
        assert_eq!(
            project_key("/home/alice/code/app").unwrap(),
            "--home-alice-code-app--"
        );
        assert_eq!(
            project_key("C:\\Users\\dev\\repo").unwrap(),
            "--C-Users-dev-repo--"
        );
        assert_eq!(project_key("/").unwrap(), "--root--");
        assert_eq!(project_key("/root").unwrap(), "--root--");
        assert_eq!(
            project_key("/a/b-c").unwrap(),
            project_key("/a-b/c").unwrap()
        );
        assert!(project_key("").is_err());
    }

    #[test]
    fn ids_round_trip() {
        for id in [
            "a",
            ".",
            "..",
            "~",
            "ünïcödé-🚀",
            "with space & %20",
            "a/b:c",
        ] {
            let enc = encode_id(id).unwrap();
            assert_eq!(decode_id(&enc).unwrap(), id);
        }
        assert_eq!(encode_id("🚀").unwrap(), "~D83D~DE80");
        assert!(encode_id("").is_err());
    }

    #[test]
    fn non_canonical_names_are_refused() {
        for name in ["~00e9", "abc~0041", ".", "..", "a b", "~12", "~D83D"] {
            assert!(decode_id(name).is_err(), "{name}");
        }
    }

    #[test]
    fn long_ids_are_refused_for_creation() {
        let id = "x".repeat(245);
        assert!(matches!(
            check_creatable_id(&id),
            Err(StoreError::NameTooLong { .. })
        ));
        assert!(check_creatable_id(&"x".repeat(244)).is_ok());
    }

    #[test]
    fn derived_keys_are_canonical_and_others_are_not() {
        for cwd in [
            "/home/alice/code/app",
            "C:\\Users\\dev\\repo",
            "/",
            "/a-/b/",
            "/home/bob/~tilde/caf\u{e9}/\u{1F680} x",
            &format!("/{}", "\u{e9}".repeat(80)),
            &format!("/{}", "a".repeat(300)),
        ] {
            let name = project_key(cwd).unwrap();
            assert_eq!(non_canonical_key(&name), None, "{cwd:?} -> {name}");
        }
        for name in [
            "--Foo Bar--",
            "--~0041--",
            "--~002F--",
            "--caf~00e9--",
            "---a--",
            "--a~00--",
            "--a~00G9--",
            "--caf\u{e9}--",
        ] {
            assert!(non_canonical_key(name).is_some(), "{name} accepted");
        }
    }
}
