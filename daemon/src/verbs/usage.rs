//! `agentd/usage`: token totals from `provider_usage` events, grouped by model, session
//! or day, with a cost when the config prices the model:
//!
//! ```toml
//! [prices."gpt-5-mini"]          # per million tokens, in any one currency
//! input = 0.25
//! cached_input = 0.025           # default: the input price
//! output = 2.0                   # reasoning tokens are billed as output tokens, which
//!                                # already include them
//! ```
//!
//! Logs are read directly (only lines containing `"provider_usage"` are parsed), in
//! parallel; a session's usage is what its own Log records, so a fork counts the calls
//! its parent made before the fork point too only if they were copied into it (forks
//! copy events, so `--by session` shows both; the whole-home total counts each Log).

use crate::registry::Registry;
use agentd_proto::rpc::{UsageParams, UsageResult, UsageRow, UsageTotals};
use agentd_proto::{AgentError, Event};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::config::Price;

/// One `provider_usage` event, reduced.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub session_id: String,
    pub ts: String,
    pub model: String,
    pub totals: UsageTotals,
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// The `provider_usage` events of one Log's bytes.
pub fn records(sid: &str, bytes: &[u8]) -> Vec<Record> {
    let finder = memchr::memmem::Finder::new(b"\"provider_usage\"");
    let mut out = Vec::new();
    for line in bytes.split(|b| *b == b'\n') {
        if finder.find(line).is_none() {
            continue;
        }
        let Ok(ev) = serde_json::from_slice::<Event>(line) else {
            continue;
        };
        if ev.kind != "provider_usage" {
            continue;
        }
        let u = ev.data.get("usage").cloned().unwrap_or(Value::Null);
        let (input, output) = (num(&u, "input_tokens"), num(&u, "output_tokens"));
        let total = match num(&u, "total_tokens") {
            0 => input.saturating_add(output),
            t => t,
        };
        out.push(Record {
            session_id: sid.to_string(),
            ts: ev.ts.clone(),
            model: ev.str_field("model").unwrap_or("unknown").to_string(),
            totals: UsageTotals {
                calls: 1,
                input_tokens: input,
                cached_tokens: num(&u, "cached_tokens"),
                output_tokens: output,
                reasoning_tokens: num(&u, "reasoning_tokens"),
                total_tokens: total,
                cost: None,
            },
        });
    }
    out
}

fn add(a: &mut UsageTotals, b: &UsageTotals) {
    a.calls = a.calls.saturating_add(b.calls);
    a.input_tokens = a.input_tokens.saturating_add(b.input_tokens);
    a.cached_tokens = a.cached_tokens.saturating_add(b.cached_tokens);
    a.output_tokens = a.output_tokens.saturating_add(b.output_tokens);
    a.reasoning_tokens = a.reasoning_tokens.saturating_add(b.reasoning_tokens);
    a.total_tokens = a.total_tokens.saturating_add(b.total_tokens);
    a.cost = match (a.cost, b.cost) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    };
}

/// Cost of one call's tokens at `price` (per million tokens).
pub fn cost(t: &UsageTotals, price: &Price) -> f64 {
    let cached = t.cached_tokens.min(t.input_tokens);
    let fresh = t.input_tokens - cached;
    (fresh as f64 * price.input
        + cached as f64 * price.cached_input.unwrap_or(price.input)
        + t.output_tokens as f64 * price.output)
        / 1_000_000.0
}

/// A `since` bound as a string comparable with event `ts` values.
pub fn since_bound(since: &str) -> Result<String, AgentError> {
    let bad = || {
        AgentError::invalid_args("since must be YYYY-MM-DD or an RFC 3339 time")
            .with_details(json!({"field": "since"}))
    };
    let fmt = time::format_description::well_known::Rfc3339;
    if let Ok(t) = time::OffsetDateTime::parse(since, &fmt) {
        let t = t.to_offset(time::UtcOffset::UTC);
        return Ok(format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.microsecond()
        ));
    }
    let parts: Vec<&str> = since.split('-').collect();
    let [y, m, d] = parts[..] else {
        return Err(bad());
    };
    if (y.len(), m.len(), d.len()) != (4, 2, 2) {
        return Err(bad());
    }
    let (y, m, d) = (
        y.parse::<i32>().map_err(|_| bad())?,
        m.parse::<u8>().map_err(|_| bad())?,
        d.parse::<u8>().map_err(|_| bad())?,
    );
    let month = time::Month::try_from(m).map_err(|_| bad())?;
    time::Date::from_calendar_date(y, month, d).map_err(|_| bad())?;
    Ok(since.to_string())
}

