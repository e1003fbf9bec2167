//! agentd-base: the small text helpers every layer shares (output caps, hashing,
//! one-line clipping, secret-length bounds).
//!
//! It owns no state and does no I/O. It must never depend on another agentd crate, an
//! async runtime or a network crate: everything else builds on it.

pub mod text;
