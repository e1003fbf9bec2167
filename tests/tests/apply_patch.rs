//! Black-box tests of the `apply_patch` tool: the real daemon against a local
//! Responses server (which offers the tool by default) that records each request.

use agentd_tests::sse::{sse_server, typed_sse};
use agentd_tests::{git, is_type, Daemon, RpcConn};
use serde_json::{json, Value};

fn done(items: Vec<Value>) -> String {
    let mut evs: Vec<Value> = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| json!({"type": "response.output_item.done", "output_index": i, "item": item}))
        .collect();
    evs.push(json!({"type": "response.completed", "response": {"id": "r1", "model": "m1",
        "status": "completed", "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}}));
    typed_sse(&evs)
}

/// A step that calls `apply_patch` with `patch`, then a step that answers.
fn patch_turn(call_id: &str, patch: &str) -> [String; 2] {
    let args = json!({"input": patch}).to_string();
    [
        done(vec![
            json!({"type": "function_call", "id": format!("fc_{call_id}"),
            "call_id": call_id, "name": "apply_patch", "arguments": args}),
        ]),
        done(vec![json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "done"}]})]),
    ]
}

fn result_of(c: &mut RpcConn, sid: &str, call_id: &str) -> Value {
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"].clone();
    evs.as_array()
        .unwrap()
        .iter()
        .find(|e| is_type(e, "tool_result") && e["data"]["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id}: {evs}"))["data"]
        .clone()
}

const ADD_UPDATE_MOVE_DELETE: &str = "*** Begin Patch
*** Add File: docs/new.md
+# New
+
+text
*** Update File: src/lib.rs
@@ fn one() {
-    1
+    10
@@ fn three() {
     let x = 3;
-    x
+    x * 3
*** Update File: old/name.txt
*** Move to: renamed/name.txt
@@
-first
+FIRST
 second
*** Delete File: gone.txt
*** End Patch
";

const LIB: &str =
    "fn one() {\n    1\n}\n\nfn two() {\n    2\n}\n\nfn three() {\n    let x = 3;\n    x\n}\n";

#[test]
fn apply_patch_adds_updates_moves_deletes_and_a_failing_patch_changes_nothing() {
    let failing = "*** Begin Patch
*** Add File: partial.txt
+should not appear
*** Update File: src/lib.rs
@@ fn two() {
-    22
+    3
*** End Patch";
    let mut replies = Vec::new();
    replies.extend(patch_turn("c_ok", ADD_UPDATE_MOVE_DELETE));
    replies.extend(patch_turn("c_fail", failing));
    replies.extend(patch_turn(
        "c_out",
        "*** Begin Patch\n*** Add File: ../outside.txt\n+x\n*** End Patch",
    ));
    replies.extend(patch_turn(
        "c_hook",
        "*** Begin Patch\n*** Add File: .git/hooks/pre-commit\n+#!/bin/sh\n+touch /tmp/pwned\n*** End Patch",
    ));
    replies.extend(patch_turn(
        "c_ro",
        "*** Begin Patch\n*** Delete File: docs/new.md\n*** End Patch",
    ));
    let (base, server) = sse_server(replies);
    let config = format!(
        "default_provider = \"local\"\n[providers.local]\nkind = \"openai-responses\"\nbase_url = \"{base}\"\nmodel = \"m1\"\ncontext_window = 100000\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    let ws = d.workspace().to_path_buf();
    git(&ws, &["init", "-q"]);
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("old")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), LIB).unwrap();
    std::fs::write(ws.join("old/name.txt"), "first\nsecond\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
    let mut c = d.connect();
    let sid = c.call_ok("agentd/create", json!({"workspace": ws}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let turn = |c: &mut RpcConn, extra: Value| {
        let mut p = json!({"session_id": sid, "input": "edit"});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        let r = c.call_ok("agentd/turn", p);
        assert_eq!(r["status"], "completed", "{r}");
    };

    turn(&mut c, json!({}));
    let r = result_of(&mut c, &sid, "c_ok");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        std::fs::read_to_string(ws.join("docs/new.md")).unwrap(),
        "# New\n\ntext\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/lib.rs")).unwrap(),
        LIB.replace("    1\n", "    10\n")
            .replace("    x\n}", "    x * 3\n}")
    );
    assert!(!ws.join("old/name.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("renamed/name.txt")).unwrap(),
        "FIRST\nsecond\n"
    );
    assert!(!ws.join("gone.txt").exists());
    let uris: Vec<&str> = r["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["docs/new.md", "renamed/name.txt", "src/lib.rs"]);

    let lib_after = std::fs::read_to_string(ws.join("src/lib.rs")).unwrap();
    turn(&mut c, json!({}));
    let r = result_of(&mut c, &sid, "c_fail");
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error"]["kind"], "invalid_args", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("src/lib.rs"), "{msg}");
    assert!(msg.contains("\"22\"") || msg.contains("    22"), "{msg}");
    assert!(msg.contains("patch line 5"), "{msg}");
    assert!(
        !ws.join("partial.txt").exists(),
        "a failing patch wrote a file"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/lib.rs")).unwrap(),
        lib_after
    );

    turn(&mut c, json!({}));
    let r = result_of(&mut c, &sid, "c_out");
    assert_eq!(r["ok"], false, "{r}");
    assert!(!ws.parent().unwrap().join("outside.txt").exists());

    turn(&mut c, json!({}));
    let r = result_of(&mut c, &sid, "c_hook");
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error"]["kind"], "permission_denied", "{r}");
    assert!(!ws.join(".git/hooks/pre-commit").exists());

    turn(&mut c, json!({"permission_mode": "read_only"}));
    let r = result_of(&mut c, &sid, "c_ro");
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        ws.join("docs/new.md").exists(),
        "read_only ran a mutating tool"
    );

    let bodies = server.join().unwrap();
    let tools: Vec<&str> = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"apply_patch"), "{tools:?}");
    // Snapshots saw the patch: the turn's after-snapshot lists the files it changed.
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"].clone();
    let snap = evs
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            is_type(e, "workspace_snapshot")
                && e["data"]["call_id"] == "c_ok"
                && e["data"]["reason"] == "after"
        })
        .unwrap_or_else(|| panic!("no after snapshot: {evs}"));
    let changed = snap["data"]["files_changed"].to_string();
    for p in [
        "docs/new.md",
        "renamed/name.txt",
        "src/lib.rs",
        "gone.txt",
        "old/name.txt",
    ] {
        assert!(changed.contains(p), "{p} not in {changed}");
    }
}
