//! Nothing left behind: a daemon killed (SIGKILL) in the middle of an import leaves the
//! import's temp file in `sessions/`; the next daemon removes it at start-up, counts it
//! in `agentd/status`, and keeps every real Log.

use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

fn tmp_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp") {
            out.push(name.clone());
        }
        if e.file_type().unwrap().is_dir() {
            for r in std::fs::read_dir(e.path().join("resources"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let n = r.file_name().to_string_lossy().into_owned();
                if n.ends_with(".tmp") {
                    out.push(format!("{name}/resources/{n}"));
                }
            }
        }
    }
    out
}

/// A pi session file large enough that its import takes a while.
fn big_pi_session(path: &Path, workspace: &Path, messages: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(
        f,
        "{}",
        json!({"type":"session","id":"big","timestamp":"2025-12-09T00:53:29.825Z",
            "cwd": workspace, "provider":"anthropic","modelId":"m"})
    )
    .unwrap();
    let text = "lorem ipsum dolor sit amet ".repeat(40);
    for i in 0..messages {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        // Plain ASCII text: formatted directly, no escaping needed.
        writeln!(
            f,
            r#"{{"type":"message","timestamp":"2025-12-09T00:53:30.000Z","message":{{"role":"{role}","content":[{{"type":"text","text":"{i} {text}"}}],"timestamp":{}}}}}"#,
            1765233665292u64 + i as u64
        )
        .unwrap();
    }
    f.flush().unwrap();
}

fn status(d: &Daemon) -> Value {
    d.connect().call_ok("agentd/status", json!({}))
}

#[test]
fn temp_file_of_a_killed_import_is_removed_at_start_and_counted() {
    let mut d = Daemon::start();
    let sid = d.create_session();
    assert_eq!(status(&d)["leftover_tmp_removed"], 0);
    let sessions = d.home().join("sessions");
    let src = d.root().join("big.jsonl");
    big_pi_session(&src, d.workspace(), 20_000);

    // Start the import without waiting for its answer; kill the daemon once its temp
    // file exists.
    let mut conn = d.connect();
    let req = json!({"jsonrpc":"2.0","id":1,"method":"agentd/import","params":{
        "format":"pi","path": src, "workspace": d.workspace()}});
    conn.send_raw(format!("{req}\n").as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let t = tmp_files(&sessions);
        if !t.is_empty() {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the import never made a temp file in sessions/"
        );
        std::thread::yield_now();
    };
    d.kill9();
    let left = tmp_files(&sessions);
    assert!(
        !left.is_empty(),
        "the kill left no temp file (the import finished first: {found:?}); make the source bigger"
    );
    // A resource temp file of an interrupted tool output store, too.
    let res = sessions.join(&sid).join("resources");
    std::fs::create_dir_all(&res).unwrap();
    std::fs::write(res.join(".0123abcd.77.tmp"), b"partial").unwrap();
    let expected = left.len() as u64 + 1;

    d.spawn();
    d.wait_ready(Duration::from_secs(30)).unwrap();
    let st = status(&d);
    assert_eq!(st["leftover_tmp_removed"], expected, "{st}");
    assert_eq!(tmp_files(&sessions), Vec::<String>::new());
    // The real session is untouched and serving; the cut import made no session.
    let list = d.connect().call_ok("agentd/list", json!({}));
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![sid.as_str()], "{list}");
    d.connect().call_ok(
        "agentd/append",
        json!({"session_id": sid, "events":[{"type":"user_message","data":{"text":"still here"}}]}),
    );

    // A clean restart finds nothing more to remove.
    d.restart();
    assert_eq!(status(&d)["leftover_tmp_removed"], 0);
}
