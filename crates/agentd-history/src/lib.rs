//! agentd-history: pure projections over Log events: replay, reconciliation, checkpoint,
//! compaction, fork, tree (docs/history-rules.md).
//!
//! It must never depend on tokio, a network crate, a database client or any other agentd
//! crate but `agentd-proto` and `agentd-base` (the `history_is_pure` test in
//! `tests/tests/layers.rs` checks its dependency tree).
//!
//! Every function here is pure over `agentd_proto::Event`s: it reads events and returns
//! values (replay items, event drafts, complete child events, tree nodes). The session
//! actor owns the Log, calls these projections and records what they return; nothing in
//! this module touches a file or a socket. That is what lets the same history fold to
//! byte-identical provider input every time, and what makes each rule testable alone.
//!
//! - [`fold`]: the incremental in-memory state of one session and its replay (docs/history-rules.md#replay).
//! - [`replay`]: replay item conversion, the pairing guard and replay stats (docs/history-rules.md#replay).
//! - [`reconcile`]: orphan tool-call closures and interrupted turn ends (docs/history-rules.md#reconciliation).
//! - [`compaction`]: the deterministic compaction plan (docs/history-rules.md#compaction).
//! - [`checkpoint`], [`view`], [`memory`]: the deterministic checkpoint, its `view_v1`
//!   text and `memory_update` validation (docs/history-rules.md#checkpoint).
//! - [`fork`]: the child Log of a fork and its branch summary (docs/history-rules.md#fork).
//! - [`tree`]: the fork tree over the lineage index (docs/history-rules.md#tree).
//! - [`instructions`]: the recorded project instructions as replay renders them.
//! - [`snapshots`]: the workspace timeline: the tree at a seq, the session's own changes.
//! - [`stored`], [`canonical`]: a loaded session's events as their Log lines, and the
//!   one-pass parse of a line in agentd's own form.
//! - [`digest`]: excerpts, touched files, open tasks shared by compaction and fork.
//! - [`render`]: the fixed text formats replay injects for compactions and branch summaries.
//!
//! Golden files: rendered texts are pinned by files under `crates/agentd-history/src/golden/`,
//! compared with `include_str!`. Run the tests with `UPDATE_GOLDEN=1` to rewrite them after
//! an intended change, then review the diff before committing.

pub mod canonical;
pub mod checkpoint;
pub mod compaction;
pub mod digest;
pub mod fold;
pub mod fork;
pub mod instructions;
pub mod memory;
pub mod reconcile;
pub mod render;
pub mod replay;
pub mod snapshots;
pub mod stored;
pub mod tree;
pub mod view;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod proptests;
/// Test fixtures other crates' tests use too (feature `testutil`).
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;
