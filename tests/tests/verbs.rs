//! Session verbs through the real daemon and agentctl (docs/sessions-and-history.md#session-verbs): rename, archive,
//! delete/restore/purge, search, export, usage, and a clean first run.

use agentd_tests::{Daemon, RpcConn};
use serde_json::{json, Value};

fn append(c: &mut RpcConn, sid: &str, events: Value) {
    c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": events}),
    );
}

fn create(d: &Daemon, c: &mut RpcConn, id: &str, title: &str) -> String {
    c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "session_id": id, "title": title}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn listed(d: &Daemon, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["--json", "ls"];
    args.extend_from_slice(extra);
    d.agentctl(args).assert_code(0).json()["sessions"]
        .as_array()
        .unwrap()
        .clone()
}

fn ids(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect()
}

fn err_kind(r: &Value) -> &str {
    r["error"]["data"]["kind"].as_str().unwrap_or("")
}

#[test]
fn first_run_without_a_key_creates_nothing_and_names_the_fix() {
    let d = Daemon::builder()
        .config(
            "default_provider = \"vendor\"\n[providers.vendor]\nkind = \"openai-chat\"\nmodel = \"m\"\napi_key_env = \"AGENTD_TEST_SURELY_UNSET_KEY\"\n",
        )
        .start();
    let out = d.agentctl(["--json", "run", "hello"]);
    out.assert_code(2);
    let e = &out.json()["error"];
    assert_eq!(e["kind"], "invalid_args");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("AGENTD_TEST_SURELY_UNSET_KEY"), "{msg}");
    assert!(msg.contains("config.toml"), "{msg}");
    assert!(listed(&d, &["--all"]).is_empty(), "no junk session");
    // A turn in an existing session records nothing either.
    let sid = d.create_session();
    let mut c = d.connect();
    let r = c.call("agentd/turn", json!({"session_id": sid, "input": "hi"}));
    assert_eq!(err_kind(&r), "invalid_args", "{r}");
    let log = d.log_lines(&sid);
    assert_eq!(log.len(), 1, "{log:?}");
    // The built-ins carry default models: only the key is missing for openai.
    let r = c.call("agentd/preflight", json!({"provider": "openai"}));
    if std::env::var("OPENAI_API_KEY").is_err() {
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("OPENAI_API_KEY"),
            "{r}"
        );
    }
    let r = c.call_ok("agentd/preflight", json!({"provider": "ollama"}));
    assert!(!r["model"].as_str().unwrap().is_empty(), "{r}");
}

#[test]
fn config_init_writes_a_config_the_daemon_accepts() {
    let d = Daemon::start();
    let path = d.root().join("fresh/config.toml");
    let p = path.display().to_string();
    d.agentctl(["--json", "config", "init", "--config", &p])
        .assert_code(0);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("default_provider"), "{text}");
    // Refuses to replace it without --force.
    let out = d.agentctl(["--json", "config", "init", "--config", &p]);
    assert_eq!(out.json()["error"]["kind"], "already_exists");
    d.agentctl(["config", "init", "--force", "--config", &p])
        .assert_code(0);
    // A daemon starts with it.
    let mut d2 = Daemon::builder().config(&text).build();
    d2.spawn();
    d2.wait_ready(std::time::Duration::from_secs(10)).unwrap();
}

#[test]
fn rename_shows_at_once_and_refuses_bad_titles() {
    let d = Daemon::start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, "s1", "old");
    let out = d.agentctl(["--json", "rename", "s1", "  New name  "]);
    out.assert_code(0);
    assert_eq!(out.json()["title"], "New name");
    assert_eq!(listed(&d, &[])[0]["title"], "New name");
    let tree = c.call_ok("agentd/tree", json!({"session_id": sid}));
    assert_eq!(tree["tree"]["title"], "New name");
    let evs = d.log_lines(&sid);
    assert_eq!(evs.last().unwrap()["type"], "session_info");
    // Same title again: nothing recorded.
    let r = c.call_ok(
        "agentd/rename",
        json!({"session_id": sid, "title": "New name"}),
    );
    assert!(r.get("seq").is_none(), "{r}");
    // A 1 MB title, an empty one, a hostile id, an unknown id.
    let big = "x".repeat(1 << 20);
    let r = c.call("agentd/rename", json!({"session_id": sid, "title": big}));
    assert_eq!(err_kind(&r), "invalid_args");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 512"),
        "{r}"
    );
    let r = c.call("agentd/rename", json!({"session_id": sid, "title": " "}));
    assert_eq!(err_kind(&r), "invalid_args");
    let r = c.call(
        "agentd/rename",
        json!({"session_id": "../etc", "title": "x"}),
    );
    assert_eq!(err_kind(&r), "invalid_args");
    assert!(!r.to_string().contains("../etc"), "hostile id echoed: {r}");
    d.agentctl(["rename", "nope", "x"]).assert_code(2);
    assert_eq!(d.log_lines(&sid).len(), 2);
}

