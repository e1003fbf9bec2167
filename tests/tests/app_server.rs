//! Black-box tests of `agentctl app-server` (docs/codex-app-server.md): the real bridge
//! on a Unix socket, spoken to as WebSocket JSON-RPC, against a real daemon on the
//! offline `script` provider. Every message the bridge sends is checked against the
//! pinned Codex JSON Schemas; every wait is on a message with a deadline.
//!
//! The real Codex TUI driving the bridge is `tests/tests/codex_tui.rs`.

use agentd_proto::session_uuid;
use agentd_tests::app_server::{script_model, Bridge, Schemas, Ws, WAIT};
use agentd_tests::sse::{
    chat_sse, chat_text, chat_tools, last_user_and_tool_results, sse_server, MockProvider, Reply,
};
use agentd_tests::{is_type, Daemon};
use serde_json::{json, Value};
use std::collections::HashSet;
use tokio_tungstenite::tungstenite::Message;

fn daemon() -> Daemon {
    Daemon::builder().env("AGENTD_DURABILITY", "none").start()
}

fn bridge(d: &Daemon) -> Bridge {
    Bridge::start(d, &["--model", &script_model()])
}

/// The response type of each mapped method, as the schema names it (`None`: the method
/// is not in the schema's `ClientRequest`, the shape the TUI accepted is checked by hand).
const MAPPED: &[(&str, Option<&str>)] = &[
    ("thread/start", Some("v2/ThreadStartResponse")),
    ("thread/resume", Some("v2/ThreadResumeResponse")),
    ("thread/fork", Some("v2/ThreadForkResponse")),
    ("thread/list", Some("v2/ThreadListResponse")),
    ("thread/loaded/list", Some("v2/ThreadLoadedListResponse")),
    ("thread/read", Some("v2/ThreadReadResponse")),
    ("thread/turns/list", Some("v2/ThreadTurnsListResponse")),
    ("thread/items/list", Some("v2/ThreadItemsListResponse")),
    ("thread/name/set", Some("v2/ThreadSetNameResponse")),
    ("thread/archive", Some("v2/ThreadArchiveResponse")),
    ("thread/unarchive", Some("v2/ThreadUnarchiveResponse")),
    ("thread/delete", Some("v2/ThreadDeleteResponse")),
    (
        "thread/compact/start",
        Some("v2/ThreadCompactStartResponse"),
    ),
    ("thread/revert", Some("v2/ThreadRevertResponse")),
    ("thread/unsubscribe", Some("v2/ThreadUnsubscribeResponse")),
    ("turn/start", Some("v2/TurnStartResponse")),
    ("turn/interrupt", Some("v2/TurnInterruptResponse")),
    ("turn/steer", Some("v2/TurnSteerResponse")),
    ("thread/goal/get", Some("v2/ThreadGoalGetResponse")),
    ("thread/goal/set", Some("v2/ThreadGoalSetResponse")),
    ("thread/goal/clear", Some("v2/ThreadGoalClearResponse")),
    ("model/list", Some("v2/ModelListResponse")),
    ("account/read", Some("v2/GetAccountResponse")),
    ("account/login/start", Some("v2/LoginAccountResponse")),
    (
        "account/login/cancel",
        Some("v2/CancelLoginAccountResponse"),
    ),
    ("account/logout", Some("v2/LogoutAccountResponse")),
    ("config/read", Some("v2/ConfigReadResponse")),
    (
        "configRequirements/read",
        Some("v2/ConfigRequirementsReadResponse"),
    ),
    ("skills/list", Some("v2/SkillsListResponse")),
    ("hooks/list", Some("v2/HooksListResponse")),
    ("plugin/installed", Some("v2/PluginInstalledResponse")),
    ("collaborationMode/list", None),
    ("account/bedrock/checkGovCloudRequirements", None),
];

/// A client that checks every message against the schema as it goes.
struct Checked {
    ws: Ws,
    schemas: Schemas,
    checked: usize,
}

impl Checked {
    async fn new(b: &Bridge) -> Checked {
        let (ws, init) = Ws::initialized(&b.socket).await;
        let mut schemas = Schemas::new();
        schemas.check("InitializeResponse", &init["result"]);
        Checked {
            ws,
            schemas,
            checked: 0,
        }
    }

    /// Checks every notification and server request received since the last call.
    fn check_seen(&mut self) {
        let seen: Vec<Value> = self.ws.seen[self.checked..].to_vec();
        self.checked = self.ws.seen.len();
        for v in seen {
            match (v.get("method"), v.get("id")) {
                (Some(_), None) => self.schemas.check("ServerNotification", &v),
                (Some(_), Some(_)) => self.schemas.check("ServerRequest", &v),
                (None, _) if v.get("error").is_some() => {
                    self.schemas.check("JSONRPCErrorError", &v["error"])
                }
                _ => {}
            }
        }
    }

    /// Calls a mapped method; its result, checked against its response type.
    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.ws.call(method, params).await;
        self.check_seen();
        assert!(r.get("error").is_none(), "{method}: {r}");
        let def = MAPPED
            .iter()
            .find(|(m, _)| *m == method)
            .unwrap_or_else(|| panic!("{method} is not in MAPPED"))
            .1;
        if let Some(def) = def {
            self.schemas.check(def, &r["result"]);
        }
        r["result"].clone()
    }

    /// Calls a method that must fail; its error object.
    async fn err(&mut self, method: &str, params: Value) -> Value {
        let r = self.ws.call(method, params).await;
        self.check_seen();
        assert!(r.get("result").is_none(), "{method} should fail: {r}");
        r["error"].clone()
    }

    async fn note(&mut self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let v = self.ws.note(method, pred).await;
        self.check_seen();
        v
    }
}

