//! Black-box tests of a prompt's images (docs/turns-and-providers.md#images): the real
//! daemon against local servers speaking each provider's wire, which record the request
//! bodies; an image reaches each wire in its own form, is stored once as a session
//! resource, and the Log holds only its reference.

use agentd_tests::sse::{chat_text, sse_server, typed_sse};
use agentd_tests::{is_type, Daemon, RpcConn};
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A real 1×1 PNG.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn png() -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(PNG_B64)
        .unwrap()
}

/// A second, different image: a GIF header and body.
fn gif() -> Vec<u8> {
    let mut b = b"GIF89a".to_vec();
    b.extend_from_slice(&[
        1, 0, 1, 0, 0, 0, 0, b',', 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 0, b';',
    ]);
    b
}

fn sha(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

fn responses_reply() -> String {
    let item = json!({"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "I see it."}]});
    typed_sse(&[
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "r1", "model": "m1",
            "status": "completed", "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}}),
    ])
}

fn anthropic_reply() -> String {
    typed_sse(&[
        json!({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I see it."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ])
}

fn reply(kind: &str) -> String {
    match kind {
        "openai-responses" => responses_reply(),
        "anthropic" => anthropic_reply(),
        _ => chat_text("I see it."),
    }
}

fn daemon(kind: &str, base: &str) -> Daemon {
    let base = if kind == "anthropic" {
        base.trim_end_matches("/v1")
    } else {
        base
    };
    let config = format!(
        "default_provider = \"p\"\n[providers.p]\nkind = \"{kind}\"\nbase_url = \"{base}\"\nmodel = \"m1\"\ncontext_window = 100000\n"
    );
    Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start()
}

fn create(c: &mut RpcConn, d: &Daemon) -> String {
    c.call_ok("agentd/create", json!({"workspace": d.workspace()}))["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn resources(d: &Daemon, sid: &str) -> std::path::PathBuf {
    d.log_path(sid).with_extension("").join("resources")
}

/// The prompt images stored for `sid`, as `(sha256, bytes)` by digest: the database's
/// `images` table on the PostgreSQL store (and then none among the session's
/// resources), else the session's resource files.
fn stored_images(d: &Daemon, sid: &str) -> Vec<(String, Vec<u8>)> {
    let files = |dir: std::path::PathBuf| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.map(|e| {
                    let e = e.unwrap();
                    (
                        e.file_name().to_string_lossy().to_string(),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    match d.store_images() {
        Some(rows) => {
            assert_eq!(
                files(resources(d, sid)),
                vec![],
                "images kept in the database only"
            );
            rows
        }
        None => files(resources(d, sid)),
    }
}

/// The images of the user messages of a request body, in `kind`'s wire form, as
/// `(media type, base64 bytes)`.
fn sent_images(kind: &str, body: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let list = match kind {
        "anthropic" => &body["messages"],
        "openai-responses" => &body["input"],
        _ => &body["messages"],
    };
    for m in list.as_array().unwrap() {
        if m["role"] != "user" {
            continue;
        }
        let Some(parts) = m["content"].as_array() else {
            continue;
        };
        for p in parts {
            let url = match (kind, p["type"].as_str()) {
                ("openai-responses", Some("input_image")) => p["image_url"].as_str(),
                ("openai-chat", Some("image_url")) => p["image_url"]["url"].as_str(),
                ("anthropic", Some("image")) => {
                    assert_eq!(p["source"]["type"], "base64", "{p}");
                    out.push((
                        p["source"]["media_type"].as_str().unwrap().to_string(),
                        p["source"]["data"].as_str().unwrap().to_string(),
                    ));
                    None
                }
                _ => None,
            };
            if let Some(url) = url {
                let rest = url.strip_prefix("data:").expect("a data URL");
                let (mime, data) = rest.split_once(";base64,").expect("base64 data URL");
                out.push((mime.to_string(), data.to_string()));
            }
        }
    }
    out
}

/// For each wire: an image given by path (relative to the workspace) reaches the
/// provider with the prompt's text in the wire's own form; the same image again, now
/// inline, is stored once; the next request still carries the first prompt's image
/// (replayed from the resource); the Log holds references, never the bytes.
#[test]
fn an_image_reaches_each_wire_and_is_stored_once() {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    for kind in ["openai-responses", "openai-chat", "anthropic"] {
        let (base, server) = sse_server(vec![reply(kind), reply(kind)]);
        let d = daemon(kind, &base);
        std::fs::write(d.workspace().join("shot.png"), png()).unwrap();
        let mut c = d.connect();
        let sid = create(&mut c, &d);
        let r = c.call_ok(
            "agentd/turn",
            json!({"session_id": sid, "input": "what is on the screenshot?",
                   "images": [{"path": "shot.png"}]}),
        );
        assert_eq!(r["status"], "completed", "{kind}: {r}");
        let r = c.call_ok(
            "agentd/turn",
            json!({"session_id": sid, "input": "and these?",
                   "images": [{"data": PNG_B64, "mime_type": "image/png"},
                              {"data": b64(&gif())}]}),
        );
        assert_eq!(r["status"], "completed", "{kind}: {r}");
        let bodies = server.join().unwrap();
        let png_b64 = b64(&png());
        assert_eq!(
            sent_images(kind, &bodies[0]),
            vec![("image/png".to_string(), png_b64.clone())],
            "{kind}: {}",
            bodies[0]
        );
        assert_eq!(
            sent_images(kind, &bodies[1]),
            vec![
                ("image/png".to_string(), png_b64.clone()),
                ("image/png".to_string(), png_b64.clone()),
                ("image/gif".to_string(), b64(&gif())),
            ],
            "{kind}: {}",
            bodies[1]
        );
        assert!(
            bodies[0].to_string().contains("what is on the screenshot?"),
            "{kind}"
        );

        let mut want = vec![(sha(&png()), png()), (sha(&gif()), gif())];
        want.sort();
        assert_eq!(
            stored_images(&d, &sid),
            want,
            "{kind}: each image stored once"
        );

        let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
        assert!(
            !log.contains(PNG_B64.trim_end_matches('=')),
            "{kind}: bytes in the Log"
        );
        let users: Vec<Value> = d
            .log_lines(&sid)
            .into_iter()
            .filter(|e| is_type(e, "user_message"))
            .collect();
        assert_eq!(
            users[0]["data"]["images"],
            json!([{"sha256": sha(&png()), "mime": "image/png", "bytes": png().len()}]),
            "{kind}"
        );
        assert_eq!(users[1]["data"]["images"][1]["mime"], "image/gif");
    }
}

/// Bad images are `invalid_args` naming the image, before anything is recorded or
/// sent: a text file named `.png`, a `mime_type` the bytes contradict, a file over
/// 20 MiB, a missing file, an entry with neither `path` nor `data`, bad base64, also in
/// a queued turn. The daemon then serves the same session.
#[test]
fn bad_images_are_refused_naming_the_image() {
    let (base, server) = sse_server(vec![chat_text("ok")]);
    let d = daemon("openai-chat", &base);
    let ws = d.workspace();
    std::fs::write(ws.join("notes.png"), "# not an image\n").unwrap();
    let big = std::fs::File::create(ws.join("big.png")).unwrap();
    big.set_len(20 * 1024 * 1024 + 1).unwrap();
    drop(big);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(ws.join("big.png"))
        .unwrap();
    std::io::Write::write_all(&mut f, &png()).unwrap();
    drop(f);
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let before = d.log_lines(&sid).len();
    let cases = [
        (
            json!([{"path": "notes.png"}]),
            "notes.png",
            "not a PNG, JPEG, GIF or WebP",
        ),
        (
            json!([{"data": PNG_B64, "mime_type": "image/jpeg"}]),
            "images[0]",
            "the bytes are image/png, not image/jpeg",
        ),
        (
            json!([{"data": PNG_B64, "mime_type": "text/plain"}]),
            "images[0]",
            "mime_type `text/plain`",
        ),
        (
            json!([{"path": "big.png"}]),
            "big.png",
            "over the 20971520-byte",
        ),
        (json!([{"path": "gone.png"}]), "gone.png", "No such file"),
        (
            json!([{"mime_type": "image/png"}]),
            "images[0]",
            "either `path` or `data`",
        ),
        (json!([{"data": "%%%"}]), "images[0]", "not base64"),
    ];
    for (images, name, why) in cases {
        let r = c.call(
            "agentd/turn",
            json!({"session_id": sid, "input": "look", "images": images}),
        );
        assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{images}: {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("image {name}")) && msg.contains(why),
            "{images}: {msg}"
        );
    }
    // Queued, the same checks hold.
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": "look", "queue": true,
               "images": [{"path": "notes.png"}]}),
    );
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
    assert_eq!(d.log_lines(&sid).len(), before, "nothing recorded");
    assert_eq!(stored_images(&d, &sid), vec![], "nothing stored");
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "hello"}));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(server.join().unwrap().len(), 1);
}

/// A fork keeps a prompt's image; a prompt image whose resource is gone fails the next
/// turn with `not_found` naming its digest, instead of a request without the image.
#[test]
fn a_missing_image_resource_is_not_found_naming_its_digest() {
    let (base, server) = sse_server(vec![responses_reply()]);
    let d = daemon("openai-responses", &base);
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "look", "images": [{"data": PNG_B64}]}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(server.join().unwrap().len(), 1);
    // A fork shares the image (its resource is copied with the events that refer to
    // it; the database's one row serves every session).
    let child = c.call_ok("agentd/fork", json!({"session_id": sid}))["child_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(stored_images(&d, &child), vec![(sha(&png()), png())]);
    if !d.remove_store_image(&sha(&png())) {
        std::fs::remove_file(resources(&d, &sid).join(sha(&png()))).unwrap();
    }
    let r = c.call("agentd/turn", json!({"session_id": sid, "input": "again"}));
    let err = if r.get("error").is_some() {
        r["error"]["data"].clone()
    } else {
        r["result"]["error"].clone()
    };
    assert_eq!(err["kind"], "not_found", "{r}");
    assert!(
        err["message"].as_str().unwrap().contains(&sha(&png())),
        "{r}"
    );
}

/// `agentctl turn --image PATH` (relative to the current directory) sends the file.
#[test]
fn agentctl_image_flag_sends_the_file() {
    let (base, server) = sse_server(vec![responses_reply()]);
    let d = daemon("openai-responses", &base);
    std::fs::create_dir_all(d.workspace().join("shots")).unwrap();
    std::fs::write(d.workspace().join("shots/ui.png"), png()).unwrap();
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let out = d.agentctl([
        "turn",
        &sid,
        "what is wrong here?",
        "--image",
        "shots/ui.png",
    ]);
    out.assert_code(0);
    let bodies = server.join().unwrap();
    assert_eq!(
        sent_images("openai-responses", &bodies[0]),
        vec![(
            "image/png".to_string(),
            base64::engine::general_purpose::STANDARD.encode(png())
        )]
    );
}

/// A provider step calling `read_file` on each of `paths` (call ids `call_0`, …), in
/// `kind`'s wire.
fn read_steps(kind: &str, paths: &[&str]) -> String {
    let args = |p: &str| json!({"path": p}).to_string();
    match kind {
        "anthropic" => {
            let mut evs = vec![
                json!({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}}),
            ];
            for (i, p) in paths.iter().enumerate() {
                evs.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": format!("call_{i}"), "name": "read_file", "input": {}}}));
                evs.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": args(p)}}));
                evs.push(json!({"type": "content_block_stop", "index": i}));
            }
            evs.push(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}}));
            evs.push(json!({"type": "message_stop"}));
            typed_sse(&evs)
        }
        "openai-responses" => {
            let mut evs: Vec<Value> = paths
                .iter()
                .enumerate()
                .map(|(i, p)| json!({"type": "response.output_item.done", "output_index": i, "item": {"type": "function_call", "id": format!("fc_{i}"), "call_id": format!("call_{i}"), "name": "read_file", "arguments": args(p)}}))
                .collect();
            evs.push(json!({"type": "response.completed", "response": {"id": "r1", "model": "m1", "status": "completed", "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}}));
            typed_sse(&evs)
        }
        _ => {
            let calls: Vec<Value> = paths
                .iter()
                .enumerate()
                .map(|(i, p)| json!({"index": i, "id": format!("call_{i}"), "type": "function", "function": {"name": "read_file", "arguments": args(p)}}))
                .collect();
            agentd_tests::sse::chat_sse(&[
                json!({"model": "m1", "choices": [{"index": 0, "delta": {"tool_calls": calls}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ])
        }
    }
}

/// The images a request gives with the results of tool calls, in `kind`'s wire form,
/// as `(call id, media type, base64)`: Responses `function_call_output.output` parts,
/// Anthropic `tool_result.content` blocks, and for Chat Completions (whose tool
/// messages are text) the user message following the tool messages.
fn tool_result_images(kind: &str, body: &Value) -> Vec<(String, String, String)> {
    let url = |u: &str| {
        let (mime, data) = u
            .strip_prefix("data:")
            .and_then(|r| r.split_once(";base64,"))
            .expect("a base64 data URL");
        (mime.to_string(), data.to_string())
    };
    let mut out = Vec::new();
    match kind {
        "openai-responses" => {
            for i in body["input"].as_array().unwrap() {
                if i["type"] != "function_call_output" {
                    continue;
                }
                for p in i["output"].as_array().into_iter().flatten() {
                    if p["type"] == "input_image" {
                        let (m, d) = url(p["image_url"].as_str().unwrap());
                        out.push((i["call_id"].as_str().unwrap().to_string(), m, d));
                    }
                }
            }
        }
        "anthropic" => {
            for m in body["messages"].as_array().unwrap() {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] != "tool_result" {
                        continue;
                    }
                    for p in b["content"].as_array().into_iter().flatten() {
                        if p["type"] == "image" {
                            out.push((
                                b["tool_use_id"].as_str().unwrap().to_string(),
                                p["source"]["media_type"].as_str().unwrap().to_string(),
                                p["source"]["data"].as_str().unwrap().to_string(),
                            ));
                        }
                    }
                }
            }
        }
        _ => {
            let msgs = body["messages"].as_array().unwrap();
            for (i, m) in msgs.iter().enumerate() {
                if m["role"] != "user" || i == 0 || msgs[i - 1]["role"] != "tool" {
                    continue;
                }
                let parts = m["content"].as_array().expect("image parts");
                let head = parts[0]["text"].as_str().unwrap();
                for p in &parts[1..] {
                    let (mime, d) = url(p["image_url"]["url"].as_str().unwrap());
                    // The calls are named in the line before the images.
                    let id = ["call_0", "call_1", "call_2"]
                        .into_iter()
                        .find(|c| head.contains(c))
                        .unwrap_or("?");
                    out.push((id.to_string(), mime, d));
                }
            }
        }
    }
    out
}

/// `read_file` of an image gives the model the image: the next request carries it
/// with the call's result in each wire's form (for Chat Completions, a user message
/// after the tool messages), the result's text describes it, it is stored once as a
/// resource and the Log holds its reference. A text file named `.png` is read as text,
/// and an image over 5 MiB is described, not attached.
#[test]
fn read_file_of_an_image_gives_the_model_the_image() {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    for kind in ["openai-chat", "openai-responses", "anthropic"] {
        let (base, server) = sse_server(vec![
            read_steps(kind, &["shot.png", "notes.png", "huge.png"]),
            reply(kind),
            reply(kind),
        ]);
        let d = daemon(kind, &base);
        let ws = d.workspace();
        std::fs::write(ws.join("shot.png"), png()).unwrap();
        std::fs::write(ws.join("notes.png"), "# plain notes\n").unwrap();
        let mut huge = png();
        huge.resize(5 * 1024 * 1024 + 1, 0);
        std::fs::write(ws.join("huge.png"), &huge).unwrap();
        let mut c = d.connect();
        let sid = create(&mut c, &d);
        let r = c.call_ok(
            "agentd/turn",
            json!({"session_id": sid, "input": "look at the screenshots"}),
        );
        assert_eq!(r["status"], "completed", "{kind}: {r}");
        let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "thanks"}));
        assert_eq!(r["status"], "completed", "{kind}: {r}");
        let bodies = server.join().unwrap();
        assert_eq!(bodies.len(), 3, "{kind}");
        let want = vec![("call_0".to_string(), "image/png".to_string(), b64(&png()))];
        assert_eq!(
            tool_result_images(kind, &bodies[1]),
            want,
            "{kind}: {}",
            bodies[1]
        );
        // Replayed with the later turn's request too.
        assert_eq!(tool_result_images(kind, &bodies[2]), want, "{kind}");
        let results: Vec<Value> = d
            .log_lines(&sid)
            .into_iter()
            .filter(|e| is_type(e, "tool_result"))
            .map(|e| e["data"].clone())
            .collect();
        assert_eq!(
            results[0]["images"],
            json!([{"sha256": sha(&png()), "mime": "image/png", "bytes": png().len()}]),
            "{kind}"
        );
        let out = results[0]["output"].as_str().unwrap();
        assert!(
            out.contains("image/png") && out.contains("attached as an image"),
            "{kind}: {out}"
        );
        assert_eq!(results[1]["output"], "# plain notes\n", "{kind}");
        assert!(results[1].get("images").is_none(), "{kind}");
        let out = results[2]["output"].as_str().unwrap();
        assert!(out.contains("not attached"), "{kind}: {out}");
        assert!(results[2].get("images").is_none(), "{kind}");
        assert_eq!(
            std::fs::read(resources(&d, &sid).join(sha(&png()))).unwrap(),
            png()
        );
        // On the PostgreSQL store, in its images table too (any daemon can send it).
        if let Some(rows) = d.store_images() {
            assert_eq!(rows, vec![(sha(&png()), png())], "{kind}");
        }
        let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
        assert!(
            !log.contains(PNG_B64.trim_end_matches('=')),
            "{kind}: bytes in the Log"
        );
    }
}

/// `images = false` on a provider (a text-only model behind a Chat Completions server):
/// a turn with images is refused naming the provider before anything is recorded, and
/// an image `read_file` returns reaches it only as the result's description (no
/// `image_url` anywhere in the request), so the session keeps working.
#[test]
fn a_provider_without_images_gets_descriptions_only() {
    let (base, server) = sse_server(vec![
        read_steps("openai-chat", &["shot.png"]),
        chat_text("A description is all I got."),
    ]);
    let config = format!(
        "default_provider = \"p\"\n[providers.p]\nkind = \"openai-chat\"\nbase_url = \"{base}\"\nmodel = \"m1\"\nimages = false\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    std::fs::write(d.workspace().join("shot.png"), png()).unwrap();
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let before = d.log_lines(&sid).len();
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": "look", "images": [{"path": "shot.png"}]}),
    );
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("provider `p` takes no images"),
        "{r}"
    );
    assert_eq!(d.log_lines(&sid).len(), before, "nothing recorded");
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "read the screenshot"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let bodies = server.join().unwrap();
    assert_eq!(bodies.len(), 2);
    assert!(
        !bodies[1].to_string().contains("image_url"),
        "{}",
        bodies[1]
    );
    let tool = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message: {}", bodies[1]));
    let text = tool["content"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "[image: image/png, {} bytes, sha256 {}]",
            png().len(),
            sha(&png())
        )) && text.contains("shot.png: attached as an image"),
        "{text}"
    );
}

