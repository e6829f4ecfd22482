//! The `-o` mount options, as mount(8), mount.fuse3, fstab and systemd
//! pass them. There is one parser: every long flag of `sessionfs mount` is
//! also an `-o` option, its name spelled with `_` for `-`
//! (`--attr-timeout 0.5` is `-o attr_timeout=0.5`, `--allow-other` is
//! `-o allow_other`), so a flag added later is an `-o` option at once.
//! Besides those: `ro`, kernel options passed on (`noexec`, `noatime`,
//! `sync`, `async`, `dirsync`, `max_read=N`, `blksize=N`), `remount`, and
//! the generic options mount(8) and mount.fuse3 add, accepted and
//! ignored. Anything else is an error naming the option.

use std::ffi::OsString;

/// `-o` names that are another flag's.
const ALIASES: [(&str, &str); 1] = [("ro", "read-only")];

/// Options of mount(8), mount.fuse3, fstab and systemd that mean nothing
/// to sessionfs (or that it always applies: `nodev`, `nosuid`,
/// `default_permissions`): accepted, ignored.
const GENERIC: [&str; 36] = [
    "rw",
    "defaults",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "atime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "lazytime",
    "nolazytime",
    "diratime",
    "nodiratime",
    "iversion",
    "noiversion",
    "mand",
    "nomand",
    "silent",
    "loud",
    "_netdev",
    "nofail",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "auto",
    "noauto",
    "default_permissions",
    "bind",
    "rbind",
    "private",
    "shared",
];

/// Prefixes of generic `key=value` options, accepted and ignored:
/// systemd's and util-linux's own (`x-systemd.*`, `x-gvfs-*`, `comment=`),
/// mount.fuse3's (`fsname=`, `subtype=`, `user=`), and those the kernel
/// reports for a live FUSE mount, which mount(8) passes back on `remount`.
const GENERIC_PREFIXES: [&str; 9] = [
    "x-",
    "comment=",
    "user=",
    "fsname=",
    "subtype=",
    "user_id=",
    "group_id=",
    "rootmode=",
    "fd=",
];

/// Kernel options passed on to the mount as given.
const KERNEL: [&str; 5] = ["noexec", "noatime", "sync", "async", "dirsync"];

/// Kernel `key=value` options passed on to the mount as given.
const KERNEL_PREFIXES: [&str; 2] = ["max_read=", "blksize="];

/// What the `-o` items ask for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct MountOptions {
    /// Flags for `sessionfs mount`, in order (`--attr-timeout=0.5`).
    pub(super) flags: Vec<OsString>,
    /// Kernel options passed on (`noexec`, `max_read=131072`).
    pub(super) kernel: Vec<String>,
    /// `remount` was given: change a live mount instead of mounting.
    pub(super) remount: bool,
    /// The last of `ro`/`rw`, if any: `Some(true)` for `ro`.
    pub(super) read_only: Option<bool>,
    /// The sessionfs options given (their `-o` names), for `remount`,
    /// which can change none of them but `ro`.
    pub(super) sessionfs_options: Vec<String>,
}

/// Splits the `-o` values (each comma-separated) and sorts every item:
/// sessionfs options become flags checked against `mount` (the clap
/// definition of `sessionfs mount`), kernel options are kept, generic ones
/// dropped.
///
/// Errors: an unknown option; a sessionfs option with a missing,
/// unexpected or invalid value (the message names the `-o` item).
pub(super) fn parse(mount: &clap::Command, values: &[String]) -> Result<MountOptions, String> {
    let mut out = MountOptions::default();
    for item in values.iter().flat_map(|v| v.split(',')).map(str::trim) {
        if item.is_empty() {
            continue;
        }
        match item {
            "remount" => {
                out.remount = true;
                continue;
            }
            "rw" => out.read_only = Some(false),
            "ro" => out.read_only = Some(true),
            _ => {}
        }
        if item == "rw"
            || GENERIC.contains(&item)
            || GENERIC_PREFIXES.iter().any(|p| item.starts_with(p))
        {
            continue;
        }
        if KERNEL.contains(&item) || KERNEL_PREFIXES.iter().any(|p| item.starts_with(p)) {
            out.kernel.push(item.to_string());
            continue;
        }
        let flag = flag_of(mount, item)?;
        validate(mount, item, &flag)?;
        out.sessionfs_options
            .push(item.split('=').next().unwrap_or(item).to_string());
        out.flags.push(flag);
    }
    // The last of `ro` and `rw` wins, as with mount(8): a later `rw`
    // takes back an earlier `ro`.
    if out.read_only == Some(false) {
        out.flags.retain(|f| f != "--read-only");
        out.sessionfs_options.retain(|o| o != "ro");
    }
    Ok(out)
}

