//! Who asks, and what they may see of the mount's own views.
//!
//! The `.by-*` views (today `.by-id/`) list sessions from every project
//! directory of the store. Under `--allow-other` each user must see only
//! the sessions they could reach through the tree itself, so a view shows a
//! session to a caller only when the caller has search permission on its
//! project and session directories and read permission on its transcript
//! (MOUNT.md, Shared roots; issue 9). The kernel checks the tree's own
//! entries (`default_permissions`); the views are the mount's, so this
//! module checks them, with the caller's uid, gid and supplementary groups.
//! FUSE sends no supplementary groups: they are read from
//! `/proc/PID/status` of the calling thread.

use std::cell::OnceCell;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The process behind a request: its file-system uid and gid, and its
/// pid for the supplementary groups (read once, when first needed).
#[derive(Debug)]
pub struct Caller {
    /// File-system user id of the request.
    pub uid: u32,
    /// File-system group id of the request.
    pub gid: u32,
    /// Thread id of the caller (0 when unknown: no supplementary groups).
    pub pid: u32,
    groups: OnceCell<Vec<u32>>,
}

/// The permission a view needs on one backing entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Search (`x`) on a directory.
    Search,
    /// Read (`r`) on a file.
    Read,
}

impl Caller {
    /// The caller of a request.
    pub fn new(uid: u32, gid: u32, pid: u32) -> Self {
        Caller {
            uid,
            gid,
            pid,
            groups: OnceCell::new(),
        }
    }

    /// A caller that sees everything (root): for the core's own calls.
    pub fn root() -> Self {
        Caller {
            groups: OnceCell::from(Vec::new()),
            ..Caller::new(0, 0, 0)
        }
    }

    /// Supplementary groups of the caller, from the `Groups:` line of
    /// `/proc/PID/status`; none when the process is gone or unreadable.
    pub fn groups(&self) -> &[u32] {
        self.groups.get_or_init(|| {
            if self.pid == 0 {
                return Vec::new();
            }
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
            parse_groups(&status)
        })
    }

    /// Whether the caller is in group `gid` (primary or supplementary).
    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups().contains(&gid)
    }

    /// A key that differs between callers whose view may differ: uid, gid
    /// and supplementary groups.
    pub fn view_key(&self) -> u64 {
        let ids: Vec<u8> = [self.uid, self.gid]
            .iter()
            .chain(self.groups().iter())
            .flat_map(|id| id.to_le_bytes())
            .collect();
        crate::store::hash::of(&ids) | 1
    }

    /// Whether the caller has `need` on `path` (not following a final
    /// symbolic link), by its mode bits as the kernel judges them: owner
    /// bits for the owner, group bits for a member of the file's group,
    /// other bits otherwise; root has every permission. POSIX ACLs are not
    /// read. A path that cannot be stat'ed is refused.
    pub fn may(&self, path: &Path, need: Need) -> bool {
        if self.uid == 0 {
            return true;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return false;
        };
        let bit = match need {
            Need::Search => 0o1,
            Need::Read => 0o4,
        };
        let mode = meta.mode();
        let granted = if meta.uid() == self.uid {
            mode >> 6
        } else if self.in_group(meta.gid()) {
            mode >> 3
        } else {
            mode
        };
        granted & bit != 0
    }

    /// Whether a view may show the caller the session whose backing
    /// project directory, session directory and transcript are given:
    /// search on both directories and read on the transcript. This is the
    /// one filter of every `.by-*` view.
    pub fn may_see_session(
        &self,
        project_dir: &Path,
        session_dir: &Path,
        transcript: &Path,
    ) -> bool {
        self.may(project_dir, Need::Search)
            && self.may(session_dir, Need::Search)
            && self.may(transcript, Need::Read)
    }
}

/// The numbers of the `Groups:` line of a `/proc/PID/status` text.
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn groups_are_read_from_the_status_text() {
        let status =
            "Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1000 \nVmRSS:\t1 kB\n";
        assert_eq!(parse_groups(status), vec![4, 24, 1000]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name:\tx\n"), Vec::<u32>::new());
    }

    #[test]
    fn this_process_groups_match_getgroups() {
        // SAFETY: getgroups with a zero size only counts; then fills a
        // buffer of that many entries that we own.
        let mut ids = unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut());
            let mut buf = vec![0 as libc::gid_t; n.max(0) as usize];
            let got = libc::getgroups(n, buf.as_mut_ptr());
            buf.truncate(got.max(0) as usize);
            buf
        };
        let me = Caller::new(1, 1, std::process::id());
        let mut read = me.groups().to_vec();
        ids.sort_unstable();
        read.sort_unstable();
        assert_eq!(read, ids);
    }

    #[test]
    fn mode_bits_are_judged_as_owner_group_or_other() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let meta = std::fs::metadata(&f).unwrap();
        let (uid, gid) = (meta.uid(), meta.gid());
        let set =
            |mode| std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let stranger = Caller {
            groups: OnceCell::from(vec![gid + 7]),
            ..Caller::new(uid + 1000, gid + 1000, 0)
        };
        let member = Caller {
            groups: OnceCell::from(vec![gid]),
            ..Caller::new(uid + 1000, gid + 1000, 0)
        };
        let owner = Caller {
            groups: OnceCell::from(vec![]),
            ..Caller::new(uid.max(1), gid, 0)
        };
        set(0o040);
        assert!(member.may(&f, Need::Read));
        assert!(!stranger.may(&f, Need::Read));
        set(0o004);
        assert!(stranger.may(&f, Need::Read));
        assert!(
            !member.may(&f, Need::Read),
            "group bits decide for a member"
        );
        if uid != 0 {
            set(0o400);
            assert!(owner.may(&f, Need::Read));
        }
        set(0o000);
        assert!(Caller::root().may(&f, Need::Read));
        assert!(!stranger.may(&dir.path().join("missing"), Need::Read));
    }
}
