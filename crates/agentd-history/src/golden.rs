//! Golden-file comparison for rendered texts (test only).
//!
//! `golden!("name.txt", actual)` compares `actual` with `golden/name.txt` as compiled in by
//! `include_str!`; with `UPDATE_GOLDEN=1` in the environment it rewrites the file instead,
//! so an intended format change is one test run plus a reviewed diff.

use std::path::Path;

pub(crate) fn check(name: &str, expected: &str, actual: &str) {
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/golden")
            .join(name);
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    assert!(
        expected == actual,
        "golden {name} differs (rerun with UPDATE_GOLDEN=1 to accept)\n--- expected\n{expected}\n--- actual\n{actual}"
    );
}

macro_rules! golden {
    ($name:literal, $actual:expr) => {
        $crate::golden::check(
            $name,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/golden/", $name)),
            &$actual,
        )
    };
}
pub(crate) use golden;
