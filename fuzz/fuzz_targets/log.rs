#![no_main]
//! `log`: see `agentd_fuzz::log`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::log::run(data));
