#![no_main]
//! `import_pi`: see `agentd_fuzz::import`.
use agentd::import::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::import::run(Some(Format::Pi), data));