/// A daemon whose provider holds its first request until `go` is sent (answering
/// `first`, every later one `then`), with `shot.png` in the workspace and a session whose
/// turn "first" has reached that request.
struct Held {
    mock: agentd_tests::sse::MockProvider,
    d: Daemon,
    c: RpcConn,
    sid: String,
    go: std::sync::mpsc::Sender<()>,
    /// `agentd/turn`'s answer for "first".
    started: Value,
}

fn first_turn_held(first: &'static str, then: &'static str) -> Held {
    use agentd_tests::sse::{MockProvider, Reply};
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |n, _| {
        if n == 0 {
            let _ = go_rx
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(60));
            return Reply::Complete(chat_text(first));
        }
        Reply::Complete(chat_text(then))
    });
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&mock.config())
        .start();
    std::fs::write(d.workspace().join("shot.png"), png()).unwrap();
    let mut c = d.connect();
    let sid = create(&mut c, &d);
    let started = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "first", "wait": false}),
    );
    mock.wait_requests(1, std::time::Duration::from_secs(60));
    Held {
        mock,
        d,
        c,
        sid,
        go,
        started,
    }
}

/// A turn with images queued behind a running one: its images are stored when it is
/// queued (`turn_queued` records their references, never the bytes), and when it starts
/// its prompt reaches the provider with them.
#[test]
fn a_queued_turn_keeps_its_images() {
    let Held {
        mock,
        d,
        mut c,
        sid,
        go: go_tx,
        started: r,
    } = first_turn_held("Seen.", "Seen.");
    assert_eq!(r["status"], "running", "{r}");
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "then this picture", "queue": true,
               "images": [{"path": "shot.png"}]}),
    );
    assert_eq!(r["status"], "queued", "{r}");
    let refs = json!([{"sha256": sha(&png()), "mime": "image/png", "bytes": png().len()}]);
    let queued: Vec<Value> = d
        .log_lines(&sid)
        .into_iter()
        .filter(|e| is_type(e, "turn_queued"))
        .collect();
    assert_eq!(queued[0]["data"]["params"]["images"], refs, "{queued:?}");
    assert_eq!(stored_images(&d, &sid), vec![(sha(&png()), png())]);
    go_tx.send(()).unwrap();
    let bodies = mock.wait_requests(2, std::time::Duration::from_secs(60));
    assert_eq!(
        sent_images("openai-chat", &bodies[1]),
        vec![("image/png".to_string(), b64_of(&png()))],
        "{}",
        bodies[1]
    );
    let users: Vec<Value> = d
        .log_lines(&sid)
        .into_iter()
        .filter(|e| is_type(e, "user_message"))
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(users[1]["text"], "then this picture");
    assert_eq!(users[1]["images"], refs);
    let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
    assert!(
        !log.contains(PNG_B64.trim_end_matches('=')),
        "bytes in the Log"
    );
}

