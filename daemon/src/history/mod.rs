//! History projections: replay, reconciliation, checkpoint, compaction, fork, tree (DESIGN §7–§9).

pub mod checkpoint;
pub mod memory;
pub mod view;
