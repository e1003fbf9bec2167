//! Every committed corpus and regression input runs through its target without a
//! panic: a crash found by fuzzing, once fixed and committed under
//! `fuzz/regressions/TARGET/`, stays fixed.

use agentd_fuzz::{regression_inputs, targets};

#[test]
fn committed_inputs_never_crash_their_targets() {
    let mut ran = 0;
    for name in targets::NAMES {
        let target = targets::by_name(name).unwrap();
        let inputs = regression_inputs(name);
        assert!(
            !inputs.is_empty(),
            "target {name} has no committed seed inputs"
        );
        for (path, bytes) in inputs {
            if let Err(e) = std::panic::catch_unwind(|| target(&bytes)) {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{name}: {} crashes: {msg}", path.display());
            }
            ran += 1;
        }
    }
    targets::cleanup();
    assert!(ran > 0);
}