/// A steer with an image: the image is stored when the steer is taken, the steered
/// `user_message` records its reference, the turn's next provider call carries it, and a
/// retry with the same `client_request_id` but another image is a conflict. A bad image
/// is refused before anything is recorded.
#[test]
fn a_steer_carries_its_images_into_the_next_provider_call() {
    let Held {
        mock,
        d,
        mut c,
        sid,
        go: go_tx,
        ..
    } = first_turn_held("Looking.", "Seen the picture.");
    std::fs::write(d.workspace().join("other.gif"), gif()).unwrap();
    std::fs::write(d.workspace().join("notes.txt"), "not an image").unwrap();
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let e = c.call(
        "agentd/steer",
        json!({"session_id": sid, "input": "this?", "images": [{"path": "notes.txt"}]}),
    );
    assert_eq!(e["error"]["data"]["kind"], "invalid_args", "{e}");
    let mut sc = d.connect();
    let sid2 = sid.clone();
    let steer = std::thread::spawn(move || {
        sc.call(
            "agentd/steer",
            json!({"session_id": sid2, "input": "look at this picture",
                   "client_request_id": "st-img", "images": [{"path": "shot.png"}]}),
        )
    });
    sub.wait_event(
        |e| is_type(e, "status") && e["data"]["steer_pending"] == true,
        std::time::Duration::from_secs(60),
    )
    .expect("the steer waits for the next provider call");
    let conflict = c.call(
        "agentd/steer",
        json!({"session_id": sid, "input": "look at this picture",
               "client_request_id": "st-img", "images": [{"path": "other.gif"}]}),
    );
    assert_eq!(conflict["error"]["data"]["kind"], "conflict", "{conflict}");
    go_tx.send(()).unwrap();
    let answered = steer.join().unwrap();
    assert!(answered["result"]["seq"].is_u64(), "{answered}");
    let bodies = mock.wait_requests(2, std::time::Duration::from_secs(60));
    assert_eq!(sent_images("openai-chat", &bodies[0]), vec![]);
    assert_eq!(
        sent_images("openai-chat", &bodies[1]),
        vec![("image/png".to_string(), b64_of(&png()))],
        "{}",
        bodies[1]
    );
    let refs = json!([{"sha256": sha(&png()), "mime": "image/png", "bytes": png().len()}]);
    let steered: Vec<Value> = d
        .log_lines(&sid)
        .into_iter()
        .filter(|e| is_type(e, "user_message") && e["data"]["steer"] == true)
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(steered.len(), 1, "{steered:?}");
    assert_eq!(steered[0]["text"], "look at this picture");
    assert_eq!(steered[0]["images"], refs);
    assert_eq!(stored_images(&d, &sid), vec![(sha(&png()), png())]);
}

fn b64_of(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}
