//! Unit tests of the chat's state: keys, replies and the calls they ask for.

use super::*;
use crate::rpc::connection_lost;

fn attached() -> App {
    let mut a = App::new("/w".into(), TurnSettings::default());
    a.attach("s1");
    a.on_reply(Tag::Subscribe, Ok(json!({"subscription": 1})));
    a
}

fn type_line(a: &mut App, text: &str) -> Vec<Effect> {
    for c in text.chars() {
        a.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
    a.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE))
}

#[test]
fn a_prompt_cut_by_a_lost_connection_is_sent_again_with_its_id() {
    let mut a = attached();
    let fx = type_line(&mut a, "hello");
    let turn = fx
        .iter()
        .find(|f| matches!(f, Effect::Call(Tag::Turn(_), ..)))
        .cloned()
        .expect("a turn call");
    let Effect::Call(tag, m, params) = &turn else {
        unreachable!()
    };
    assert_eq!(*m, method::TURN);
    assert_eq!(params["input"], "hello");
    assert!(params["client_request_id"]
        .as_str()
        .unwrap()
        .starts_with("chat-"));
    a.on_disconnected();
    let fx = a.on_reply(tag.clone(), Err(connection_lost("gone")));
    assert!(fx.is_empty());
    let fx = a.on_connected();
    assert!(fx.contains(&turn), "{fx:?}");
    // A second prompt gets a new id.
    a.on_reply(Tag::Subscribe, Ok(json!({"subscription": 2})));
    a.on_reply(tag.clone(), Ok(json!({"status": "running"})));
    let fx = type_line(&mut a, "again");
    let Some(Effect::Call(_, _, p2)) = fx
        .iter()
        .find(|f| matches!(f, Effect::Call(Tag::Turn(_), ..)))
    else {
        panic!("{fx:?}")
    };
    assert_ne!(p2["client_request_id"], params["client_request_id"]);
}

