//! The `.by-*` views of the mount and `sessionfs list --by` (issue 14;
//! MOUNT.md, The tree): sessions by header cwd as a directory tree, by
//! local creation date, and by title. Read-only; built from each
//! session's header and first user message, read once and persisted with
//! the frame indexes outside the store.
//!
//! * [`names`]: cwd components, link names, escaping;
//! * [`facts`]: what a view needs of one session, and its title;
//! * [`tree`]: the three trees of one moment;
//! * [`catalog`]: the facts kept current and persisted;
//! * [`sweeper`]: when the catalog looks at every transcript again.

pub mod catalog;
pub mod facts;
pub mod names;
pub mod sweeper;
pub mod tree;

pub use catalog::ViewCatalog;
pub use facts::ViewFacts;
pub use tree::{ViewDir, ViewKind, ViewSnapshot, ViewTree};