#[test]
fn archive_hides_from_ls_and_trees_and_survives_a_restart() {
    let mut d = Daemon::start();
    let mut c = d.connect();
    create(&d, &mut c, "keep", "kept");
    create(&d, &mut c, "old", "archived one");
    d.agentctl(["archive", "old"]).assert_code(0);
    assert_eq!(ids(&listed(&d, &[])), ["keep"]);
    let mut all = ids(&listed(&d, &["--all"]));
    all.sort();
    assert_eq!(all, ["keep", "old"]);
    let ws = c.call_ok("agentd/tree", json!({"workspace": d.workspace()}));
    assert!(!ws["drawing"].as_str().unwrap().contains("old"), "{ws}");
    let ws = c.call_ok(
        "agentd/tree",
        json!({"workspace": d.workspace(), "include_archived": true}),
    );
    assert!(
        ws["drawing"].as_str().unwrap().contains("[archived]"),
        "{ws}"
    );
    // Still loadable, and the title survived.
    let show = c.call_ok("agentd/show", json!({"session_id": "old"}));
    assert_eq!(show["title"], "archived one");
    // Durable: the index is rebuilt from the Log.
    drop(c);
    d.restart();
    assert_eq!(ids(&listed(&d, &[])), ["keep"]);
    d.agentctl(["unarchive", "old"]).assert_code(0);
    assert_eq!(listed(&d, &[]).len(), 2);
}

#[test]
fn rm_moves_to_trash_restore_brings_back_purge_removes() {
    let mut d = Daemon::start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, "parent", "p");
    append(
        &mut c,
        &sid,
        json!([{"type":"user_message","data":{"text":"hello"}}]),
    );
    d.agentctl(["fork", "parent", "--child-session-id", "kid"])
        .assert_code(0);
    let out = d.agentctl(["--json", "rm", "parent"]);
    out.assert_code(0);
    assert_eq!(out.json()["forks"], json!(["kid"]));
    assert!(!d.has_log("parent"));
    assert!(d.in_trash("parent"));
    assert_eq!(ids(&listed(&d, &["--all"])), ["kid"]);
    let r = c.call("agentd/show", json!({"session_id": "parent"}));
    assert_eq!(err_kind(&r), "not_found", "{r}");
    // The fork keeps working and its lineage shows the deleted parent.
    append(
        &mut c,
        "kid",
        json!([{"type":"user_message","data":{"text":"still here"}}]),
    );
    let tree = c.call_ok("agentd/tree", json!({"workspace": d.workspace()}));
    let drawing = tree["drawing"].as_str().unwrap();
    assert!(
        drawing.contains("parent") && drawing.contains("[deleted]"),
        "{drawing}"
    );
    let md = c.call_ok(
        "agentd/export",
        json!({"session_id": "kid", "format": "markdown"}),
    );
    assert!(
        md["content"].as_str().unwrap().contains("`parent` at seq"),
        "{md}"
    );
    // Across a restart too.
    drop(c);
    d.restart();
    let mut c = d.connect();
    let tree = c.call_ok("agentd/tree", json!({"session_id": "parent"}));
    assert_eq!(tree["tree"]["deleted"], true, "{tree}");
    d.agentctl(["restore", "parent"]).assert_code(0);
    let show = c.call_ok("agentd/show", json!({"session_id": "parent"}));
    assert_eq!(show["event_count"], 2);
    // Purge needs confirmation when not on a terminal.
    let out = d.agentctl(["--json", "rm", "parent", "--purge"]);
    out.assert_code(2);
    assert!(d.has_log("parent"));
    d.agentctl(["rm", "parent", "--purge", "--yes"])
        .assert_code(0);
    assert!(!d.has_log("parent"));
    assert!(!d.in_trash("parent"));
    assert!(!d.home().join("trash/parent").exists());
    d.agentctl(["restore", "parent"]).assert_code(2);
    d.agentctl(["rm", "nope"]).assert_code(2);
    let r = c.call("agentd/delete", json!({"session_id": "a/../../b"}));
    assert_eq!(err_kind(&r), "invalid_args");
}

