//! `mount -o remount,ro|rw MOUNTPOINT`: mount(8) runs the helper again
//! with `remount` and the options in effect. The read-only flag of the
//! mount point is switched (a bind remount, which needs no word from the
//! daemon); everything else needs a new mount and is refused.

use std::path::Path;

use nix::mount::MsFlags;

use super::options::MountOptions;
use super::{fail, EXIT_OK};
use crate::fuse::mount_table;

/// Carries out `remount` of the sessionfs mount at `mountpoint`, or
/// refuses it with a message (exit status 1).
pub(super) fn run(mountpoint: &Path, options: &MountOptions) -> u8 {
    let path = crate::fuse::resolved(mountpoint);
    let shown = path.display();
    let Some(entry) = mount_table::top_at(&path).filter(|m| m.is_sessionfs()) else {
        return fail(format_args!(
            "remount: {shown} is not a sessionfs mount; mount it first"
        ));
    };
    let changed: Vec<&String> = options
        .sessionfs_options
        .iter()
        .filter(|o| o.as_str() != "ro")
        .collect();
    if !changed.is_empty() {
        return fail(format_args!(
            "remount can switch only ro/rw; {} cannot change on a live mount: run \
             `umount {shown}` and mount it again with the new options",
            changed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let read_only = options.read_only.unwrap_or(entry.mount_read_only);
    if !read_only && entry.super_read_only {
        return fail(format_args!(
            "remount,rw: {shown} was mounted read-only (ro), and its daemon takes no writes; \
             run `umount {shown}` and mount it again without ro"
        ));
    }
    // A bind remount sets the mount point's own flags: keep nosuid and
    // nodev (sessionfs always mounts so), and the exec/atime flags in use.
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    for (name, flag) in [
        ("noexec", MsFlags::MS_NOEXEC),
        ("noatime", MsFlags::MS_NOATIME),
        ("nodiratime", MsFlags::MS_NODIRATIME),
    ] {
        if options.kernel.iter().any(|k| k == name) || entry.mount_options.iter().any(|o| o == name)
        {
            flags |= flag;
        }
    }
    match nix::mount::mount(None::<&str>, &path, None::<&str>, flags, None::<&str>) {
        Ok(()) => {
            let now = mount_table::by_id(entry.id);
            if now.is_some_and(|m| m.mount_read_only == read_only) {
                EXIT_OK
            } else {
                fail(format_args!(
                    "remount: the kernel accepted the call but {shown} is not {} now",
                    if read_only { "read-only" } else { "read-write" }
                ))
            }
        }
        Err(nix::errno::Errno::EPERM) => fail(format_args!(
            "remount of {shown} needs root (CAP_SYS_ADMIN); as a normal user, `fusermount3 -u \
             {shown}` and mount it again with the new options"
        )),
        Err(e) => fail(format_args!("remount of {shown} failed: {e}")),
    }
}