fn log_events(d: &Daemon, sid: &str) -> Vec<Value> {
    d.connect()
        .call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn sid_of(uuid: &str) -> String {
    match session_uuid::resolve(uuid) {
        Some(session_uuid::Resolved::Session(s)) => s,
        other => panic!("{uuid} does not decode to an agentd id: {other:?}"),
    }
}

/// Starts a turn and waits for its `turn/completed`; returns the notifications' params
/// of that turn, in order, as `(method, params)`.
/// The texts of the agent messages a turn's notifications completed, in order.
fn answers(notes: &[(String, Value)]) -> Vec<Value> {
    notes
        .iter()
        .filter(|(m, p)| m == "item/completed" && p["item"]["type"] == "agentMessage")
        .map(|(_, p)| p["item"]["text"].clone())
        .collect()
}

async fn run_turn(c: &mut Checked, thread: &str, text: &str) -> Vec<(String, Value)> {
    let from = c.ws.seen.len();
    let r = c
        .ok(
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": text, "text_elements": []}],
                "clientUserMessageId": format!("msg-{text}")}),
        )
        .await;
    let turn_id = r["turn"]["id"].as_str().unwrap().to_string();
    assert!(!turn_id.is_empty());
    let done = c
        .note("turn/completed", |p| p["turn"]["id"] == turn_id.as_str())
        .await;
    assert_eq!(done["threadId"], thread);
    c.ws.seen[from..]
        .iter()
        .filter(|v| v.get("id").is_none() && v["params"]["threadId"] == thread)
        .map(|v| {
            (
                v["method"].as_str().unwrap_or("").to_string(),
                v["params"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mapped_method_answers_in_the_pinned_schema_and_acts_on_agentd() {
    let d = daemon();
    let b = bridge(&d);
    let mut c = Checked::new(&b).await;
    let ws_dir = d.workspace().to_string_lossy().into_owned();

    // agentd's userAgent has no `name/version` product, so Codex's clients do not take
    // agentd's version for an outdated Codex server's.
    let (_, init) = Ws::initialized(&b.socket).await;
    let ua = init["result"]["userAgent"].as_str().unwrap();
    assert!(
        ua.starts_with("agentd ") && !ua.split(' ').next().unwrap().contains('/'),
        "{ua}"
    );

    // The TUI's start-up set.
    let acct = c.ok("account/read", json!({"refreshToken": false})).await;
    assert_eq!(acct["requiresOpenaiAuth"], false);
    let models = c.ok("model/list", json!({"includeHidden": true})).await;
    assert_eq!(models["data"][0]["id"], script_model());
    assert_eq!(models["data"][0]["isDefault"], true);
    for (m, p) in [
        ("hooks/list", json!({"cwds": [ws_dir]})),
        ("account/bedrock/checkGovCloudRequirements", json!({})),
        ("config/read", json!({"includeLayers": true, "cwd": "."})),
        ("configRequirements/read", json!(null)),
        ("collaborationMode/list", json!({})),
        ("skills/list", json!({"cwds": [ws_dir]})),
        ("plugin/installed", json!({})),
    ] {
        c.ok(m, p).await;
    }

    // thread/start: a new agentd session, named by the UUID of its id.
    let started = c
        .ok(
            "thread/start",
            json!({"cwd": ws_dir, "approvalPolicy": "never"}),
        )
        .await;
    let thread = started["thread"]["id"].as_str().unwrap().to_string();
    let sid = sid_of(&thread);
    assert_eq!(session_uuid::to_uuid(&sid), thread);
    assert_eq!(started["cwd"], ws_dir.as_str());
    assert_eq!(started["approvalPolicy"], "never");
    assert_eq!(
        d.connect()
            .call_ok("agentd/show", json!({"session_id": sid}))["workspace"],
        ws_dir.as_str()
    );
    let n = c
        .note("thread/started", |p| p["thread"]["id"] == thread.as_str())
        .await;
    assert_eq!(n["thread"]["cwd"], ws_dir.as_str());

    // turn/start: the streamed answer, the reasoning, the usage, in the schema.
    let notes = run_turn(&mut c, &thread, "say something").await;
    let methods: Vec<&str> = notes.iter().map(|(m, _)| m.as_str()).collect();
    for m in [
        "turn/started",
        "item/started",
        "item/reasoning/summaryTextDelta",
        "item/agentMessage/delta",
        "item/completed",
        "thread/tokenUsage/updated",
        "turn/completed",
    ] {
        assert!(methods.contains(&m), "{m} missing from {methods:?}");
    }
    let streamed: String = notes
        .iter()
        .filter(|(m, _)| m == "item/agentMessage/delta")
        .map(|(_, p)| p["delta"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, "Streamed answer number one.");
    let finals: Vec<&Value> = notes
        .iter()
        .filter(|(m, p)| m == "item/completed" && p["item"]["type"] == "agentMessage")
        .map(|(_, p)| &p["item"])
        .collect();
    assert_eq!(finals.len(), 1);
    assert_eq!(finals[0]["text"], "Streamed answer number one.");
    // The same message again (a client retrying): the turn already admitted, not a
    // second run.
    let first_turn = notes
        .iter()
        .find(|(m, _)| m == "turn/started")
        .map(|(_, p)| p["turn"]["id"].clone())
        .unwrap();
    let again = c
        .ok(
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": "say something", "text_elements": []}],
                "clientUserMessageId": "msg-say something"}),
        )
        .await;
    assert_eq!(again["turn"]["id"], first_turn);
    let evs = log_events(&d, &sid);
    let user: Vec<&Value> = evs.iter().filter(|e| is_type(e, "user_message")).collect();
    assert_eq!(user.len(), 1);
    assert_eq!(user[0]["data"]["text"], "say something");

    // A tool turn, approval policy never: a command item with its output.
    let notes = run_turn(&mut c, &thread, "please shout").await;
    let cmd = notes
        .iter()
        .find(|(m, p)| m == "item/completed" && p["item"]["type"] == "commandExecution")
        .map(|(_, p)| p["item"].clone())
        .expect("a completed command item");
    assert_eq!(cmd["command"], "echo approved-and-ran");
    assert_eq!(cmd["status"], "completed");
    assert_eq!(cmd["exitCode"], 0);
    assert!(cmd["aggregatedOutput"]
        .as_str()
        .unwrap()
        .contains("approved-and-ran"));

    // Reading back: the same turns and items.
    let read = c
        .ok(
            "thread/read",
            json!({"threadId": thread, "includeTurns": true}),
        )
        .await;
    let turns = read["thread"]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["items"][0]["type"], "userMessage");
    assert_eq!(turns[0]["items"][0]["content"][0]["text"], "say something");
    assert_eq!(read["thread"]["preview"], "say something");
    let kinds: Vec<&str> = turns[1]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "userMessage",
            "agentMessage",
            "commandExecution",
            "agentMessage"
        ]
    );
    let tl = c
        .ok(
            "thread/turns/list",
            json!({"threadId": thread, "limit": 1, "sortDirection": "asc"}),
        )
        .await;
    assert_eq!(tl["data"].as_array().unwrap().len(), 1);
    assert_eq!(tl["data"][0]["id"], turns[0]["id"]);
    let tl2 = c
        .ok(
            "thread/turns/list",
            json!({"threadId": thread, "cursor": tl["nextCursor"], "sortDirection": "asc"}),
        )
        .await;
    assert_eq!(tl2["data"][0]["id"], turns[1]["id"]);
    let items = c
        .ok(
            "thread/items/list",
            json!({"threadId": thread, "turnId": turns[1]["id"]}),
        )
        .await;
    assert_eq!(items["data"].as_array().unwrap().len(), 4);
    assert_eq!(items["data"][2]["item"]["command"], "echo approved-and-ran");

    // Listing: cwd filter, search, loaded threads.
    let other = d.create_session();
    let listed = c
        .ok("thread/list", json!({"cwd": ws_dir, "limit": 10}))
        .await;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&thread.as_str()), "{ids:?}");
    assert!(ids.contains(&session_uuid::to_uuid(&other).as_str()));
    let found = c.ok("thread/list", json!({"searchTerm": "SAY SOME"})).await;
    let found: Vec<&str> = found["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(found, [thread.as_str()]);
    let nowhere = c
        .ok("thread/list", json!({"cwd": "/nonexistent-dir"}))
        .await;
    assert_eq!(nowhere["data"], json!([]));
    let loaded = c.ok("thread/loaded/list", json!({})).await;
    assert_eq!(loaded["data"], json!([thread]));

    // Names, archive, unarchive: agentd's rename/archive/unarchive.
    c.ok(
        "thread/name/set",
        json!({"threadId": thread, "name": "From Codex"}),
    )
    .await;
    c.note("thread/name/updated", |p| p["threadName"] == "From Codex")
        .await;
    assert_eq!(
        d.connect()
            .call_ok("agentd/show", json!({"session_id": sid}))["title"],
        "From Codex"
    );
    c.ok("thread/archive", json!({"threadId": thread})).await;
    c.note("thread/archived", |p| p["threadId"] == thread.as_str())
        .await;
    let archived = c.ok("thread/list", json!({"archived": true})).await;
    assert_eq!(archived["data"][0]["id"], thread.as_str());
    assert_eq!(archived["data"][0]["name"], "From Codex");
    let un = c.ok("thread/unarchive", json!({"threadId": thread})).await;
    assert_eq!(un["thread"]["id"], thread.as_str());

    // Fork: an agentd child session; delete: to agentd's trash.
    let forked = c.ok("thread/fork", json!({"threadId": thread})).await;
    let child = forked["thread"]["id"].as_str().unwrap().to_string();
    assert_ne!(child, thread);
    assert_eq!(forked["thread"]["forkedFromId"], thread.as_str());
    assert_eq!(forked["thread"]["turns"].as_array().unwrap().len(), 2);
    let child_sid = sid_of(&child);
    let child_start = log_events(&d, &child_sid);
    assert!(child_start
        .iter()
        .any(|e| is_type(e, "session_fork") && e["data"]["parent_session_id"] == sid.as_str()));
    c.ok("thread/delete", json!({"threadId": child})).await;
    c.note("thread/deleted", |p| p["threadId"] == child.as_str())
        .await;
    assert!(d.in_trash(&child_sid));

    // Compaction and revert. `/compact` runs as a turn of its own, which the TUI waits
    // for; a thread too short for agentd's verbatim tail is compacted whole, and one
    // with nothing to compact gets an empty turn, never an error (Codex's TUI exits on
    // one).
    c.ok("thread/compact/start", json!({"threadId": thread}))
        .await;
    c.note("thread/compacted", |p| p["threadId"] == thread.as_str())
        .await;
    let item = c
        .note("item/completed", |p| {
            p["threadId"] == thread.as_str() && p["item"]["type"] == "contextCompaction"
        })
        .await;
    let compact_turn = item["turnId"].as_str().unwrap().to_string();
    c.note("turn/completed", |p| {
        p["turn"]["id"] == compact_turn.as_str()
    })
    .await;
    let short = c.ok("thread/start", json!({"cwd": ws_dir})).await["thread"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..2 {
        c.ok("thread/compact/start", json!({"threadId": short}))
            .await;
        let done = c
            .note("turn/completed", |p| p["threadId"] == short.as_str())
            .await;
        assert_eq!(done["turn"]["status"], "completed");
    }
    let ephemeral = c
        .err("thread/start", json!({"cwd": ws_dir, "ephemeral": true}))
        .await;
    assert_eq!(ephemeral["data"]["kind"], "unsupported", "{ephemeral}");
    assert!(log_events(&d, &sid)
        .iter()
        .any(|e| is_type(e, "history_compaction")));
    let reverted = c
        .ok(
            "thread/revert",
            json!({"threadId": thread, "beforeTurnId": turns[1]["id"]}),
        )
        .await;
    assert_eq!(reverted["thread"]["id"], thread.as_str());
    let bad = c
        .err(
            "thread/revert",
            json!({"threadId": thread, "beforeTurnId": "no-such-turn"}),
        )
        .await;
    assert!(bad["message"].as_str().unwrap().contains("no-such-turn"));

    // Resume an agentd-made session: its turns come along, and it is loaded here.
    let out = d.agentctl([
        "run",
        "--model",
        &script_model(),
        "--title",
        "made by agentctl",
        "a question from the CLI",
    ]);
    out.assert_code(0);
    let made = d.connect().call_ok("agentd/list", json!({}))["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["title"] == "made by agentctl")
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .expect("the agentctl session is listed");
    let resumed = c
        .ok(
            "thread/resume",
            json!({"threadId": session_uuid::to_uuid(&made)}),
        )
        .await;
    assert_eq!(resumed["thread"]["name"], "made by agentctl");
    let rt = resumed["thread"]["turns"].as_array().unwrap();
    assert_eq!(rt.len(), 1);
    assert_eq!(
        rt[0]["items"][0]["content"][0]["text"],
        "a question from the CLI"
    );
    assert_eq!(rt[0]["items"][2]["text"], "Streamed answer number one.");

    // An id agentd did not make gets its alias, and the alias finds it.
    let chosen = "imported-from-elsewhere";
    d.connect().call_ok(
        "agentd/create",
        json!({"workspace": ws_dir, "session_id": chosen}),
    );
    let alias = session_uuid::to_uuid(chosen);
    let r = c.ok("thread/read", json!({"threadId": alias})).await;
    assert_eq!(r["thread"]["id"], alias.as_str());
    assert_eq!(r["thread"]["cwd"], ws_dir.as_str());
    let nf = c
        .err(
            "thread/read",
            json!({"threadId": "0b7e5f4e-34a6-4a0e-9b4b-2c1f1f0a9c11"}),
        )
        .await;
    assert!(nf["message"].as_str().unwrap().contains("thread not found"));
    let bad = c.err("thread/read", json!({"threadId": "thread-1"})).await;
    assert_eq!(bad["code"], -32602);

    // Interrupt an idle thread, steer, login, logout, unsubscribe.
    c.ok("turn/interrupt", json!({"threadId": thread, "turnId": "x"}))
        .await;
    let empty = c
        .err(
            "turn/steer",
            json!({"threadId": thread, "expectedTurnId": "x", "input": []}),
        )
        .await;
    assert_eq!(empty["code"], -32602, "{empty}");
    let idle = c
        .err(
            "turn/steer",
            json!({"threadId": thread, "expectedTurnId": "x",
                "input": [{"type": "text", "text": "too late", "text_elements": []}]}),
        )
        .await;
    assert_eq!(idle["data"]["kind"], "not_running", "{idle}");
    let login = c
        .err(
            "account/login/start",
            json!({"type": "apiKey", "apiKey": "sk-never-used"}),
        )
        .await;
    assert!(login["message"]
        .as_str()
        .unwrap()
        .contains("no OpenAI login needed"));
    assert!(!login.to_string().contains("sk-never-used"));
    c.ok("account/login/cancel", json!({"loginId": "x"})).await;
    c.ok("account/logout", json!(null)).await;
    let u = c
        .ok("thread/unsubscribe", json!({"threadId": thread}))
        .await;
    assert_eq!(u["status"], "unsubscribed");
    let nl = c
        .err(
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": "hi", "text_elements": []}]}),
        )
        .await;
    assert!(nl["message"].as_str().unwrap().contains("thread/resume"));

    // Every other method of the schema: an error naming it, and the bridge serves on.
    let mapped: HashSet<&str> = MAPPED.iter().map(|(m, _)| *m).collect();
    let unsupported: Vec<String> = c
        .schemas
        .client_methods()
        .into_iter()
        .filter(|m| !mapped.contains(m.as_str()) && m != "initialize")
        .collect();
    assert!(unsupported.len() > 60, "{unsupported:?}");
    for m in unsupported
        .iter()
        .map(String::as_str)
        .chain(["no/such/method"])
    {
        let e = c.err(m, json!({})).await;
        assert_eq!(e["code"], -32601, "{m}: {e}");
        assert!(e["message"].as_str().unwrap().contains(m), "{m}: {e}");
        assert_eq!(e["data"]["kind"], "unsupported");
    }
    let acct = c.ok("account/read", json!({})).await;
    assert_eq!(acct["account"]["type"], "apiKey");
    c.check_seen();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_mode_approvals_go_to_the_client_and_its_answers_are_recorded() {
    let d = daemon();
    let b = bridge(&d);
    let mut c = Checked::new(&b).await;
    let started = c
        .ok(
            "thread/start",
            json!({"cwd": d.workspace(), "approvalPolicy": "on-request"}),
        )
        .await;
    assert_eq!(started["approvalPolicy"], "on-request");
    let thread = started["thread"]["id"].as_str().unwrap().to_string();
    let sid = sid_of(&thread);

    // A command: the client accepts, the command runs.
    let id = c
        .ws
        .request(
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": "please shout", "text_elements": []}]}),
        )
        .await;
    let req =
        c.ws.wait_for("a command approval", |v| {
            v["method"] == "item/commandExecution/requestApproval"
        })
        .await;
    c.check_seen();
    assert_eq!(req["params"]["threadId"], thread.as_str());
    assert_eq!(req["params"]["command"], "echo approved-and-ran");
    // The item the approval is about was announced first, after the text before it
    // was complete.
    let item_id = req["params"]["itemId"].clone();
    let before: Vec<&Value> =
        c.ws.seen
            .iter()
            .take_while(|v| v["method"] != "item/commandExecution/requestApproval")
            .collect();
    assert!(
        before.iter().any(|v| v["method"] == "item/completed"
            && v["params"]["item"]["type"] == "agentMessage"
            && v["params"]["item"]["text"] == "Running it."),
        "the approval came before the message that leads to it was complete: {before:?}"
    );
    assert!(c
        .ws
        .seen
        .iter()
        .any(|v| v["method"] == "item/started" && v["params"]["item"]["id"] == item_id));
    c.ws.send(json!({"id": req["id"], "result": {"decision": "accept"}}))
        .await;
    c.schemas.check(
        "CommandExecutionRequestApprovalResponse",
        &json!({"decision": "accept"}),
    );
    let r = c.ws.response(id).await;
    assert!(r.get("result").is_some(), "{r}");
    let done = c
        .note("item/completed", |p| p["item"]["id"] == item_id)
        .await;
    assert_eq!(done["item"]["status"], "completed");
    assert!(done["item"]["aggregatedOutput"]
        .as_str()
        .unwrap()
        .contains("approved-and-ran"));
    c.note("turn/completed", |_| true).await;

    // A file write: the client declines, nothing is written.
    c.ws.request(
        "turn/start",
        json!({"threadId": thread, "input": [{"type": "text", "text": "take a note", "text_elements": []}]}),
    )
    .await;
    let req =
        c.ws.wait_for("a file change approval", |v| {
            v["method"] == "item/fileChange/requestApproval"
        })
        .await;
    c.check_seen();
    let item_id = req["params"]["itemId"].clone();
    let turn_id = req["params"]["turnId"].as_str().unwrap().to_string();
    // Input steered into the running turn joins it at its next provider call.
    let wrong = c
        .err(
            "turn/steer",
            json!({"threadId": thread, "expectedTurnId": "not-this-turn",
                "input": [{"type": "text", "text": "lost", "text_elements": []}]}),
        )
        .await;
    assert!(
        wrong["message"].as_str().unwrap().contains(&turn_id),
        "{wrong}"
    );
    // With an image, which joins the turn with it. The approval is answered once the
    // steer waits for the turn's next provider call, so that call carries it.
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let steer =
        c.ws.request(
            "turn/steer",
            json!({"threadId": thread, "expectedTurnId": turn_id, "clientUserMessageId": "steer-1",
                "input": [{"type": "text", "text": "and keep it short", "text_elements": []},
                          {"type": "image", "url": format!("data:image/png;base64,{PNG_B64}")}]}),
        )
        .await;
    tokio::task::block_in_place(|| {
        sub.wait_event(
            |e| is_type(e, "status") && e["data"]["steer_pending"] == true,
            std::time::Duration::from_secs(60),
        )
        .expect("the steer waits for the next provider call")
    });
    let started =
        c.ws.seen
            .iter()
            .find(|v| v["method"] == "item/started" && v["params"]["item"]["id"] == item_id)
            .cloned()
            .expect("the file change item was started before the approval");
    assert_eq!(
        started["params"]["item"]["changes"][0]["path"],
        d.workspace().join("notes.txt").to_string_lossy().as_ref()
    );
    c.ws.send(json!({"id": req["id"], "result": {"decision": "decline"}}))
        .await;
    let done = c
        .note("item/completed", |p| p["item"]["id"] == item_id)
        .await;
    assert_eq!(done["item"]["status"], "declined");
    let steered = c.ws.response(steer).await;
    assert!(steered["error"].is_null(), "{steered}");
    c.schemas.check("v2/TurnSteerResponse", &steered["result"]);
    assert_eq!(steered["result"]["turnId"], turn_id.as_str(), "{steered}");
    let shown = c
        .note("item/started", |p| {
            p["item"]["type"] == "userMessage"
                && p["item"]["content"][0]["text"] == "and keep it short"
        })
        .await;
    assert_eq!(shown["turnId"], turn_id.as_str());
    c.note("turn/completed", |_| true).await;
    assert!(!d.workspace().join("notes.txt").exists());
    let steers: Vec<Value> = log_events(&d, &sid)
        .into_iter()
        .filter(|e| is_type(e, "user_message") && e["data"]["steer"] == true)
        .collect();
    assert_eq!(steers.len(), 1, "{steers:?}");
    assert_eq!(steers[0]["data"]["text"], "and keep it short");
    assert_eq!(steers[0]["data"]["turn_id"], turn_id.as_str());
    assert_eq!(
        steers[0]["data"]["images"][0]["mime"], "image/png",
        "{steers:?}"
    );

    // Accepted for the session: the daemon allows the tool from then on, asking no one.
    for answer in [Some("acceptForSession"), None] {
        let id = c
            .ws
            .request(
                "turn/start",
                json!({"threadId": thread, "input": [{"type": "text", "text": "please shout", "text_elements": []}]}),
            )
            .await;
        c.ws.response(id).await;
        if let Some(a) = answer {
            let req =
                c.ws.wait_for("a command approval", |v| {
                    v["method"] == "item/commandExecution/requestApproval"
                })
                .await;
            c.ws.send(json!({"id": req["id"], "result": {"decision": a}}))
                .await;
        }
        c.note("turn/completed", |_| true).await;
    }
    c.check_seen();
    let asked =
        c.ws.seen
            .iter()
            .filter(|v| v["method"] == "item/commandExecution/requestApproval")
            .count();
    assert_eq!(
        asked, 2,
        "the tool accepted for the session was asked about again"
    );

    let decisions: Vec<(String, String)> = log_events(&d, &sid)
        .iter()
        .filter(|e| is_type(e, "permission_decision"))
        .map(|e| {
            (
                e["data"]["decision"].as_str().unwrap().to_string(),
                e["data"]["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        [
            ("allow".to_string(), "client_allowed".to_string()),
            ("deny".to_string(), "client_denied".to_string()),
            ("allow".to_string(), "client_allowed_always".to_string()),
            ("allow".to_string(), "always_allowed".to_string())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_are_refused_and_the_bridge_and_daemon_keep_serving() {
    let d = daemon();
    let mut b = bridge(&d);
    let mut schemas = Schemas::new();

    // Before initialize: refused, not served.
    let mut w = Ws::connect(&b.socket).await;
    let r = w.call("thread/list", json!({})).await;
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Not initialized"));
    schemas.check("JSONRPCErrorError", &r["error"]);

    let (mut w, _) = Ws::initialized(&b.socket).await;
    // A text frame that is not JSON.
    assert!(w.send_raw(Message::Text("{not json".into())).await);
    let e = w.next(WAIT).await.expect("an answer to a non-JSON frame");
    assert_eq!(e["error"]["code"], -32700);
    schemas.check("JSONRPCErrorError", &e["error"]);
    // A binary frame.
    assert!(w.send_raw(Message::Binary(vec![1, 2, 3].into())).await);
    let e = w.next(WAIT).await.expect("an answer to a binary frame");
    assert_eq!(e["error"]["code"], -32600);
    assert!(e["error"]["message"].as_str().unwrap().contains("binary"));
    // A second initialize.
    let e = w
        .call(
            "initialize",
            json!({"clientInfo": {"name": "again", "version": "1"}}),
        )
        .await;
    assert_eq!(e["error"]["code"], -32600);
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Already initialized"));
    // Unknown methods and a JSON value that is not a message.
    let e = w.call("thread/definitelyNot", json!({})).await;
    assert_eq!(e["error"]["code"], -32601);
    assert!(w.send_raw(Message::Text("[1,2]".into())).await);
    let e = w.next(WAIT).await.expect("an answer to a batch");
    assert_eq!(e["error"]["code"], -32600);
    // The same connection still serves.
    let ok = w.call("account/read", json!({})).await;
    assert_eq!(ok["result"]["requiresOpenaiAuth"], false);

    // A frame over 16 MiB closes that connection with 1009, and only it.
    let big = "x".repeat(16 * 1024 * 1024 + 1);
    w.send_raw(Message::Text(big.into())).await;
    assert!(
        w.next(WAIT).await.is_none(),
        "the oversized frame's connection is closed"
    );
    assert_eq!(w.closed, Some(Some(1009)));

    // A client that sends and never reads: its answers fill its queue and it is cut
    // off; the others are served meanwhile and after.
    let (mut hog, _) = Ws::initialized(&b.socket).await;
    let (mut other, _) = Ws::initialized(&b.socket).await;
    for i in 0..40_000 {
        if !hog
            .send_raw(Message::Text(
                json!({"id": i + 10, "method": "account/read"})
                    .to_string()
                    .into(),
            ))
            .await
        {
            break;
        }
    }
    assert!(
        b.wait_stderr("is not reading", WAIT),
        "the bridge noticed the client: {}",
        b.stderr()
    );
    let ok = other.call("model/list", json!({})).await;
    assert_eq!(ok["result"]["data"][0]["id"], script_model());

    // The bridge and the daemon are both still there for new clients.
    assert!(b.alive());
    let (mut fresh, _) = Ws::initialized(&b.socket).await;
    let t = fresh
        .call("thread/start", json!({"cwd": d.workspace()}))
        .await;
    assert!(t["result"]["thread"]["id"].is_string(), "{t}");
    d.connect().call_ok("agentd/list", json!({}));
}

#[test]
fn the_socket_is_private_and_a_shared_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let d = daemon();
    let b = bridge(&d);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&b.socket), 0o600);
    assert_eq!(mode(b.socket.parent().unwrap()), 0o700);
    drop(b);

    let open = d.root().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = d
        .agentctl_cmd()
        .args([
            "app-server",
            "--listen",
            &format!("unix://{}", open.join("s.sock").display()),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("open to other users"), "{err}");
    assert!(!open.join("s.sock").exists());

    let out = d
        .agentctl_cmd()
        .args(["app-server", "--listen", "ws://0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
    let out = d
        .agentctl_cmd()
        .args(["app-server", "--listen", "ws://0.0.0.0:0", "--allow-remote"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--auth-token-env"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_tcp_and_refusals_are_logged() {
    use std::io::BufRead;
    let d = daemon();
    let mut child = d
        .agentctl_cmd()
        .args([
            "app-server",
            "--listen",
            "ws://127.0.0.1:0",
            "--auth-token-env",
            "CX_TOKEN",
        ])
        .env("CX_TOKEN", "s3cret-token")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .split("ws://")
        .nth(1)
        .unwrap_or_else(|| panic!("{first}"))
        .trim()
        .to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let connect = |token: Option<&str>| {
        let addr = addr.clone();
        let token = token.map(str::to_string);
        async move {
            use tokio_tungstenite::tungstenite::client::IntoClientRequest;
            let mut req = format!("ws://{addr}/").into_client_request().unwrap();
            if let Some(t) = token {
                req.headers_mut()
                    .insert("authorization", format!("Bearer {t}").parse().unwrap());
            }
            let s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            tokio_tungstenite::client_async(req, s)
                .await
                .map(|(w, _)| w)
        }
    };
    assert!(connect(None).await.is_err());
    assert!(connect(Some("s3cret-tokeX")).await.is_err());
    let mut ok = connect(Some("s3cret-token"))
        .await
        .expect("the right token");
    use futures::{SinkExt, StreamExt};
    ok.send(Message::Text(
        json!({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t", "version": "1"}}})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    let m = tokio::time::timeout(WAIT, ok.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(m.to_text().unwrap().contains("userAgent"));
    let mut refusals: Vec<String> = vec![];
    while refusals.len() < 2 {
        let l = rx.recv_timeout(WAIT).expect("a logged refusal");
        assert!(!l.contains("s3cret"), "the token is never logged: {l}");
        if l.contains("refused") {
            refusals.push(l);
        }
    }
    for r in &refusals {
        assert!(r.contains("refused") && r.contains("bearer token"), "{r}");
        assert!(!r.contains("s3cret"), "the token is never logged: {r}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_schema_check_refuses_what_the_pinned_schema_refuses() {
    let mut s = Schemas::new();
    s.check(
        "v2/GetAccountResponse",
        &json!({"account": {"type": "apiKey"}, "requiresOpenaiAuth": false}),
    );
    for (def, bad) in [
        (
            "v2/GetAccountResponse",
            json!({"account": {"type": "apiKey"}}),
        ),
        ("v2/ThreadStartResponse", json!({"thread": {"id": "x"}})),
        (
            "ServerNotification",
            json!({"method": "turn/completed", "params": {"threadId": "t"}}),
        ),
    ] {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.check(def, &bad)));
        assert!(r.is_err(), "{def} accepted {bad}");
    }
}

/// A Chat Completions answer of `text`.
fn chat_reply(text: &str) -> String {
    chat_sse(&[
        json!({"model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
    ])
}

/// A Codex client's `provider:model` (`thread/start`'s `model`, `turn/start`'s `model`)
/// reaches that provider with that model, as from every other client: the daemon's
/// default provider has no server behind it, so a turn that went there would fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_colon_model_reaches_that_provider() {
    let (beta, server) = sse_server(vec![
        chat_reply("from the thread's model"),
        chat_reply("from the turn's model"),
    ]);
    let config = format!(
        "default_provider = \"alpha\"\n\
         [providers.alpha]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m-alpha\"\n\
         [providers.beta]\nkind = \"openai-chat\"\nbase_url = \"{beta}\"\nmodel = \"m-default\"\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    let b = Bridge::start(&d, &[]);
    let mut c = Checked::new(&b).await;
    let started = c
        .ok(
            "thread/start",
            json!({"cwd": d.workspace(), "model": "beta:m-beta"}),
        )
        .await;
    // Shown as the picker's id (`provider:model`), recorded apart.
    assert_eq!(started["model"], "beta:m-beta", "{started}");
    assert_eq!(started["modelProvider"], "beta", "{started}");
    let thread = started["thread"]["id"].as_str().unwrap().to_string();
    let sid = sid_of(&thread);
    let first = &d.log_lines(&sid)[0];
    assert_eq!(first["data"]["provider"], "beta", "{first}");
    assert_eq!(first["data"]["model"], "m-beta", "{first}");

    let notes = run_turn(&mut c, &thread, "hi").await;
    let answer = answers(&notes).first().cloned();
    assert_eq!(answer, Some(json!("from the thread's model")), "{notes:?}");

    // turn/start's own `model` for this turn.
    let r = c
        .ok(
            "turn/start",
            json!({"threadId": thread, "model": "beta:m-turn",
                "input": [{"type": "text", "text": "again", "text_elements": []}]}),
        )
        .await;
    let turn_id = r["turn"]["id"].as_str().unwrap().to_string();
    let done = c
        .note("turn/completed", |p| p["turn"]["id"] == turn_id.as_str())
        .await;
    assert_eq!(done["turn"]["status"], "completed", "{done}");

    let bodies = server.join().unwrap();
    let models: Vec<&str> = bodies
        .iter()
        .map(|b| b["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["m-beta", "m-turn"]);
    let started: Vec<(Value, Value)> = log_events(&d, &sid)
        .iter()
        .filter(|e| e["type"] == "turn_started")
        .map(|e| (e["data"]["provider"].clone(), e["data"]["model"].clone()))
        .collect();
    assert_eq!(
        started,
        [
            (json!("beta"), json!("m-beta")),
            (json!("beta"), json!("m-turn"))
        ]
    );
}

/// A real 1×1 PNG, base64.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The images of a Chat Completions request's last user message, as data URLs.
fn chat_image_urls(body: &Value) -> Vec<String> {
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap_or_else(|| panic!("no user message: {body}"));
    user["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p["type"] == "image_url")
                .map(|p| p["image_url"]["url"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// `turn/start`'s `image` (a data URL) and `localImage` (a path in the workspace) inputs
/// reach the provider as the prompt's images, in order and with their own bytes; the
/// model list says the models take images. A remote URL, a file id and a text file
/// posing as an image are refused naming what is wrong, and the bridge goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_and_local_image_inputs_reach_the_provider() {
    use base64::Engine;
    let (base, server) = sse_server(vec![chat_reply("Two pictures."), chat_reply("Fine.")]);
    let config = format!(
        "default_provider = \"p\"\n[providers.p]\nkind = \"openai-chat\"\nbase_url = \"{base}\"\nmodel = \"m1\"\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    let mut gif = b"GIF89a".to_vec();
    gif.extend_from_slice(&[
        1, 0, 1, 0, 0, 0, 0, b',', 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 0, b';',
    ]);
    std::fs::write(d.workspace().join("diagram.gif"), &gif).unwrap();
    std::fs::write(d.workspace().join("notes.png"), "not an image\n").unwrap();
    let b = Bridge::start(&d, &[]);
    let mut c = Checked::new(&b).await;
    let models = c.ok("model/list", json!({})).await;
    assert_eq!(
        models["data"][0]["inputModalities"],
        json!(["text", "image"]),
        "{models}"
    );
    let started = c.ok("thread/start", json!({"cwd": d.workspace()})).await;
    let thread = started["thread"]["id"].as_str().unwrap().to_string();
    let sid = sid_of(&thread);
    let r = c
        .ok(
            "turn/start",
            json!({"threadId": thread, "input": [
                {"type": "text", "text": "compare these", "text_elements": []},
                {"type": "image", "url": format!("data:image/png;base64,{PNG_B64}")},
                {"type": "localImage", "path": "diagram.gif"},
            ]}),
        )
        .await;
    let turn_id = r["turn"]["id"].as_str().unwrap().to_string();
    let done = c
        .note("turn/completed", |p| p["turn"]["id"] == turn_id.as_str())
        .await;
    assert_eq!(done["turn"]["status"], "completed", "{done}");
    let gif_b64 = base64::engine::general_purpose::STANDARD.encode(&gif);
    // Refusals, before anything reaches the daemon's Log or the provider.
    for (input, says) in [
        (
            json!({"type": "image", "url": "https://example.com/cat.png"}),
            "data: URL",
        ),
        (json!({"type": "image", "fileId": "file-1"}), "fileId"),
        (
            json!({"type": "localImage", "path": "notes.png"}),
            "notes.png",
        ),
    ] {
        let e = c
            .err(
                "turn/start",
                json!({"threadId": thread, "input": [
                    {"type": "text", "text": "look", "text_elements": []}, input]}),
            )
            .await;
        assert!(
            e["message"].as_str().is_some_and(|m| m.contains(says)),
            "{input}: {e}"
        );
    }
    let notes = run_turn(&mut c, &thread, "thanks").await;
    assert!(
        notes
            .iter()
            .any(|(m, p)| m == "item/completed" && p["item"]["text"] == "Fine."),
        "{notes:?}"
    );
    let bodies = server.join().unwrap();
    assert_eq!(
        chat_image_urls(&bodies[0]),
        [
            format!("data:image/png;base64,{PNG_B64}"),
            format!("data:image/gif;base64,{gif_b64}")
        ]
    );
    let users: Vec<Value> = log_events(&d, &sid)
        .into_iter()
        .filter(|e| e["type"] == "user_message")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(users.len(), 2, "{users:?}");
    let mimes: Vec<&Value> = users[0]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["mime"])
        .collect();
    assert_eq!(mimes, [&json!("image/png"), &json!("image/gif")]);
    assert!(users[1].get("images").is_none(), "{:?}", users[1]);
}

/// The real Codex 0.171.0 rollout the import tests use.
const CODEX_ROLLOUT: &str = "../daemon/tests/data/import/peers/codex-0.171.0/\
    rollout-2026-11-27T04-30-53-01a21b45-43d1-7862-b944-095933ffc093.jsonl";
/// Its thread id, as Codex knew it.
const CODEX_ID: &str = "01a21b45-43d1-7862-b944-095933ffc093";

/// Imports the rollout into `d`; the new session's id.
fn import_rollout(d: &Daemon) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CODEX_ROLLOUT);
    assert!(path.is_file(), "fixture {CODEX_ROLLOUT} is missing");
    let ws = d.workspace().canonicalize().unwrap();
    let r = d.agentctl_ok(&[
        "import",
        "--format",
        "codex",
        path.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    r["session_id"].as_str().expect("session_id").to_string()
}

/// A session imported from Codex answers to the thread id Codex knew, everywhere a Codex
/// client sees it (list, read, resume, its turns' notifications, a fork's parent), from
/// the record in its Log: after a restart too. agentd's own UUID of the session finds
/// it as well, and a second import of the same rollout keeps its own UUID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_codex_thread_answers_to_the_id_codex_knew() {
    let mut d = daemon();
    let sid = import_rollout(&d);
    assert_ne!(sid, CODEX_ID, "an import gets an agentd id");
    let own = session_uuid::to_uuid(&sid);
    let native = d
        .connect()
        .call_ok("agentd/resolve", json!({"id": CODEX_ID}));
    assert_eq!(native, json!({"session_id": sid, "uuid": CODEX_ID}));

    {
        let b = bridge(&d);
        let mut c = Checked::new(&b).await;
        let listed = c.ok("thread/list", json!({"limit": 50})).await;
        let ids: Vec<&str> = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [CODEX_ID], "{listed}");
        assert_eq!(
            listed["data"][0]["preview"],
            "Give me a quick tour of this repo: list every file, find all TODO comments, and \
             check CHANGELOG.md for recent changes."
        );

        // Resumed by the id Codex knew, with its turns; agentd's own UUID and the URN
        // form name the same thread.
        let resumed = c
            .ok(
                "thread/resume",
                json!({"threadId": CODEX_ID, "model": script_model(), "approvalPolicy": "never"}),
            )
            .await;
        assert_eq!(resumed["thread"]["id"], CODEX_ID);
        let turns = resumed["thread"]["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 3, "{resumed}");
        assert_eq!(
            turns[1]["items"][0]["content"][0]["text"],
            "Ajoute une section « Résumé » au README — avec une phrase en japonais : \
             日本語の説明も一行ください。"
        );
        for other in [own.clone(), format!("urn:uuid:{}", CODEX_ID.to_uppercase())] {
            let r = c.ok("thread/read", json!({"threadId": other})).await;
            assert_eq!(r["thread"]["id"], CODEX_ID, "{other}");
        }
        let loaded = c.ok("thread/loaded/list", json!({})).await;
        assert_eq!(loaded["data"], json!([CODEX_ID]));

        // A turn on it: an ordinary agentd turn, its notifications under the Codex id.
        let notes = run_turn(&mut c, CODEX_ID, "continue from agentd").await;
        assert!(notes.iter().all(|(_, p)| p["threadId"] == CODEX_ID));
        let answer = answers(&notes).first().cloned();
        assert_eq!(answer, Some(json!("Streamed answer number one.")));
        assert!(log_events(&d, &sid)
            .iter()
            .any(|e| is_type(e, "user_message") && e["data"]["text"] == "continue from agentd"));

        // A fork names it as its parent and root by the same id.
        let forked = c.ok("thread/fork", json!({"threadId": CODEX_ID})).await;
        assert_eq!(forked["thread"]["forkedFromId"], CODEX_ID);
        assert_eq!(forked["thread"]["sessionId"], CODEX_ID);
        let child = forked["thread"]["id"].as_str().unwrap().to_string();
        assert_ne!(child, CODEX_ID);
        let listed = c.ok("thread/list", json!({"limit": 50})).await;
        let row = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == child.as_str())
            .cloned()
            .expect("the fork is listed");
        assert_eq!(row["forkedFromId"], CODEX_ID);
        c.check_seen();
    }

    // The same rollout imported again: a second session under its own UUID; the alias
    // stays with the first.
    let again = import_rollout(&d);
    assert_ne!(again, sid);
    let r = d.connect().call_ok("agentd/resolve", json!({"id": again}));
    assert_eq!(r["uuid"], session_uuid::to_uuid(&again));

    // The mapping is read from the Logs again by a restarted daemon.
    d.restart();
    let r = d
        .connect()
        .call_ok("agentd/resolve", json!({"id": CODEX_ID}));
    assert_eq!(r["session_id"], sid.as_str());
    let b = bridge(&d);
    let mut c = Checked::new(&b).await;
    let read = c
        .ok(
            "thread/read",
            json!({"threadId": CODEX_ID, "includeTurns": true}),
        )
        .await;
    assert_eq!(read["thread"]["id"], CODEX_ID);
    assert_eq!(read["thread"]["turns"].as_array().unwrap().len(), 4);
    let listed = c.ok("thread/list", json!({"limit": 50})).await;
    let mut ids: Vec<String> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    assert!(ids.contains(&CODEX_ID.to_string()), "{ids:?}");
    assert!(ids.contains(&session_uuid::to_uuid(&again)), "{ids:?}");
    assert!(!ids.contains(&own), "{ids:?}");
    let shown = d
        .connect()
        .call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(shown["uuid"], CODEX_ID);
    let e = d.connect().call(
        "agentd/resolve",
        json!({"id": "0b7e5f4e-34a6-4a0e-9b4b-2c1f1f0a9c11"}),
    );
    assert_eq!(e["error"]["data"]["kind"], "not_found", "{e}");
}

const OBJECTIVE: &str = "Make every test in the parser crate pass";

/// `thread/goal/*` on agentd's goals: set (the daemon starts the goal's turn), get,
/// the updates as the goal runs and completes, `/goal resume` of an ended goal, clear,
/// and refused requests; every message in the pinned schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_goals_map_onto_agentd_goals() {
    // Each goal turn's first provider call waits for the test's go; then the model calls
    // `goal_complete`.
    let (go, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    let mock = MockProvider::start(move |_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if !tools.is_empty() {
            return Reply::Complete(chat_text("All done."));
        }
        if user.starts_with("Goal: ") {
            let _ = gate
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(120));
            return Reply::Complete(chat_tools(&[(
                "call_done",
                "goal_complete",
                json!({"summary": "All 12 parser tests pass."}),
            )]));
        }
        Reply::Complete(chat_text(&format!("plain answer to: {user}")))
    });
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&mock.config())
        .start();
    let b = Bridge::start(&d, &[]);
    let mut c = Checked::new(&b).await;
    let started = c
        .ok(
            "thread/start",
            json!({"cwd": d.workspace(), "approvalPolicy": "never"}),
        )
        .await;
    let thread = started["thread"]["id"].as_str().unwrap().to_string();
    let sid = sid_of(&thread);
    let none = c.ok("thread/goal/get", json!({"threadId": thread})).await;
    assert_eq!(none["goal"], Value::Null);
    let e = c
        .err(
            "thread/goal/set",
            json!({"threadId": thread, "status": "active"}),
        )
        .await;
    assert!(e["message"].as_str().unwrap().contains("no goal"), "{e}");

    // Set: an agentd goal, its first turn started (and held at the provider).
    let set = c
        .ok(
            "thread/goal/set",
            json!({"threadId": thread, "objective": OBJECTIVE, "tokenBudget": 50_000}),
        )
        .await;
    let g = &set["goal"];
    assert_eq!(g["threadId"], thread.as_str());
    assert_eq!(g["objective"], OBJECTIVE);
    assert_eq!(g["status"], "active");
    assert_eq!(g["tokenBudget"], 50_000);
    let native = d
        .connect()
        .call_ok("agentd/goal_get", json!({"session_id": sid}));
    assert_eq!(native["goal"]["objective"], OBJECTIVE);
    assert_eq!(native["goal"]["status"], "open");
    assert_eq!(native["goal"]["token_budget"], 50_000);
    let up = c
        .note("thread/goal/updated", |p| p["goal"]["status"] == "active")
        .await;
    assert_eq!(up["threadId"], thread.as_str());
    c.note("turn/started", |p| p["threadId"] == thread.as_str())
        .await;
    let got = c.ok("thread/goal/get", json!({"threadId": thread})).await;
    assert_eq!(got["goal"]["status"], "active");
    assert_eq!(got["goal"]["objective"], OBJECTIVE);

    // What the run decides is not the client's; agentd's goals have no pause.
    let paused = c
        .err(
            "thread/goal/set",
            json!({"threadId": thread, "status": "paused"}),
        )
        .await;
    assert_eq!(paused["data"]["kind"], "unsupported", "{paused}");
    for bad in [
        json!({"threadId": thread, "status": "complete"}),
        json!({"threadId": thread, "objective": "  "}),
        json!({"threadId": thread, "objective": "x", "tokenBudget": 0}),
        json!({"threadId": thread, "status": "finished"}),
    ] {
        let e = c.err("thread/goal/set", bad.clone()).await;
        assert_eq!(e["code"], -32602, "{bad}: {e}");
    }
    let budget = c
        .err(
            "thread/goal/set",
            json!({"threadId": thread, "tokenBudget": 9}),
        )
        .await;
    assert_eq!(budget["data"]["kind"], "unsupported", "{budget}");
    let nf = c
        .err(
            "thread/goal/get",
            json!({"threadId": "0b7e5f4e-34a6-4a0e-9b4b-2c1f1f0a9c11"}),
        )
        .await;
    assert!(nf["message"].as_str().unwrap().contains("thread not found"));
    assert_eq!(
        d.connect()
            .call_ok("agentd/goal_get", json!({"session_id": sid}))["goal"]["status"],
        "open",
        "a refused request changes nothing"
    );

    // The model completes it: the update says so, with the tokens the daemon counted.
    go.send(()).unwrap();
    let done = c
        .note("thread/goal/updated", |p| p["goal"]["status"] == "complete")
        .await;
    assert_eq!(done["goal"]["objective"], OBJECTIVE);
    let native = d
        .connect()
        .call_ok("agentd/goal_get", json!({"session_id": sid}));
    assert_eq!(native["goal"]["reason"], "completed");
    let ended = log_events(&d, &sid)
        .into_iter()
        .find(|e| is_type(e, "goal_ended"))
        .expect("goal_ended");
    assert!(
        ended["data"]["tokens_used"].as_u64().unwrap() > 0,
        "{ended}"
    );
    assert_eq!(done["goal"]["tokensUsed"], ended["data"]["tokens_used"]);
    let got = c.ok("thread/goal/get", json!({"threadId": thread})).await;
    assert_eq!(got["goal"]["status"], "complete");

    // `/goal resume`: the ended goal's objective starts again, with its budget.
    let again = c
        .ok(
            "thread/goal/set",
            json!({"threadId": thread, "status": "active"}),
        )
        .await;
    assert_eq!(again["goal"]["status"], "active");
    assert_eq!(again["goal"]["objective"], OBJECTIVE);
    assert_eq!(again["goal"]["tokenBudget"], 50_000);
    let second = c
        .note("turn/started", |p| p["threadId"] == thread.as_str())
        .await;
    let second = second["turn"]["id"].as_str().unwrap().to_string();
    let sets: Vec<Value> = log_events(&d, &sid)
        .into_iter()
        .filter(|e| is_type(e, "goal_set"))
        .map(|e| e["data"]["objective"].clone())
        .collect();
    assert_eq!(sets, [json!(OBJECTIVE), json!(OBJECTIVE)]);

    // The daemon's statement of the objective that starts each goal turn is not shown as
    // the user's prompt.
    let prompts: Vec<&Value> = c
        .ws
        .seen
        .iter()
        .filter(|v| v["method"] == "item/completed" && v["params"]["item"]["type"] == "userMessage")
        .collect();
    assert!(prompts.is_empty(), "{prompts:?}");
    let read = c
        .ok(
            "thread/read",
            json!({"threadId": thread, "includeTurns": true}),
        )
        .await;
    let turns = read["thread"]["turns"].as_array().unwrap();
    assert!(!turns.is_empty());
    assert!(
        turns.iter().all(|t| t["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["type"] != "userMessage")),
        "{read}"
    );

    // Clear: agentd ends it (`cleared`); Codex hears `thread/goal/cleared` and has no goal.
    let cleared = c.ok("thread/goal/clear", json!({"threadId": thread})).await;
    assert_eq!(cleared["cleared"], true);
    c.note("thread/goal/cleared", |p| p["threadId"] == thread.as_str())
        .await;
    let none = c.ok("thread/goal/get", json!({"threadId": thread})).await;
    assert_eq!(none["goal"], Value::Null);
    let ended = log_events(&d, &sid)
        .into_iter()
        .filter(|e| is_type(e, "goal_ended"))
        .map(|e| e["data"]["reason"].clone())
        .collect::<Vec<_>>();
    assert_eq!(ended, [json!("completed"), json!("cleared")]);
    let twice = c.ok("thread/goal/clear", json!({"threadId": thread})).await;
    assert_eq!(twice["cleared"], false);
    // The held turn finishes; no other starts for the cleared goal.
    go.send(()).unwrap();
    c.note("turn/completed", |p| p["turn"]["id"] == second.as_str())
        .await;
    c.check_seen();
}

/// A subagent (a session the `task` tool made) is not one of the threads Codex's picker
/// lists by default; asked for with `sourceKinds: ["subAgentThreadSpawn"]` (as the TUI's
/// agents view asks), it is listed and read as a spawned thread of its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagents_are_listed_as_spawned_threads_of_their_parent() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if user.contains("Find the magic number") {
            return Reply::Complete(chat_text("The magic number is 42."));
        }
        match tools.first() {
            None => Reply::Complete(chat_tools(&[(
                "call_t1",
                "task",
                json!({"prompt": "Find the magic number in the notes", "title": "magic"}),
            )])),
            Some(t) => Reply::Complete(chat_text(&format!("Child said: {t}"))),
        }
    });
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&mock.config())
        .start();
    let b = Bridge::start(&d, &[]);
    let mut c = Checked::new(&b).await;
    let started = c
        .ok(
            "thread/start",
            json!({"cwd": d.workspace(), "approvalPolicy": "never"}),
        )
        .await;
    let parent = started["thread"]["id"].as_str().unwrap().to_string();
    let notes = run_turn(&mut c, &parent, "Delegate the search").await;
    let answer = answers(&notes).last().cloned();
    assert_eq!(answer, Some(json!("Child said: The magic number is 42.")));

    let ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let default = c.ok("thread/list", json!({})).await;
    assert_eq!(ids(&default), [parent.as_str()], "{default}");
    let interactive = c
        .ok("thread/list", json!({"sourceKinds": ["cli", "appServer"]}))
        .await;
    assert_eq!(ids(&interactive), [parent.as_str()]);
    let spawned = c
        .ok(
            "thread/list",
            json!({"sourceKinds": ["subAgentThreadSpawn"]}),
        )
        .await;
    let kids = ids(&spawned);
    assert_eq!(kids.len(), 1, "{spawned}");
    assert_ne!(kids[0], parent);
    let row = &spawned["data"][0];
    assert_eq!(
        row["source"],
        json!({"subAgent": {"thread_spawn": {"parent_thread_id": parent, "depth": 1}}})
    );
    assert_eq!(row["forkedFromId"], Value::Null);
    assert_eq!(row["name"], "magic");
    let read = c
        .ok(
            "thread/read",
            json!({"threadId": kids[0], "includeTurns": true}),
        )
        .await;
    assert_eq!(read["thread"]["source"], row["source"]);
    assert_eq!(read["thread"]["forkedFromId"], Value::Null);
    assert_eq!(
        read["thread"]["turns"][0]["items"][0]["content"][0]["text"],
        "Find the magic number in the notes"
    );
    let both = c
        .ok(
            "thread/list",
            json!({"sourceKinds": ["appServer", "subAgentThreadSpawn"]}),
        )
        .await;
    assert_eq!(ids(&both).len(), 2);
}

/// With `[subagents] max_depth = 2`, a subagent's own subagent is a spawned thread of
/// that subagent, one level deeper, in the list and when read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_subagent_is_spawned_one_level_deeper() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        let answer = |t: &str| Reply::Complete(chat_text(t));
        let delegate = |id: &str, prompt: &str, title: &str| {
            Reply::Complete(chat_tools(&[(
                id,
                "task",
                json!({"prompt": prompt, "title": title}),
            )]))
        };
        match (user.as_str(), tools.first()) {
            ("Read the deepest note", _) => answer("It says 42."),
            ("Search the notes", None) => delegate("call_g", "Read the deepest note", "deep"),
            ("Search the notes", Some(t)) => answer(&format!("Grandchild said: {t}")),
            (_, None) => delegate("call_c", "Search the notes", "search"),
            (_, Some(t)) => answer(&format!("Child said: {t}")),
        }
    });
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&format!("{}\n[subagents]\nmax_depth = 2\n", mock.config()))
        .start();
    let b = Bridge::start(&d, &[]);
    let mut c = Checked::new(&b).await;
    let started = c
        .ok(
            "thread/start",
            json!({"cwd": d.workspace(), "approvalPolicy": "never"}),
        )
        .await;
    let parent = started["thread"]["id"].as_str().unwrap().to_string();
    let notes = run_turn(&mut c, &parent, "Delegate the search").await;
    let answer = answers(&notes).last().cloned();
    assert_eq!(
        answer,
        Some(json!("Child said: Grandchild said: It says 42."))
    );

    let spawned = c
        .ok(
            "thread/list",
            json!({"sourceKinds": ["subAgentThreadSpawn"]}),
        )
        .await;
    let by_name = |name: &str| -> Value {
        spawned["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no spawned thread named {name}: {spawned}"))
    };
    let (child, grandchild) = (by_name("search"), by_name("deep"));
    assert_eq!(
        child["source"],
        json!({"subAgent": {"thread_spawn": {"parent_thread_id": parent, "depth": 1}}})
    );
    assert_eq!(
        grandchild["source"],
        json!({"subAgent": {"thread_spawn": {"parent_thread_id": child["id"], "depth": 2}}})
    );
    let read = c
        .ok("thread/read", json!({"threadId": grandchild["id"]}))
        .await;
    assert_eq!(read["thread"]["source"], grandchild["source"]);
    c.check_seen();
}
