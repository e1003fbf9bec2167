//! The manager against the in-repo fake server: real child processes over stdio.

use agentd_mcp::config::ServerConfig;
use agentd_mcp::result::map_result;
use agentd_mcp::{names, reap, Manager, ManagerOptions, StartContext};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const FAKE: &str = env!("CARGO_BIN_EXE_agentd-mcp-fake");

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn run_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("running")
    }
    fn manager(&self, servers: &[(&str, ServerConfig)]) -> Manager {
        let inherited = std::env::vars()
            .chain([("AGENTD_TEST_PASS".into(), "passed-through".into())])
            .collect();
        Manager::new(ManagerOptions {
            servers: servers
                .iter()
                .map(|(n, c)| (n.to_string(), c.clone()))
                .collect(),
            start: StartContext {
                workspace: self.dir.path().to_path_buf(),
                run_dir: self.run_dir(),
                session_id: "s1".into(),
                inherited_env: inherited,
                confine: None,
            },
        })
    }
}

fn fake(args: &[&str]) -> ServerConfig {
    ServerConfig {
        command: Some(FAKE.into()),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..ServerConfig::default()
    }
}

fn records(dir: &std::path::Path) -> Vec<reap::Record> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn tools_are_offered_sorted_with_valid_unique_names_and_calls_route_to_raw_names() {
    let env = Env::new();
    let m = env.manager(&[("fake", fake(&["--colliding", "--tools", "200"]))]);
    assert!(m.start().await.is_empty());
    let offered = m.tools().await;
    // The fake's 16 own tools, its 4 colliding names and the 200 asked for.
    assert_eq!(offered.len(), 16 + 4 + 200);
    let mut seen = std::collections::BTreeSet::new();
    for o in &offered {
        assert!(names::is_valid(&o.name), "{}", o.name);
        assert!(seen.insert(o.name.clone()), "duplicate {}", o.name);
    }
    let pairs: Vec<(String, String)> = offered
        .iter()
        .map(|o| (o.server.clone(), o.tool.name.clone()))
        .collect();
    let mut sorted = pairs.clone();
    sorted.sort();
    assert_eq!(pairs, sorted, "offered in (server, tool) order");
    let dotted = offered.iter().find(|o| o.tool.name == "a.b").unwrap();
    let r = m
        .call(
            &dotted.server,
            &dotted.tool.name,
            json!({"k": 1}),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(map_result(&r).text, r#"a.b {"k":1}"#);
    let recs = records(&env.run_dir());
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].server, "fake");
    let pid = recs[0].pid;
    m.stop().await;
    assert!(records(&env.run_dir()).is_empty());
    assert!(!reap::group_alive(pid), "the group is gone after stop");
}

#[tokio::test]
async fn a_server_that_hangs_at_start_fails_within_its_timeout_and_is_killed() {
    let env = Env::new();
    let mut cfg = fake(&["--hang"]);
    cfg.startup_timeout_s = Some(1.0);
    cfg.required = true;
    let m = env.manager(&[("stuck", cfg), ("ok", fake(&[]))]);
    let began = Instant::now();
    let failed = m.start().await;
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].server, "stuck");
    assert!(failed[0].required);
    assert!(
        failed[0].message.contains("startup_timeout_s"),
        "{}",
        failed[0].message
    );
    assert!(m.tools().await.iter().all(|o| o.server == "ok"));
    let st = m.status().await;
    assert_eq!(st[1].name, "stuck");
    assert_eq!(st[1].state, "failed");
    // Only the running server keeps a record; the stuck one's group was killed.
    assert_eq!(records(&env.run_dir()).len(), 1);
    m.stop().await;
}

#[tokio::test]
async fn a_missing_command_fails_at_once_naming_the_server() {
    let env = Env::new();
    let cfg = ServerConfig {
        command: Some("/nonexistent/mcp-server".into()),
        ..ServerConfig::default()
    };
    let m = env.manager(&[("gone", cfg)]);
    let failed = m.start().await;
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].message.contains("`gone`"),
        "{}",
        failed[0].message
    );
}

