//! `agentd/subscribe` with an `after_seq` the session has not reached yet: only events
//! after that seq arrive, as the contract says ("durable events after it ... then live
//! ones"), never the live events in between.

use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::time::Duration;

#[test]
fn subscribing_ahead_of_the_log_skips_events_up_to_after_seq() {
    let d = Daemon::start();
    let sid = d.create_session();
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(5));
    let mut c = d.connect();
    for i in 1..=10 {
        c.call_ok(
            "agentd/append",
            json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": format!("m{i}")}}]}),
        );
    }
    let mut seqs = Vec::new();
    while seqs.len() < 5 {
        let ev = sub
            .wait_event(|e| e.get("seq").is_some(), Duration::from_secs(10))
            .unwrap_or_else(|| panic!("only {seqs:?} arrived"));
        seqs.push(ev["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs, vec![6, 7, 8, 9, 10]);
    // And a subscriber from an existing seq still gets everything after it.
    let mut sub2 = d.connect();
    sub2.subscribe(&sid, Some(8));
    let ev: Value = sub2
        .wait_event(|e| e.get("seq").is_some(), Duration::from_secs(10))
        .unwrap();
    assert_eq!(ev["seq"], 9);
}