#[test]
fn pgup_at_the_top_draws_the_page_before() {
    let mut a = App::new("/w".into(), TurnSettings::default());
    a.attach("s1");
    let msg =
        |seq: u64| json!({"seq": seq, "type": "user_message", "data": {"text": format!("m{seq}")}});
    let page: Vec<Value> = (3..=HISTORY_EVENTS + 2).map(msg).collect();
    let fx = a.on_reply(Tag::Tail, Ok(json!({"events": page})));
    assert!(
        matches!(&fx[..], [Effect::Call(Tag::Subscribe, _, p)] if p["after_seq"] == HISTORY_EVENTS + 2),
        "{fx:?}"
    );
    assert!(
        matches!(&a.view.items[0], crate::view::Item::Notice { text, .. } if text.starts_with("3 earlier events"))
    );
    let fx = a.load_older();
    let [Effect::Call(tag, _, p)] = &fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(p["limit"], 3);
    assert!(p.get("after_seq").is_none());
    a.on_reply(tag.clone(), Ok(json!({"events": [msg(0), msg(1), msg(2)]})));
    let texts: Vec<String> = a
        .view
        .items
        .iter()
        .take(4)
        .map(|i| match i {
            crate::view::Item::User { text } => text.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["m0", "m1", "m2", "m3"]);
    assert!(a.load_older().is_empty(), "nothing older than seq 0");
    // Live events still go after the last one.
    a.on_event(&json!({"session_id": "s1", "seq": HISTORY_EVENTS + 3, "type": "user_message", "data": {"text": "live"}}));
    assert!(
        matches!(a.view.items.back(), Some(crate::view::Item::User { text }) if text == "live")
    );
}

#[test]
fn ctrl_c_interrupts_clears_then_quits_twice_on_idle() {
    let mut a = attached();
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    a.view
        .apply(&json!({"seq": 1, "type": "turn_started", "data": {"turn_id": "t"}}));
    let fx = a.on_key(ctrl_c);
    assert!(matches!(&fx[..], [Effect::Call(Tag::Interrupt, m, _)] if *m == method::INTERRUPT));
    a.view.apply(
        &json!({"seq": 2, "type": "turn_ended", "data": {"turn_id": "t", "status": "interrupted"}}),
    );
    a.editor.set("draft");
    assert!(a.on_key(ctrl_c).is_empty());
    assert!(a.editor.is_empty());
    assert!(a.on_key(ctrl_c).is_empty());
    assert_eq!(a.on_key(ctrl_c), vec![Effect::Quit]);
}

#[test]
fn permission_keys_answer_and_a_allows_for_the_session() {
    let mut a = attached();
    let req = json!({"session_id": "s1", "tool": "write_file", "args": {"path": "x"}});
    a.on_request(json!(7), method::PERMISSION, &req);
    let fx = a.on_key(KeyEvent::new(KeyCode::Char('a'), KeyModifiers::NONE));
    // `a` asks the daemon to remember the tool for the session: it asks no more.
    assert_eq!(
        fx,
        vec![Effect::Respond(
            json!(7),
            json!({"decision": "allow_always"})
        )]
    );
    assert!(a.permissions.is_empty());
    // A subagent's request (the daemon routes it to its parent's client) is asked
    // about, naming the subagent; one without a session is denied.
    let child = json!({"session_id": "s2", "tool": "shell", "args": {"command": "ls"}});
    assert!(a
        .on_request(json!(8), method::PERMISSION, &child)
        .is_empty());
    assert_eq!(a.permissions[0].subagent.as_deref(), Some("s2"));
    let fx = a.on_key(KeyEvent::new(KeyCode::Char('y'), KeyModifiers::NONE));
    assert_eq!(
        fx,
        vec![Effect::Respond(json!(8), json!({"decision": "allow"}))]
    );
    let nobody = json!({"tool": "shell", "args": {}});
    assert_eq!(
        a.on_request(json!(9), method::PERMISSION, &nobody),
        vec![Effect::Respond(json!(9), json!({"decision": "deny"}))]
    );
    let grant = json!({"session_id": "s1", "tool": "shell", "args": {"command": "x"}, "sandbox_grant": {"network": "host"}});
    a.on_request(json!(10), method::PERMISSION, &grant);
    let fx = a.on_key(KeyEvent::new(KeyCode::Char('a'), KeyModifiers::NONE));
    assert_eq!(
        fx,
        vec![Effect::Respond(
            json!(10),
            json!({"decision": "allow", "scope": "session"})
        )]
    );
}

#[test]
fn goal_and_model_commands_send_the_daemons_param_types() {
    let mut a = attached();
    a.settings.model = Some("gpt-x".into());
    let fx = type_line(&mut a, "/goal --max-turns 3 --budget 500 ship it");
    let [Effect::Call(Tag::Show2("goal"), m, p)] = &fx[..] else {
        panic!("one goal_set call, got {fx:?}")
    };
    assert_eq!(*m, method::GOAL_SET);
    assert_eq!(
        *p,
        json!({"session_id": "s1", "objective": "ship it", "max_turns": 3,
               "token_budget": 500, "model": "gpt-x"})
    );
    // More turns than the daemon's type holds is the usage error, before any call.
    assert!(type_line(&mut a, "/goal --max-turns 99999999999 x").is_empty());
    let fx = type_line(&mut a, "/model other");
    let [Effect::Call(Tag::Model(_), m, p)] = &fx[..] else {
        panic!("one preflight call, got {fx:?}")
    };
    assert_eq!((*m, p), (method::PREFLIGHT, &json!({"model": "other"})));
    let fx = type_line(&mut a, "/fork 7");
    let [Effect::Call(Tag::Fork, _, p)] = &fx[..] else {
        panic!("one fork call, got {fx:?}")
    };
    assert_eq!(*p, json!({"session_id": "s1", "to_seq": 7}));
}

#[test]
fn attaching_draws_the_newest_page_then_follows_and_shows_a_running_turn() {
    let mut a = App::new("/w".into(), TurnSettings::default());
    let fx = a.attach("s1");
    let [Effect::Call(Tag::Tail, m, p), Effect::Call(Tag::Show, _, _)] = &fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(*m, method::EVENTS);
    assert_eq!(p["tail"], HISTORY_EVENTS);
    assert!(
        p.get("after_seq").is_none() && p.get("limit").is_none(),
        "{p}"
    );
    let fx = a.on_reply(
        Tag::Tail,
        Ok(json!({"events": [
            {"seq": 0, "type": "session_started", "data": {"workspace": "/w"}},
            {"seq": 1, "type": "user_message", "data": {"text": "hi"}}]})),
    );
    assert!(
        matches!(&fx[..], [Effect::Call(Tag::Subscribe, _, p)] if p["after_seq"] == 1),
        "{fx:?}"
    );
    assert!(a.history_after.is_none(), "the whole session is drawn");
    // `show` answered from an older state than the view's: its status is stale.
    a.view
        .apply(&json!({"seq": 2, "type": "assistant_message", "data": {"text": "a"}}));
    a.on_reply(Tag::Show, Ok(json!({"last_seq": 1, "status": "running"})));
    assert_eq!(a.view.turn, TurnState::Idle);
    // Current: a turn runs whose start is not on the page.
    a.on_reply(Tag::Show, Ok(json!({"last_seq": 2, "status": "running"})));
    assert!(matches!(a.view.turn, TurnState::Running { .. }));
    a.view.apply(
        &json!({"seq": 3, "type": "turn_ended", "data": {"turn_id": "t", "status": "completed"}}),
    );
    assert_eq!(a.view.turn, TurnState::Idle);
}
