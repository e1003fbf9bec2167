//! Stands in for the daemon binary in the crate's tests: the helper and nothing else.

fn main() {
    #[cfg(target_os = "linux")]
    if agentd_sandbox::is_helper_invocation() {
        agentd_sandbox::helper_main();
    }
    eprintln!(
        "sandbox-helper-test: run with {}",
        agentd_sandbox::plan::HELPER_ARG
    );
    std::process::exit(2);
}