/// The `sessionfs mount` flag for the `-o` item `key[=value]`.
fn flag_of(mount: &clap::Command, item: &str) -> Result<OsString, String> {
    let (key, value) = match item.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (item, None),
    };
    let long = ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or_else(|| key.replace('_', "-"), |(_, long)| long.to_string());
    let arg = mount
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .find(|a| a.get_long() == Some(long.as_str()) && !key.contains('-'));
    let Some(arg) = arg else {
        return Err(format!(
            "unknown mount option {key:?}; sessionfs takes {} and the generic options of \
             mount(8) (see `sessionfs mount --help`)",
            option_names(mount).join(", ")
        ));
    };
    let takes_value = arg.get_action().takes_values();
    match (takes_value, value) {
        (true, Some(v)) => Ok(format!("--{long}={v}").into()),
        (true, None) => Err(format!("mount option {key:?} needs a value: {key}=VALUE")),
        (false, None) => Ok(format!("--{long}").into()),
        (false, Some(_)) => Err(format!(
            "mount option {key:?} takes no value: give it as `{key}` alone"
        )),
    }
}

/// Checks one option's value with the flag's own parser, so that the
/// message names the `-o` item.
fn validate(mount: &clap::Command, item: &str, flag: &OsString) -> Result<(), String> {
    let argv: [OsString; 4] = ["mount".into(), "/r".into(), "/m".into(), flag.clone()];
    match mount.clone().try_get_matches_from(argv) {
        Ok(_) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid value");
            Err(format!(
                "mount option {item:?}: {}",
                first.trim_start_matches("error: ")
            ))
        }
    }
}

/// The `-o` names of every sessionfs option.
pub(super) fn option_names(mount: &clap::Command) -> Vec<String> {
    let mut names: Vec<String> = mount
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .filter_map(|a| a.get_long())
        .map(|long| {
            ALIASES
                .iter()
                .find(|(_, l)| *l == long)
                .map_or_else(|| long.replace('-', "_"), |(alias, _)| alias.to_string())
        })
        .collect();
    names.sort();
    names
}

/// Every sessionfs option in effect by its `-o` name, with its value as
/// given (or its default), from the parsed `sessionfs mount` matches;
/// unset options without a default are `null`.
pub(super) fn settings(
    mount: &clap::Command,
    matches: &clap::ArgMatches,
) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for arg in mount.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
            continue;
        };
        if matches!(id, "help" | "version") || ALIASES.iter().any(|(_, l)| *l == long) {
            continue;
        }
        let key = long.replace('-', "_");
        let value = if !arg.get_action().takes_values() {
            serde_json::Value::Bool(matches.get_flag(id))
        } else {
            matches
                .get_raw(id)
                .and_then(|mut v| v.next_back())
                .map_or(serde_json::Value::Null, |v| {
                    v.to_string_lossy().into_owned().into()
                })
        };
        out.insert(key, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn mount() -> clap::Command {
        crate::cli::Cli::command()
            .find_subcommand("mount")
            .cloned()
            .unwrap()
    }

    fn parse_one(s: &str) -> Result<MountOptions, String> {
        parse(&mount(), &[s.to_string()])
    }

    #[test]
    fn every_flag_is_an_option() {
        let o = parse_one("attr_timeout=0.5,batch_ms=0,cache_size=64M,index_cache=none").unwrap();
        assert_eq!(
            o.flags,
            [
                "--attr-timeout=0.5",
                "--batch-ms=0",
                "--cache-size=64M",
                "--index-cache=none"
            ]
            .map(OsString::from)
        );
        let o = parse_one("ro,allow_other,auto_unmount,allow_root,compression=none").unwrap();
        assert_eq!(
            o.flags,
            [
                "--read-only",
                "--allow-other",
                "--auto-unmount",
                "--allow-root",
                "--compression=none"
            ]
            .map(OsString::from)
        );
        assert_eq!(o.read_only, Some(true));
        let names = option_names(&mount());
        for name in [
            "attr_timeout",
            "batch_ms",
            "cache_size",
            "index_cache",
            "compression",
            "ro",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
    }

    #[test]
    fn the_last_of_ro_and_rw_wins() {
        let o = parse_one("ro,rw").unwrap();
        assert_eq!(o.read_only, Some(false));
        assert!(o.flags.is_empty(), "{:?}", o.flags);
        let o = parse(&mount(), &["rw".into(), "batch_ms=0,ro".into()]).unwrap();
        assert_eq!(o.read_only, Some(true));
        assert_eq!(o.flags, ["--batch-ms=0", "--read-only"].map(OsString::from));
    }

    #[test]
    fn generic_and_kernel_options() {
        let o = parse_one(
            "rw,dev,suid,exec,relatime,_netdev,nofail,user,users,x-systemd.automount,\
             defaults,noauto,noexec,noatime,max_read=131072,remount",
        )
        .unwrap();
        assert!(o.flags.is_empty(), "{:?}", o.flags);
        assert_eq!(o.kernel, ["noexec", "noatime", "max_read=131072"]);
        assert!(o.remount);
        assert_eq!(o.read_only, Some(false));
    }

    #[test]
    fn mistakes_name_the_option() {
        let e = parse_one("ro,allow_othr").unwrap_err();
        assert!(e.contains("\"allow_othr\""), "{e}");
        let e = parse_one("attr_timeout").unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
        let e = parse_one("allow_other=yes").unwrap_err();
        assert!(e.contains("takes no value"), "{e}");
        let e = parse_one("cache_size=lots").unwrap_err();
        assert!(e.contains("cache_size=lots"), "{e}");
        // Flag spellings are not option names.
        assert!(parse_one("read-only").is_err());
        assert!(parse_one("read_only").is_ok());
    }
}