#[tokio::test]
async fn a_server_dying_mid_call_gives_a_clear_error_and_is_restarted_for_the_next_call() {
    let env = Env::new();
    let m = env.manager(&[("fake", fake(&[]))]);
    assert!(m.start().await.is_empty());
    let c = CancellationToken::new();
    let began = Instant::now();
    let e = m.call("fake", "die", json!({}), &c).await.unwrap_err();
    assert_eq!(e.kind, "transport_closed");
    assert!(e.message.contains("restarted"), "{}", e.message);
    assert!(began.elapsed() < Duration::from_secs(2));
    let r = m
        .call("fake", "echo", json!({"message": "again"}), &c)
        .await
        .unwrap();
    assert_eq!(map_result(&r).text, "Echo: again");
    m.stop().await;
}

#[tokio::test]
async fn interrupt_sends_cancelled_and_answers_at_once() {
    let env = Env::new();
    let m = env.manager(&[("fake", fake(&[]))]);
    assert!(m.start().await.is_empty());
    let c = CancellationToken::new();
    let c2 = c.clone();
    let call = m.call("fake", "wait", json!({}), &c);
    let cancel = async move {
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.cancel();
    };
    let (r, ()) = tokio::join!(call, cancel);
    assert_eq!(r.unwrap_err().kind, "cancelled");
    // The server is still usable.
    let ok = m
        .call(
            "fake",
            "echo",
            json!({"message": "x"}),
            &CancellationToken::new(),
        )
        .await;
    assert!(ok.is_ok());
    m.stop().await;
}

#[tokio::test]
async fn idle_timeout_answers_timeout_and_keeps_the_server() {
    let env = Env::new();
    let mut cfg = fake(&[]);
    cfg.tool_timeout_s = Some(0.5);
    let m = env.manager(&[("fake", cfg)]);
    let c = CancellationToken::new();
    let e = m.call("fake", "wait", json!({}), &c).await.unwrap_err();
    assert_eq!(e.kind, "timeout");
    assert!(m
        .call("fake", "echo", json!({"message": "y"}), &c)
        .await
        .is_ok());
    m.stop().await;
}

