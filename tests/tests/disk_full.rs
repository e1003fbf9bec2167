//! A really full filesystem: the daemon's home is a small tmpfs (mounted by the test;
//! it needs root / CAP_SYS_ADMIN and fails naming that otherwise). Filling it makes
//! append, create, fork, compact and import fail with `disk_full` (never the generic
//! `log_write_failed`) and `next_actions`; nothing acknowledged is lost; once space is
//! freed, appends resume with contiguous seqs.

use agentd_tests::{read_log_lines, Daemon, RpcConn};
use serde_json::{json, Value};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A tmpfs mounted for the test's lifetime; detached on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, bytes: u64) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let target = CString::new(at.as_os_str().as_bytes()).unwrap();
        let opts = CString::new(format!("size={bytes},mode=0700")).unwrap();
        // SAFETY: all strings are NUL-terminated and outlive the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        assert_eq!(
            rc,
            0,
            "mounting a {bytes}-byte tmpfs at {} failed ({}): this test needs root (CAP_SYS_ADMIN) to make a really full filesystem",
            at.display(),
            std::io::Error::last_os_error()
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: as above. MNT_DETACH: the killed daemon's files may still be closing.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Fills the filesystem holding `dir` to the last byte with a file of its own.
fn fill(dir: &Path) -> PathBuf {
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).unwrap();
    let block = vec![0u8; 4096];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    // Smaller writes take the last partial page.
    while let Ok(1) = f.write(&[0u8]) {}
    p
}

fn assert_disk_full(r: &Value, what: &str) {
    let err = r
        .get("error")
        .unwrap_or_else(|| panic!("{what} succeeded on a full disk: {r}"));
    assert_eq!(err["data"]["kind"], "disk_full", "{what}: {r}");
    let actions = err["data"]["details"]["next_actions"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no next_actions: {r}"));
    assert!(!actions.is_empty(), "{what}: {r}");
}

fn append(c: &mut RpcConn, sid: &str, text: &str) -> Value {
    c.call(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": text}}]}),
    )
}

#[test]
fn full_filesystem_gives_disk_full_everywhere_and_loses_nothing() {
    let mut d = Daemon::builder().build();
    let _fs = Tmpfs::mount(d.home(), 2 << 20);
    d.spawn();
    d.wait_ready(std::time::Duration::from_secs(30)).unwrap();
    let ws = d.workspace().display().to_string();
    let mut c = d.connect();
    let sid = d.create_session();

    // Fill the disk with appends until one is refused.
    let big = "x".repeat(16 * 1024);
    let mut acked: Vec<u64> = Vec::new();
    let refusal = loop {
        let r = append(&mut c, &sid, &big);
        match r.get("result") {
            Some(res) => acked.push(res["first_seq"].as_u64().unwrap()),
            None => break r,
        }
        assert!(acked.len() < 10_000, "a 2 MiB filesystem never filled");
    };
    assert_disk_full(&refusal, "append");
    // Take the last pages too, so every write below needs space that is not there.
    let filler = fill(d.home());

    // (A small append could still fit in the slack of the Log's last page; 8 KiB
    // needs new pages.)
    assert_disk_full(&append(&mut c, &sid, &"y".repeat(8192)), "8 KiB append");
    assert_disk_full(&c.call("agentd/create", json!({"workspace": ws})), "create");
    assert_disk_full(&c.call("agentd/fork", json!({"session_id": sid})), "fork");
    assert_disk_full(
        &c.call(
            "agentd/compact",
            json!({"session_id": sid, "tail_events": 2}),
        ),
        "compact",
    );
    let src = d.root().join("pi.jsonl");
    std::fs::write(
        &src,
        format!(
            "{}\n{}\n",
            json!({"type":"session","id":"p","timestamp":"2025-12-09T00:53:29.825Z","cwd": ws}),
            json!({"type":"message","timestamp":"2025-12-09T00:53:30.000Z","message":{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":1}})
        ),
    )
    .unwrap();
    assert_disk_full(
        &c.call(
            "agentd/import",
            json!({"format":"pi","path": src, "workspace": ws}),
        ),
        "import",
    );
    // Reads still work on a full disk.
    let shown = c.call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(shown["last_seq"].as_u64(), acked.last().copied());

    // Space comes back: appends resume right after the last acknowledged seq.
    std::fs::remove_file(filler).unwrap();
    let r = append(&mut c, &sid, "after");
    let next = r["result"]["first_seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("append after freeing space: {r}"));
    assert_eq!(Some(next - 1), acked.last().copied());
    c.call_ok(
        "agentd/compact",
        json!({"session_id": sid, "tail_events": 2}),
    );

    // Every acknowledged event is in the Log once, seqs contiguous, no torn line,
    // also as a fresh daemon loads it.
    d.restart();
    let lines = read_log_lines(&d.log_path(&sid));
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    let want: Vec<u64> = (0..seqs.len() as u64).collect();
    assert_eq!(seqs, want, "seqs not contiguous from 0");
    for s in acked.iter().chain([&next]) {
        assert!(seqs.contains(s), "acknowledged seq {s} missing");
    }
    let mut c = d.connect();
    let shown = c.call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(shown["corrupt_lines"], json!([]), "{shown}");
    eprintln!(
        "{} appends acknowledged before the disk filled; Log has {} lines",
        acked.len(),
        seqs.len()
    );
}