#[test]
fn rm_refuses_while_a_turn_runs() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let script = d.root().join("slow.json");
    std::fs::write(
        &script,
        json!({"rules": [{"steps": [{"tool_calls": [{"name": "shell", "args": {"command": "sleep 30"}}]}, {"text": "done"}]}]}).to_string(),
    )
    .unwrap();
    let mut c = d.connect();
    let sid = d.create_session();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "model": format!("script:{}", script.display()), "wait": false}),
    );
    assert_eq!(r["status"], "running");
    let out = d.agentctl(["--json", "rm", sid.as_str()]);
    out.assert_code(5);
    assert_eq!(out.json()["error"]["kind"], "busy");
    assert!(d.has_log(&sid));
    c.call_ok("agentd/interrupt", json!({"session_id": sid}));
    d.agentctl(["rm", sid.as_str()]).assert_code(0);
}

#[test]
fn search_finds_text_args_and_output_newest_first() {
    let d = Daemon::start();
    let mut c = d.connect();
    let a = create(&d, &mut c, "a", "first");
    append(
        &mut c,
        &a,
        json!([
            {"type":"user_message","data":{"text":"where is the Zebra config?"}},
            {"type":"tool_call","data":{"call_id":"c1","name":"shell","args":{"command":"grep -r zebra ."}}},
            {"type":"tool_result","data":{"call_id":"c1","ok":true,"output":"conf/zebra.toml: stripes = 3"}},
        ]),
    );
    let b = create(&d, &mut c, "b", "second");
    append(
        &mut c,
        &b,
        json!([{"type":"assistant_message","data":{"text":"a zebra again"}}]),
    );
    let out = d.agentctl(["--json", "search", "zebra"]);
    out.assert_code(0);
    let hits = out.json()["hits"].as_array().unwrap().clone();
    let refs: Vec<&str> = hits.iter().map(|h| h["ref"].as_str().unwrap()).collect();
    assert_eq!(refs, ["b@1", "a@3", "a@2", "a@1"], "{hits:#?}");
    let h = &hits[3];
    let (s, e) = (
        h["highlight"][0].as_u64().unwrap() as usize,
        h["highlight"][1].as_u64().unwrap() as usize,
    );
    assert_eq!(&h["snippet"].as_str().unwrap()[s..e], "Zebra");
    // Paging with the cursor, then a type filter.
    let p1 = c.call_ok("agentd/search", json!({"query": "zebra", "limit": 2}));
    assert_eq!(p1["hits"].as_array().unwrap().len(), 2);
    let p2 = c.call_ok(
        "agentd/search",
        json!({"query": "zebra", "limit": 2, "cursor": p1["next_cursor"]}),
    );
    let refs2: Vec<&str> = p2["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["ref"].as_str().unwrap())
        .collect();
    assert_eq!(refs2, ["a@2", "a@1"]);
    let only = c.call_ok(
        "agentd/search",
        json!({"query": "zebra", "types": ["tool_result"]}),
    );
    assert_eq!(only["hits"].as_array().unwrap().len(), 1);
    let human = d.agentctl(["search", "stripes"]);
    assert!(
        human.stdout.contains("a@3") && human.stdout.contains("[stripes]"),
        "{human:?}"
    );
    // Bad queries.
    for q in [
        json!({"query": ""}),
        json!({"query": "(", "regex": true}),
        json!({"query": "x".repeat(5000)}),
        json!({"query": "(\\w{200}){200}", "regex": true}),
    ] {
        let r = c.call("agentd/search", q.clone());
        assert_eq!(err_kind(&r), "invalid_args", "{q}: {r}");
    }
}

#[test]
fn export_markdown_html_jsonl_and_damage() {
    let d = Daemon::start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, "ex", "Export me");
    append(
        &mut c,
        &sid,
        json!([
            {"type":"user_message","data":{"text":"hi <b>there</b>"}},
            {"type":"tool_call","data":{"call_id":"c1","name":"list_dir","args":{"path":"."}}},
            {"type":"tool_result","data":{"call_id":"c1","ok":true,"output":"a.txt"}},
            {"type":"assistant_message","data":{"text":"done"}},
        ]),
    );
    let md = d.agentctl(["export", "ex"]);
    md.assert_code(0);
    assert!(md.stdout.starts_with("# Export me\n"), "{}", md.stdout);
    assert!(md.stdout.contains("### Tool call `list_dir`"));
    let out = d.root().join("ex.html");
    let o = out.display().to_string();
    d.agentctl(["--json", "export", "ex", "--format", "html", "--output", &o])
        .assert_code(0);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("<details") && page.contains("hi &lt;b&gt;there&lt;/b&gt;"));
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    let raw = d.agentctl(["export", "ex", "--format", "jsonl"]);
    assert_eq!(raw.stdout.as_bytes(), d.log_bytes("ex").as_slice());
    // Damage: a corrupt line in the middle (written while the session is not loaded
    // by this daemon: a fresh one).
    let sid2 = create(&d, &mut c, "dmg", "damaged");
    d.append_raw_line(&sid2, b"{\"not\": json");
    let r = c.call_ok(
        "agentd/export",
        json!({"session_id": "dmg", "format": "markdown"}),
    );
    assert_eq!(r["damaged_lines"], 1);
    assert!(
        r["content"]
            .as_str()
            .unwrap()
            .contains("Damaged Log line 2"),
        "{r}"
    );
    let r = c.call(
        "agentd/export",
        json!({"session_id": "ex", "format": "pdf"}),
    );
    assert_eq!(err_kind(&r), "invalid_args");
    let r = c.call(
        "agentd/export",
        json!({"session_id": "ex", "format": "html", "output_path": "rel.html"}),
    );
    assert_eq!(err_kind(&r), "invalid_args");
    d.agentctl(["export", "missing"]).assert_code(2);
}

