//! The rendering of one transcript, kept in a file and continued as the
//! transcript grows (issue 16).
//!
//! With a cache directory (the frame-index directory, outside the store),
//! the Markdown is `<dir>/<device>-<inode>.md` and the renderer's state
//! `<dir>/<device>-<inode>.render` (JSON, written atomically after the
//! Markdown it describes), keyed like the persisted frame index
//! ([`super::super::index_store`]). A persisted rendering is used only when
//! its device, inode, session id, creation time, render format and time
//! zone match, the transcript has not been rewritten in place since (it is
//! the same length, mtime and ctime, or longer with the same last bytes
//! before the saved length: [`growth::Seen`]),
//! it does not reach past the transcript's view and its
//! Markdown file has exactly the length the state records; otherwise it is
//! rebuilt in a new file renamed over the old one (a file another mount
//! may have open is never truncated), and a mount whose file was replaced
//! goes on without persisting. Mounts sharing a cache directory write the
//! same bytes at the same offsets (the rendering is a function of the
//! transcript, the format and the time zone). Without a directory, the Markdown goes to an unnamed
//! temporary file. Either way memory holds only the state: reads are
//! served from the file.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::super::error::{Result, StoreError};
use super::super::growth;
use super::super::transcript::{FileIdent, Transcript};
use super::{clock, render_range, RenderState, Renderer, RENDER_FORMAT};

/// What is persisted beside a cached rendering.
#[derive(Serialize, Deserialize, Debug)]
struct Persisted {
    format: u32,
    dev: u64,
    ino: u64,
    id: String,
    created_at: u64,
    zone: String,
    /// The transcript as it was when the state was saved (length, times,
    /// last bytes): one rewritten in place since ([`growth::Seen::since`])
    /// is rendered again.
    seen: growth::Seen,
    state: RenderState,
}

struct Inner {
    file: Arc<File>,
    renderer: Renderer,
    ident: FileIdent,
    /// The transcript the rendering was made from: one rewritten in place
    /// since ([`growth::Seen::since`]) is rendered again.
    seen: growth::Seen,
    /// Markdown and state paths, when persisted.
    paths: Option<(PathBuf, PathBuf)>,
}

/// The rendering of one transcript (see the module documentation).
pub struct Rendering {
    inner: Mutex<Inner>,
}

fn paths_in(dir: &Path, ident: FileIdent) -> (PathBuf, PathBuf) {
    let stem = format!("{:x}-{:x}", ident.dev, ident.ino);
    (
        dir.join(format!("{stem}.md")),
        dir.join(format!("{stem}.render")),
    )
}

impl Rendering {
    /// The rendering of `t`: the persisted one under `dir` when valid, else
    /// an empty one (under `dir` when it can be written there, else in an
    /// unnamed temporary file). Nothing is rendered yet: see
    /// [`Rendering::catch_up`].
    ///
    /// Errors: [`StoreError::Io`] when no temporary file can be made.
    pub fn open(t: &Transcript, dir: Option<&Path>) -> Result<Rendering> {
        let ident = t.ident();
        let now = t.seen();
        if let Some(dir) = dir {
            let (md, st) = paths_in(dir, ident);
            if let Some((file, state, seen)) = load(t, ident, &md, &st) {
                return Ok(Rendering::with(
                    file,
                    Renderer::from_state(state),
                    (ident, seen),
                    Some((md, st)),
                ));
            }
            match fresh_file(dir, &md) {
                Ok(file) => {
                    let _ = fs::remove_file(&st);
                    return Ok(Rendering::with(
                        file,
                        Renderer::new(),
                        (ident, now),
                        Some((md, st)),
                    ));
                }
                Err(e) => log::debug!(
                    "could not keep the rendering of {} under {}: {e}",
                    t.path().display(),
                    dir.display()
                ),
            }
        }
        let file = tempfile::tempfile().map_err(|e| {
            StoreError::io("create a temporary file for the rendering of", t.path(), e)
        })?;
        Ok(Rendering::with(file, Renderer::new(), (ident, now), None))
    }

