#![no_main]
//! `sandbox_policy`: see `agentd_fuzz::sandbox`; the input is a structured policy input.
use agentd_fuzz::sandbox::PolicyInput;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: PolicyInput| agentd_fuzz::sandbox::run(&input));