/// Groups `records` by `by` (`model`, `session`, `day`) and prices them.
pub fn aggregate(
    records: &[Record],
    by: &str,
    since: Option<&str>,
    prices: &BTreeMap<String, Price>,
) -> UsageResult {
    let mut rows: BTreeMap<String, UsageTotals> = BTreeMap::new();
    let mut total = UsageTotals::default();
    let mut unpriced = std::collections::BTreeSet::new();
    for r in records {
        if since.is_some_and(|s| r.ts.as_str() < s) {
            continue;
        }
        let mut t = r.totals.clone();
        match prices.get(&r.model) {
            Some(p) => t.cost = Some(cost(&t, p)),
            None => {
                unpriced.insert(r.model.clone());
            }
        }
        let key = match by {
            "session" => r.session_id.clone(),
            "day" => r.ts.get(..10).unwrap_or("").to_string(),
            _ => r.model.clone(),
        };
        add(rows.entry(key).or_default(), &t);
        add(&mut total, &t);
    }
    UsageResult {
        by: by.to_string(),
        rows: rows
            .into_iter()
            .map(|(key, totals)| UsageRow { key, totals })
            .collect(),
        total,
        unpriced_models: unpriced.into_iter().collect(),
        subagents: Vec::new(),
    }
}

/// `agentd/usage`.
pub async fn usage(registry: &Arc<Registry>, p: UsageParams) -> Result<UsageResult, AgentError> {
    let by = p.by.clone().unwrap_or_else(|| "model".to_string());
    if !matches!(by.as_str(), "model" | "session" | "day") {
        return Err(AgentError::invalid_args("by must be model, session or day")
            .with_details(json!({"field": "by"})));
    }
    let since = p.since.as_deref().map(since_bound).transpose()?;
    let prices = registry.config.prices.clone();
    // On a shared database: other daemons' sessions too.
    registry.refresh_index().await;
    let logs: Vec<(String, std::path::PathBuf)> = match &p.session_id {
        Some(sid) => {
            let path = registry.home.log_path(sid)?;
            let (store, s) = (registry.store.clone(), sid.clone());
            let exists = super::manage::blocking(move || match store.place(&s) {
                Some(place) => place.map(|p| p == crate::store::LogPlace::Live),
                None => store.exists(&s),
            })
            .await?;
            if !exists {
                return Err(AgentError::not_found("no such session")
                    .with_details(json!({"session_id": sid}))
                    .with_next_actions(&["agentctl ls"]));
            }
            // A session's usage includes its subagents' (docs/subagents.md).
            let mut logs = vec![(sid.clone(), path)];
            for child in subagents_of(registry, sid) {
                if let Ok(p) = registry.home.log_path(&child) {
                    logs.push((child, p));
                }
            }
            logs
        }
        None => registry.with_index(|i| {
            i.values()
                .filter(|m| !m.deleted)
                .filter_map(|m| {
                    Some((
                        m.session_id.clone(),
                        registry.home.log_path(&m.session_id).ok()?,
                    ))
                })
                .collect()
        }),
    };
    let store = registry.store.clone();
    super::manage::blocking(move || {
        let store = store.as_ref();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 16);
        let chunk = logs.len().div_ceil(threads).max(1);
        let all: Vec<Record> = std::thread::scope(|s| {
            let workers: Vec<_> = logs
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .filter_map(|(sid, path)| {
                                let bytes = super::search::read_log_bytes(store, sid, path)?;
                                Some(records(sid, &bytes))
                            })
                            .flatten()
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        });
        let mut out = aggregate(&all, &by, since.as_deref(), &prices);
        out.subagents = logs.iter().skip(1).map(|(s, _)| s.clone()).collect();
        if p.session_id.is_none() {
            out.subagents.clear();
        }
        Ok(out)
    })
    .await
}