#[tokio::test]
async fn a_10_mb_result_and_images_are_mapped() {
    let env = Env::new();
    let m = env.manager(&[("fake", fake(&[]))]);
    let c = CancellationToken::new();
    let r = m.call("fake", "big", json!({}), &c).await.unwrap();
    let mapped = map_result(&r);
    assert_eq!(mapped.text.len(), 10 << 20);
    let img = map_result(&m.call("fake", "image", json!({}), &c).await.unwrap());
    assert_eq!(img.media.len(), 1);
    assert_eq!(&img.media[0].bytes[1..4], b"PNG");
    let s = map_result(&m.call("fake", "structured", json!({}), &c).await.unwrap());
    assert_eq!(s.text, r#"{"answer":42}"#);
    let f = map_result(&m.call("fake", "fail", json!({}), &c).await.unwrap());
    assert!(!f.ok && f.text.contains("refused"));
    let unknown = m.call("fake", "nope", json!({}), &c).await.unwrap_err();
    assert_eq!(unknown.kind, "protocol");
    assert!(
        unknown.message.contains("Unknown tool"),
        "{}",
        unknown.message
    );
    m.stop().await;
}

#[tokio::test]
async fn a_list_changed_burst_is_applied_once_at_the_next_listing() {
    let env = Env::new();
    let m = env.manager(&[("fake", fake(&[]))]);
    assert!(m.start().await.is_empty());
    let before = m.tools().await;
    assert!(!before.iter().any(|o| o.tool.name == "grown"));
    let c = CancellationToken::new();
    m.call("fake", "burst", json!({"count": 50}), &c)
        .await
        .unwrap();
    // The notifications came before the answer on the same pipe, but nothing was
    // listed yet: the change waits for the next listing (the next provider call).
    let lists = |r: serde_json::Value| map_result(&r).text;
    assert_eq!(
        lists(m.call("fake", "lists", json!({}), &c).await.unwrap()),
        "0"
    );
    let after = m.tools().await;
    assert!(
        after.iter().any(|o| o.tool.name == "grown"),
        "the new tool is offered"
    );
    assert_eq!(after.len(), before.len() + 1);
    // 50 notifications, one tools/list; a second listing without news lists nothing.
    assert_eq!(
        lists(m.call("fake", "lists", json!({}), &c).await.unwrap()),
        "1"
    );
    m.tools().await;
    assert_eq!(
        lists(m.call("fake", "lists", json!({}), &c).await.unwrap()),
        "1"
    );
    m.stop().await;
}

#[tokio::test]
async fn the_server_environment_is_only_what_config_names() {
    let env = Env::new();
    let mut cfg = fake(&[]);
    cfg.env_vars = vec!["AGENTD_TEST_PASS".into()];
    cfg.env = BTreeMap::from([("LITERAL".to_string(), "lit".to_string())]);
    let m = env.manager(&[("fake", cfg)]);
    let r = m
        .call("fake", "env", json!({}), &CancellationToken::new())
        .await
        .unwrap();
    let text = map_result(&r).text;
    let keys: Vec<&str> = text.lines().filter_map(|l| l.split('=').next()).collect();
    for k in &keys {
        assert!(
            ["PATH", "HOME", "LANG", "AGENTD_TEST_PASS", "LITERAL"].contains(k),
            "unexpected variable {k}"
        );
    }
    assert!(text.contains("AGENTD_TEST_PASS=passed-through"));
    assert!(text.contains("LITERAL=lit"));
    m.stop().await;
}

#[tokio::test]
async fn records_left_by_a_killed_owner_are_reaped() {
    let env = Env::new();
    let m = env.manager(&[("fake", fake(&[]))]);
    assert!(m.start().await.is_empty());
    let rec = records(&env.run_dir()).pop().unwrap();
    // The owner vanishes without stopping anything.
    std::mem::forget(m);
    assert!(reap::still_ours(&rec));
    let reaped = tokio::task::spawn_blocking({
        let d = env.run_dir();
        move || reap::reap(&d)
    })
    .await
    .unwrap();
    assert_eq!(reaped, vec![rec.clone()]);
    assert!(records(&env.run_dir()).is_empty());
}

#[tokio::test]
async fn a_trickle_of_list_changed_is_debounced_into_one_listing_of_the_final_list() {
    let env = Env::new();
    let m = env.manager(&[("fake", fake(&[]))]);
    assert!(m.start().await.is_empty());
    let c = CancellationToken::new();
    let lists = |r: serde_json::Value| map_result(&r).text;
    // Ten notifications 30 ms apart; the tool `late` exists only from the last one on.
    m.call("fake", "trickle", json!({"count": 10, "every_ms": 30}), &c)
        .await
        .unwrap();
    // Wait for the first notification, then ask for the tools while the trickle still
    // runs, as a provider call would.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !m.tools_changed().await {
        assert!(Instant::now() < deadline, "no list_changed arrived");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        lists(m.call("fake", "lists", json!({}), &c).await.unwrap()),
        "0",
        "nothing is listed before the next listing"
    );
    let began = Instant::now();
    let after = m.tools().await;
    let waited = began.elapsed();
    assert!(
        after.iter().any(|o| o.tool.name == "late"),
        "the listing waited for the trickle to end and got its final list ({waited:?})"
    );
    assert!(
        waited < manager_settle() + Duration::from_millis(500),
        "{waited:?}"
    );
    assert_eq!(
        lists(m.call("fake", "lists", json!({}), &c).await.unwrap()),
        "1",
        "ten notifications, one tools/list"
    );
    m.stop().await;
}

fn manager_settle() -> Duration {
    agentd_mcp::manager::LIST_SETTLE
}
