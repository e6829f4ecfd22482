//! `sessionfs render ROOT ID`: the transcript as readable Markdown, the
//! same text as `session.md` in the mount (the renderer is the store's,
//! `crate::store::render`).

use std::io::{self, Write};

use super::find::{exit_code_of_find, IdArgs};
use super::{fail, open_store, output_result, EXIT_OK};

/// Help text after the options.
pub(super) const AFTER_HELP: &str = "\
Examples:
  sessionfs render ~/.dsh/sessions cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O | less
  TZ=Europe/Paris sessionfs render ~/.dsh/sessions 3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f > s.md

Times are local clock times (TZ respected). A damaged transcript is rendered
up to the damage, followed by a paragraph saying where and why it stopped,
and the exit status is 1.";

/// Streams the rendering of the session `args.id` to stdout. Exit status:
/// 0, 1 (store error, damage, or output error), 3 (ambiguous id).
pub(super) fn run(args: IdArgs) -> u8 {
    let (_identity, store) = match open_store(&args.root) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let transcript = match store.find_transcript_by_id(&args.id) {
        Ok((_, transcript)) => transcript,
        Err(e) => {
            eprintln!("sessionfs: {e}");
            return exit_code_of_find(&e);
        }
    };
    let mut out = io::BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let to = transcript.cached_attr().plain_len;
    let mut renderer = crate::store::render::Renderer::new();
    let mut write_err = None;
    let r = crate::store::render::render_range(&transcript, &mut renderer, to, &mut |md| {
        out.write_all(md).inspect_err(|e| {
            write_err = Some(io::Error::new(e.kind(), e.to_string()));
        })
    });
    if let Some(e) = write_err {
        return output_result(Err(e));
    }
    if let Err(e) = r {
        let _ = out.flush();
        return fail(e);
    }
    let code = output_result(out.flush());
    if code == EXIT_OK && renderer.state().stopped {
        return fail(format_args!(
            "{}: the rendering stopped at damage (its last paragraph says where); \
             run `sessionfs check` on the file",
            transcript.path().display()
        ));
    }
    code
}
