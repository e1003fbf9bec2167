#![no_main]
//! `import_auto`: see `agentd_fuzz::import`; the format is detected from the content.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::import::run(None, data));
