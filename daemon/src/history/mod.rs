//! History projections: replay, reconciliation, checkpoint, compaction, fork, tree (DESIGN §7–§9).
