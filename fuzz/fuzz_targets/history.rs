#![no_main]
//! `history`: see `agentd_fuzz::history`; the input is a structured program.
use agentd_fuzz::history::Step;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|steps: Vec<Step>| agentd_fuzz::history::run(&steps));