    fn with(
        file: File,
        renderer: Renderer,
        (ident, seen): (FileIdent, growth::Seen),
        paths: Option<(PathBuf, PathBuf)>,
    ) -> Self {
        Rendering {
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                renderer,
                ident,
                seen,
                paths,
            }),
        }
    }

    /// Renders what `t`'s view holds beyond what was rendered (as last
    /// refreshed by the caller) and returns the rendering's length in
    /// bytes. A transcript replaced on disk (another inode), shorter than
    /// what was rendered, or rewritten in place since the last call (the
    /// same length under another mtime, [`growth::since`]) is rendered
    /// again from its start.
    ///
    /// Errors: [`StoreError::Io`] reading the transcript or writing the
    /// rendering file (what was rendered before stays valid).
    pub fn catch_up(&self, t: &Transcript) -> Result<u64> {
        let mut inner = self.inner.lock();
        let attr = t.cached_attr();
        let to = attr.plain_len;
        let ident = t.ident();
        let rendered_to = {
            let state = inner.renderer.state();
            state.plain_offset.max(state.title_checked)
        };
        let rewritten = t.since(&inner.seen) == growth::Since::Rewritten;
        inner.seen = t.seen();
        if ident != inner.ident || rendered_to > to || rewritten {
            inner.ident = ident;
            inner.renderer = Renderer::new();
            // A persisted file may be open in another mount: never truncated,
            // replaced by a new one instead.
            let fresh = inner.paths.take().and_then(|(md, st)| {
                let _ = fs::remove_file(&st);
                let _ = fs::remove_file(&md);
                let dir = md.parent()?;
                let (md, st) = paths_in(dir, ident);
                fresh_file(dir, &md).ok().map(|f| (f, md, st))
            });
            match fresh {
                Some((file, md, st)) => {
                    inner.file = Arc::new(file);
                    inner.paths = Some((md, st));
                }
                None => {
                    let file = tempfile::tempfile().map_err(|e| {
                        StoreError::io("create a temporary file for the rendering of", t.path(), e)
                    })?;
                    inner.file = Arc::new(file);
                }
            }
        }
        let state = inner.renderer.state();
        if state.stopped || state.plain_offset >= to {
            return Ok(state.md_len);
        }
        let file = Arc::clone(&inner.file);
        let mut pos = state.md_len;
        let mut renderer = inner.renderer.clone();
        let result = render_range(t, &mut renderer, to, &mut |bytes| {
            file.write_all_at(bytes, pos)?;
            pos += bytes.len() as u64;
            Ok(())
        });
        // The renderer's state matches the bytes written whether or not the
        // read stopped early.
        if result.is_ok() || renderer.state().md_len == pos {
            inner.renderer = renderer;
        }
        if let Some((md, st)) = &inner.paths {
            if !save(md, st, &inner, t) {
                // Another mount replaced the persisted rendering: this one
                // goes on unpersisted.
                inner.paths = None;
            }
        }
        result.map(|()| inner.renderer.state().md_len)
    }

    /// The rendering's length as last rendered, in bytes.
    pub fn len(&self) -> u64 {
        self.inner.lock().renderer.state().md_len
    }

    /// Whether nothing was rendered yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `size` bytes of the rendering at `offset` (short at its end).
    ///
    /// Errors: [`StoreError::Io`] reading the rendering file (named after
    /// `t`'s path).
    pub fn read(&self, t: &Transcript, offset: u64, size: u32) -> Result<Vec<u8>> {
        let (file, len) = {
            let inner = self.inner.lock();
            (Arc::clone(&inner.file), inner.renderer.state().md_len)
        };
        let end = offset.saturating_add(u64::from(size)).min(len);
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| StoreError::io("read the rendering of", t.path(), e))?;
        Ok(buf)
    }
}

/// A new, empty rendering file at `md` (the directory made if needed):
/// made under a temporary name and renamed over `md`, so that a file
/// another mount still has open is never truncated.
fn fresh_file(dir: &Path, md: &Path) -> std::io::Result<File> {
    fs::create_dir_all(dir)?;
    let tmp = md.with_extension(format!("md.tmp{}", std::process::id()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    fs::rename(&tmp, md)?;
    Ok(file)
}

/// The persisted rendering at `md`/`st`, if it belongs to `t` as it is now.
fn load(
    t: &Transcript,
    ident: FileIdent,
    md: &Path,
    st: &Path,
) -> Option<(File, RenderState, growth::Seen)> {
    let bytes = fs::read(st).ok()?;
    let p: Persisted = serde_json::from_slice(&bytes).ok()?;
    let header = t.header();
    let valid = p.format == RENDER_FORMAT
        && p.dev == ident.dev
        && p.ino == ident.ino
        && p.id == header.id
        && p.created_at == header.created_at_ms
        && p.zone == clock::zone_key()
        && t.since(&p.seen) != growth::Since::Rewritten
        && p.state.plain_offset.max(p.state.title_checked) <= t.cached_attr().plain_len;
    if !valid {
        return None;
    }
    let file = OpenOptions::new().read(true).write(true).open(md).ok()?;
    // Longer: bytes written after the state was saved (a mount stopped in
    // between, or one still writing): rebuilt rather than truncated.
    if file.metadata().ok()?.len() != p.state.md_len {
        return None;
    }
    Some((file, p.state, p.seen))
}

/// Saves the renderer's state (atomically) when `md` is still this
/// rendering's file; returns false when it is not (another mount replaced
/// it). Failures to write are logged at debug level: the rendering is only
/// a cache.
fn save(md: &Path, st: &Path, inner: &Inner, t: &Transcript) -> bool {
    let ours = match (inner.file.metadata(), fs::metadata(md)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    };
    if !ours {
        return false;
    }
    let header = t.header();
    let p = Persisted {
        format: RENDER_FORMAT,
        dev: inner.ident.dev,
        ino: inner.ident.ino,
        id: header.id.clone(),
        created_at: header.created_at_ms,
        zone: clock::zone_key(),
        seen: inner.seen,
        state: inner.renderer.state().clone(),
    };
    let result = (|| -> std::io::Result<()> {
        let tmp = st.with_extension(format!("tmp{}", std::process::id()));
        let mut f = File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(&p).map_err(std::io::Error::other)?)?;
        drop(f);
        fs::rename(&tmp, st)
    })();
    if let Err(e) = result {
        log::debug!("could not save the rendering state {}: {e}", st.display());
    }
    true
}
