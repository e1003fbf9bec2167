#![no_main]
//! `apply_patch`: see `agentd_fuzz::patch`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::patch::run(data));