/// The subagent sessions under `sid`, at every depth, parents before children.
fn subagents_of(registry: &Registry, sid: &str) -> Vec<String> {
    registry.with_index(|i| {
        let mut out: Vec<String> = Vec::new();
        let mut next = vec![sid.to_string()];
        while let Some(parent) = next.pop() {
            let mut kids: Vec<&String> = i
                .values()
                .filter(|m| !m.deleted && m.relation.as_deref() == Some("subagent"))
                .filter(|m| m.parent_session_id.as_deref() == Some(parent.as_str()))
                .map(|m| &m.session_id)
                .filter(|k| k.as_str() != sid && !out.contains(k))
                .collect();
            kids.sort();
            for k in kids {
                out.push(k.clone());
                next.push(k.clone());
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(sid: &str, ts: &str, model: &str, input: u64, cached: u64, output: u64) -> Record {
        Record {
            session_id: sid.into(),
            ts: ts.into(),
            model: model.into(),
            totals: UsageTotals {
                calls: 1,
                input_tokens: input,
                cached_tokens: cached,
                output_tokens: output,
                total_tokens: input + output,
                ..Default::default()
            },
        }
    }

    #[test]
    fn groups_prices_and_filters_by_time() {
        let rs = vec![
            rec(
                "a",
                "2026-11-20T10:00:00.000000Z",
                "m1",
                1_000_000,
                500_000,
                100_000,
            ),
            rec("a", "2026-11-21T10:00:00.000000Z", "m1", 1000, 0, 10),
            rec("b", "2026-11-21T11:00:00.000000Z", "m2", 50, 0, 5),
        ];
        let prices: BTreeMap<String, Price> = [(
            "m1".to_string(),
            Price {
                input: 1.0,
                cached_input: Some(0.1),
                output: 10.0,
            },
        )]
        .into();
        let r = aggregate(&rs, "model", None, &prices);
        assert_eq!(r.rows.len(), 2);
        let m1 = &r.rows[0].totals;
        assert_eq!(
            (m1.calls, m1.input_tokens, m1.output_tokens),
            (2, 1_001_000, 100_010)
        );
        // 0.5M fresh at 1.0 + 0.5M cached at 0.1 + 0.1M out at 10, then 1000 in + 10 out.
        let want = 0.5 + 0.05 + 1.0 + 0.001 + 0.0001;
        assert!((m1.cost.unwrap() - want).abs() < 1e-9, "{:?}", m1.cost);
        assert_eq!(r.rows[1].totals.cost, None);
        assert_eq!(r.unpriced_models, ["m2"]);
        let by_day = aggregate(
            &rs,
            "day",
            Some(&since_bound("2026-11-21").unwrap()),
            &prices,
        );
        assert_eq!(by_day.rows.len(), 1);
        assert_eq!(by_day.rows[0].key, "2026-11-21");
        assert_eq!(by_day.total.calls, 2);
        assert_eq!(
            since_bound("2026-11-21T12:00:00+02:00").unwrap(),
            "2026-11-21T10:00:00.000000Z"
        );
        assert!(since_bound("yesterday").is_err());
    }

    #[test]
    fn reads_only_usage_lines() {
        let log = concat!(
            r#"{"id":"1","session_id":"s","seq":0,"ts":"2026-11-21T10:00:00.000000Z","type":"user_message","data":{"text":"provider_usage"}}"#,
            "\n",
            r#"{"id":"2","session_id":"s","seq":1,"ts":"2026-11-21T10:00:01.000000Z","type":"provider_usage","data":{"provider":"p","model":"m","usage":{"input_tokens":7,"output_tokens":3}}}"#,
            "\n",
            "not json \"provider_usage\"\n"
        );
        let rs = records("s", log.as_bytes());
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].totals.total_tokens, 10);
    }

    #[test]
    fn bad_price_tables_name_the_model() {
        let e = crate::config::Config::parse("[prices.m1]\ninput = 1.0\n").unwrap_err();
        assert_eq!(e, "line 1: missing key `output` in [prices.m1]");
    }
}