#[test]
fn usage_sums_tokens_and_prices_them() {
    let d = Daemon::builder()
        .config("[prices.m1]\ninput = 2.0\noutput = 10.0\n")
        .start();
    let mut c = d.connect();
    for (sid, model, input, output) in [
        ("u1", "m1", 1000, 100),
        ("u2", "m1", 3000, 300),
        ("u2", "m2", 5, 5),
    ] {
        if c.call("agentd/show", json!({"session_id": sid}))
            .get("error")
            .is_some()
        {
            create(&d, &mut c, sid, sid);
        }
        append(
            &mut c,
            sid,
            json!([{"type":"provider_usage","data":{"provider":"p","model":model,
            "usage":{"input_tokens":input,"output_tokens":output}}}]),
        );
    }
    let out = d.agentctl(["--json", "usage"]);
    out.assert_code(0);
    let v = out.json();
    assert_eq!(v["total"]["calls"], 3);
    assert_eq!(v["total"]["input_tokens"], 4005);
    let m1 = &v["rows"][0];
    assert_eq!(m1["key"], "m1");
    let cost = m1["cost"].as_f64().unwrap();
    assert!(
        (cost - (4000.0 * 2.0 + 400.0 * 10.0) / 1e6).abs() < 1e-12,
        "{v}"
    );
    assert_eq!(v["unpriced_models"], json!(["m2"]));
    let by = d.agentctl(["--json", "usage", "u1", "--by", "session"]);
    assert_eq!(by.json()["rows"][0]["key"], "u1");
    assert_eq!(by.json()["total"]["calls"], 1);
    let later = d.agentctl(["--json", "usage", "--since", "2999-01-01"]);
    assert_eq!(later.json()["total"]["calls"], 0);
    d.agentctl(["usage", "--since", "yesterday"]).assert_code(2);
}
