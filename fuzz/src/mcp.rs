//! MCP targets over `agentd-mcp`'s pure parts.
//!
//! - `mcp_names`: any set of (server, tool) pairs gets model-visible names that are
//!   unique, match `^[A-Za-z0-9_-]{1,64}$`, start with `mcp__`, keep a plain name when it
//!   fits and is not shared, and do not depend on the order the pairs come in.
//! - `mcp_result`: any `tools/call` result maps without a panic; `ok` is `!isError`; one
//!   content type per block; one `#i` placeholder line per media part.
//! - `acp_mcp_servers`: ACP `session/new` params (`mcpServers` entries): an accepted
//!   entry validates, and what the Log may record of it (`describe`) does not depend on
//!   the secret values (env values, header values) it carries.

use agentd_mcp::config::parse_client_entry;
use agentd_mcp::names::{self, assign, is_valid, MAX_NAME, PREFIX};
use agentd_mcp::result::map_result;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub fn names(pairs: &[(String, String)]) {
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .take(64)
        .map(|(s, t)| (s.as_str(), t.as_str()))
        .collect();
    let m = assign(refs.iter().copied());
    let distinct: BTreeSet<(&str, &str)> = refs.iter().copied().collect();
    assert_eq!(m.len(), distinct.len(), "one name per distinct pair");
    let mut seen = BTreeSet::new();
    let mut bases: BTreeMap<String, usize> = BTreeMap::new();
    for &(s, t) in &distinct {
        *bases.entry(names::base_name(s, t)).or_default() += 1;
    }
    for x in &m {
        assert!(is_valid(&x.name), "invalid name {:?}", x.name);
        assert!(x.name.len() <= MAX_NAME);
        assert!(x.name.starts_with(PREFIX), "{:?} lacks the prefix", x.name);
        assert!(seen.insert(x.name.clone()), "duplicate name {:?}", x.name);
        assert!(distinct.contains(&(x.server.as_str(), x.tool.as_str())));
        let base = names::base_name(&x.server, &x.tool);
        if base.len() <= MAX_NAME && bases[&base] == 1 {
            assert_eq!(x.name, base, "a plain name that fits was not kept");
        }
    }
    let mut reversed = refs.clone();
    reversed.reverse();
    assert_eq!(
        assign(reversed),
        m,
        "names depend on the order of the pairs"
    );
}

pub fn result(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let m = map_result(&v);
    let is_error = v.get("isError").and_then(Value::as_bool).unwrap_or(false);
    assert_eq!(m.ok, !is_error, "ok is not !isError");
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    assert_eq!(m.content_types.len(), blocks, "one content type per block");
    assert!(!m.text.is_empty(), "the mapped text is empty");
    for (i, media) in m.media.iter().enumerate() {
        let mark = format!("{} bytes #{i}]", media.bytes.len());
        assert!(
            m.text.contains(&mark),
            "no placeholder {mark:?} in {:?}",
            m.text
        );
    }
    assert_eq!(m.structured, v.get("structuredContent").is_some());
}

pub fn acp_servers(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // `session/new` params, or the `mcpServers` list alone.
    let entries = match v.get("mcpServers").unwrap_or(&v) {
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    for e in &entries {
        let Ok((name, cfg)) = parse_client_entry(e) else {
            continue;
        };
        assert!(
            cfg.validate(&name).is_ok(),
            "accepted entry does not validate"
        );
        let mut blank = cfg.clone();
        blank.env.values_mut().for_each(String::clear);
        blank.headers.values_mut().for_each(String::clear);
        assert_eq!(
            cfg.describe(&name),
            blank.describe(&name),
            "what the Log records depends on a secret value"
        );
        assert!(cfg.tool_max() >= cfg.tool_timeout());
        let _ = cfg.startup_timeout();
    }
}
