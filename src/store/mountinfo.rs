//! `/proc/self/mountinfo`, parsed from its bytes (proc(5)): the one reader
//! of the mount table, for the file-system kind of a root
//! ([`super::fskind`]) and the mount's own lifecycle (`fuse::mount_table`).
//! A line is `ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] -
//! TYPE SOURCE SUPER-OPTIONS`; the kernel writes a space, tab, newline or
//! backslash inside a field as a three-digit octal escape (`\040`) and
//! every other byte as it is, so a path need not be UTF-8.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One mount of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountLine {
    /// Mount id (field 1): unique among live mounts.
    pub id: i32,
    /// `major:minor` of the mount's device.
    pub majmin: String,
    /// Where it is mounted, escapes undone.
    pub mount_point: PathBuf,
    /// The mount point's own options (`rw`, `nosuid`, …).
    pub mount_options: Vec<String>,
    /// File system type (`ext4`, `fuse.sshfs`, …).
    pub fs_type: String,
    /// The source (`/dev/vda`, `sessionfs:/srv/sessions`), escapes undone;
    /// bytes that are not UTF-8 are replaced (U+FFFD).
    pub source: Option<String>,
    /// The super block's options (`ro`, `user_id=0`, …).
    pub super_options: Vec<String>,
}

/// Undoes the kernel's `\ooo` escapes of one field.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let digits = field.get(i + 1..i + 4);
        match digits {
            Some(d) if field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                let v = u32::from(d[0] - b'0') * 64
                    + u32::from(d[1] - b'0') * 8
                    + u32::from(d[2] - b'0');
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

fn text(field: &[u8]) -> String {
    String::from_utf8_lossy(&unescape(field)).into_owned()
}

fn options(field: &[u8]) -> Vec<String> {
    field.split(|&b| b == b',').map(text).collect()
}

/// One line of the table; `None` when it does not have the fields above.
pub fn parse_line(line: &[u8]) -> Option<MountLine> {
    let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let dash = fields.iter().position(|f| *f == b"-")?;
    if dash < 6 || fields.len() < dash + 3 {
        return None;
    }
    let source = text(fields[dash + 2]);
    Some(MountLine {
        id: std::str::from_utf8(fields[0]).ok()?.parse().ok()?,
        majmin: text(fields[2]),
        mount_point: PathBuf::from(OsStr::from_bytes(&unescape(fields[4]))),
        mount_options: options(fields[5]),
        fs_type: text(fields[dash + 1]),
        source: (source != "none").then_some(source),
        super_options: fields.get(dash + 3).map(|f| options(f)).unwrap_or_default(),
    })
}

/// Every mount of this process's mount namespace, in the table's order (a
/// mount stacked on another comes after it).
///
/// Errors: the read error of `/proc/self/mountinfo`.
pub fn read() -> std::io::Result<Vec<MountLine>> {
    let bytes = std::fs::read("/proc/self/mountinfo")?;
    Ok(bytes
        .split(|&b| b == b'\n')
        .filter_map(parse_line)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_and_non_utf8_fields_are_read_as_the_kernel_wrote_them() {
        let line = b"36 35 0:42 / /mnt/with\\040space\\011tab\\134back\xff rw,relatime shared:1 \
                     - fuse.sessionfs sessionfs:/srv/my\\040sessions rw,user_id=0";
        let m = parse_line(line).unwrap();
        assert_eq!(m.id, 36);
        assert_eq!(m.majmin, "0:42");
        assert_eq!(
            m.mount_point.as_os_str().as_bytes(),
            b"/mnt/with space\ttab\\back\xff"
        );
        assert_eq!(m.mount_options, ["rw", "relatime"]);
        assert_eq!(m.fs_type, "fuse.sessionfs");
        assert_eq!(m.source.as_deref(), Some("sessionfs:/srv/my sessions"));
        assert_eq!(m.super_options, ["rw", "user_id=0"]);
    }

    #[test]
    fn lines_without_the_fields_are_skipped() {
        assert_eq!(parse_line(b""), None);
        assert_eq!(parse_line(b"36 35 0:42 / /mnt rw - ext4"), None);
        assert!(parse_line(b"36 35 0:42 / /mnt rw - ext4 /dev/vda rw").is_some());
        assert_eq!(parse_line(b"x 35 0:42 / /mnt rw - ext4 /dev/vda rw"), None);
    }

    #[test]
    fn this_process_table_holds_the_root_mount() {
        let all = read().unwrap();
        assert!(all
            .iter()
            .any(|m| m.mount_point == std::path::Path::new("/")));
    }
}
