//! `apply_patch`: bytes as the `apply_patch` tool's `input`. Parsing never panics; a
//! patch that parses names a non-empty path in every operation and `paths` lists them
//! (move targets after their source); its updates apply, in order, to a text made of
//! each chunk's context line and expected lines, and nothing a chunk does not remove
//! is lost from that text.

use agentd::tools::patch::{apply_update, parse, paths, Op};

pub fn run(data: &[u8]) {
    let input = String::from_utf8_lossy(data);
    let Ok(patch) = parse(&input) else { return };
    let mut want = Vec::new();
    for op in &patch.ops {
        assert!(!op.path().is_empty());
        want.push(op.path().to_string());
        if let Op::Update {
            move_to: Some(t), ..
        } = op
        {
            want.push(t.clone());
        }
    }
    assert_eq!(paths(&input), want);
    for op in &patch.ops {
        let Op::Update { chunks, path, .. } = op else {
            continue;
        };
        // Each chunk found after the previous one: no pure insertion (it goes to the
        // end without a context line) and no end-of-file anchor.
        if chunks.iter().any(|c| c.old.is_empty() || c.eof) {
            continue;
        }
        let mut text = String::new();
        for c in chunks {
            if let Some(ctx) = &c.context {
                text.push_str(ctx);
                text.push('\n');
            }
            for l in &c.old {
                text.push_str(l);
                text.push('\n');
            }
        }
        if text.contains('\r') {
            continue;
        }
        let out = apply_update(&text, chunks, path)
            .unwrap_or_else(|e| panic!("chunks do not apply to their own lines: {e}"));
        for c in chunks {
            for l in c.new.iter().filter(|l| !l.trim().is_empty()) {
                assert!(out.contains(l.trim()), "{l:?} missing from {out:?}");
            }
        }
    }
}
