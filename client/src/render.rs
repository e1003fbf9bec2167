//! Human renderings of daemon results: the session table, relative times, one-line event
//! summaries and the fork tree. All pure (input JSON + "now" → text) so golden tests pin
//! them; the `--json` output never goes through this module.

use serde_json::Value;
use std::fmt::Write as _;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// "just now", "42s ago", "3m ago", "5h ago", "2d ago"; older than 30 days gives the
/// date (`2026-10-01`). A time in the future (clock skew) reads "just now"; an
/// unparsable one is shown as given.
pub fn relative_time(ts: &str, now: OffsetDateTime) -> String {
    let Ok(t) = OffsetDateTime::parse(ts, &Rfc3339) else {
        return ts.to_string();
    };
    let secs = (now - t).whole_seconds();
    match secs {
        s if s < 5 => "just now".to_string(),
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{}m ago", s / 60),
        s if s < 86_400 => format!("{}h ago", s / 3600),
        s if s < 30 * 86_400 => format!("{}d ago", s / 86_400),
        _ => ts.get(..10).unwrap_or(ts).to_string(),
    }
}

/// Clips `s` to at most `max` characters on one line: newlines and tabs become spaces,
/// a cut is marked with `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() <= max {
        return flat.to_string();
    }
    let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn num_of(v: &Value, key: &str) -> String {
    v.get(key).map(|n| n.to_string()).unwrap_or_default()
}

/// The human output of `agentctl goal` (set, `--show`, `--clear`).
pub fn goal(v: &Value) -> String {
    if let Some(c) = v.get("cleared").and_then(Value::as_bool) {
        return match (c, v.get("goal_id").and_then(Value::as_str)) {
            (true, Some(id)) => format!("cleared goal {id}\n"),
            _ => "no open goal\n".into(),
        };
    }
    if let Some(g) = v.get("goal") {
        if g.is_null() {
            return "no goal\n".into();
        }
        let mut out = format!(
            "goal {} ({})\nobjective: {}\nturns: {} of {}\ntokens: {}",
            str_of(g, "goal_id"),
            str_of(g, "status"),
            str_of(g, "objective"),
            num_of(g, "turns_used"),
            num_of(g, "max_turns"),
            num_of(g, "tokens_used"),
        );
        if let Some(b) = g.get("token_budget").and_then(Value::as_u64) {
            let _ = write!(out, " of {b}");
        }
        out.push('\n');
        if let Some(r) = g.get("reason").and_then(Value::as_str) {
            let _ = writeln!(out, "ended: {r}");
        }
        if let Some(s) = g.get("summary").and_then(Value::as_str) {
            let _ = writeln!(out, "summary: {s}");
        }
        return out;
    }
    let mut out = format!("goal {} set", str_of(v, "goal_id"));
    if let Some(t) = v.get("turn_id").and_then(Value::as_str) {
        let _ = write!(out, "; started turn {t}");
    }
    out.push('\n');
    out
}

/// The session table of `agentctl ls`: id, title, events, status, updated.
pub fn session_table(sessions: &[Value], now: OffsetDateTime) -> String {
    let headers = ["ID", "TITLE", "EVENTS", "STATUS", "UPDATED"];
    let rows: Vec<[String; 5]> = sessions
        .iter()
        .map(|s| {
            let title = s.get("title").and_then(Value::as_str).unwrap_or("-");
            // Subagents (docs/subagents.md) are marked, so they read as the parent's.
            let title = match s.get("relation").and_then(Value::as_str) {
                Some("subagent") => format!("[subagent] {}", one_line(title, 29)),
                _ => one_line(title, 40),
            };
            [
                str_of(s, "session_id").to_string(),
                title,
                num_of(s, "event_count"),
                str_of(s, "status").to_string(),
                relative_time(str_of(s, "updated_at"), now),
            ]
        })
        .collect();
    let mut widths = headers.map(|h| h.chars().count());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 5]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 4 {
                l.push_str(cell);
            } else if i == 2 {
                // Numbers align right.
                let _ = write!(l, "{cell:>w$}  ");
            } else {
                let pad = w - cell.chars().count();
                l.push_str(cell);
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4]]);
    }
    out
}

/// `MM-DD HH:MM:SS` from an RFC 3339 timestamp (UTC, as stored), else the raw value.
fn short_ts(ts: &str) -> String {
    match (ts.get(5..10), ts.get(11..19)) {
        (Some(d), Some(t)) => format!("{d} {t}"),
        _ => format!("{ts:<14}"),
    }
}

/// A short human summary of an event's `data`, by type.
pub fn event_summary(kind: &str, data: &Value) -> String {
    let s = |k: &str| str_of(data, k);
    let text = |k: &str| format!("{:?}", one_line(s(k), 72));
    match kind {
        "session_started" => {
            let mut out = format!("workspace={}", s("workspace"));
            if let Some(t) = data.get("title").and_then(Value::as_str) {
                let _ = write!(out, " title={:?}", one_line(t, 40));
            }
            if let Some(m) = data.get("model").and_then(Value::as_str) {
                let _ = write!(out, " model={m}");
            }
            if let Some(f) = data.get("imported_from") {
                let _ = write!(out, " imported_from={}", str_of(f, "format"));
            }
            out
        }
        "user_message" | "assistant_message" => {
            let partial = data
                .pointer("/metadata/partial")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            format!(
                "{}{}",
                if partial { "(partial) " } else { "" },
                text("text")
            )
        }
        "text_delta" | "reasoning_delta" => {
            let t = data
                .get("text")
                .or_else(|| data.get("delta"))
                .and_then(Value::as_str)
                .unwrap_or("");
            format!("{:?}", one_line(t, 72))
        }
        "reasoning" => format!("model={}", s("model")),
        "tool_call" => {
            let args = data.get("args").map(Value::to_string).unwrap_or_default();
            format!("{} {} {}", s("call_id"), s("name"), one_line(&args, 60))
        }
        "tool_result" => {
            if data.get("ok").and_then(Value::as_bool).unwrap_or(false) {
                let out = s("output");
                format!("{} ok {}B {:?}", s("call_id"), out.len(), one_line(out, 48))
            } else {
                let err = data.get("error").cloned().unwrap_or(Value::Null);
                format!(
                    "{} error {}: {}",
                    s("call_id"),
                    str_of(&err, "kind"),
                    one_line(str_of(&err, "message"), 60)
                )
            }
        }
        "permission_decision" => format!("{} {}", s("call_id"), s("decision")),
        "provider_usage" => {
            let u = data.get("usage").cloned().unwrap_or(Value::Null);
            format!(
                "{}/{} in={} out={}",
                s("provider"),
                s("model"),
                num_of(&u, "input_tokens"),
                num_of(&u, "output_tokens")
            )
        }
        "turn_started" => {
            let mut out = s("turn_id").to_string();
            if let Some(m) = data.get("model").and_then(Value::as_str) {
                let _ = write!(out, " model={m}");
            }
            out
        }
        "turn_ended" => {
            let mut out = format!("{} {}", s("turn_id"), s("status"));
            if let Some(r) = data.get("reason").and_then(Value::as_str) {
                let _ = write!(out, " reason={r}");
            }
            if let Some(e) = data.get("error") {
                let _ = write!(out, " error={}", str_of(e, "kind"));
            }
            out
        }
        "turn_failed" => format!("{} {}", s("terminal_status"), s("error_kind")),
        "history_compaction" => {
            let r = data.get("range").cloned().unwrap_or(Value::Null);
            format!(
                "{} seq {}..{} ({} events)",
                s("strategy"),
                num_of(&r, "from_seq"),
                num_of(&r, "to_seq"),
                num_of(data, "source_event_count")
            )
        }
        "session_fork" | "branch_summary" => format!(
            "from {}@{}",
            s("parent_session_id"),
            num_of(data, "forked_to_seq")
        ),
        "memory_update" => s("kind").to_string(),
        "log_repaired" => format!(
            "{} torn bytes quarantined to {}",
            num_of(data, "torn_bytes"),
            s("quarantine_path")
        ),
        "session_info" => format!("title={:?}", one_line(s("title"), 60)),
        _ => one_line(&data.to_string(), 72),
    }
}

/// One line of `agentctl log`: `seq  time  type  summary`. Ephemeral events (no `seq`)
/// show `-`.
pub fn event_line(event: &Value) -> String {
    let seq = event
        .get("seq")
        .and_then(Value::as_u64)
        .map(|s| s.to_string())
        .unwrap_or_else(|| "-".into());
    let kind = str_of(event, "type");
    let data = event.get("data").cloned().unwrap_or(Value::Null);
    format!(
        "{seq:>5}  {}  {kind:<19}  {}",
        short_ts(str_of(event, "ts")),
        event_summary(kind, &data)
    )
    .trim_end()
    .to_string()
}

fn node_label(node: &Value) -> String {
    let mut out = str_of(node, "session_id").to_string();
    if let Some(seq) = node.get("forked_to_seq").and_then(Value::as_u64) {
        let _ = write!(out, " @{seq}");
    }
    if let Some(t) = node.get("title").and_then(Value::as_str) {
        if !t.is_empty() {
            let _ = write!(out, "  {:?}", one_line(t, 40));
        }
    }
    let count = node.get("event_count").and_then(Value::as_u64).unwrap_or(0);
    let _ = write!(out, "  ({count} event{}", if count == 1 { "" } else { "s" });
    if node
        .get("branch_summary")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        out.push_str(", branch summary");
    }
    if node.get("relation").and_then(Value::as_str) == Some("subagent") {
        out.push_str(", subagent");
    }
    out.push(')');
    out
}

fn draw_children(node: &Value, prefix: &str, out: &mut String) {
    let forks = node
        .get("forks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let truncated = node
        .get("truncated")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let n = forks.len() + usize::from(truncated);
    for (i, child) in forks.iter().enumerate() {
        let last = i + 1 == n;
        let (branch, cont) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        let _ = writeln!(out, "{prefix}{branch}{}", node_label(child));
        draw_children(child, &format!("{prefix}{cont}"), out);
    }
    if truncated {
        let _ = writeln!(
            out,
            "{prefix}└── … (deeper forks not shown; raise --max-depth)"
        );
    }
}

/// Draws one tree node and its forks with `├──`, `└──` and `│`.
pub fn draw_tree(node: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", node_label(node));
    draw_children(node, "", &mut out);
    out
}

/// The human output of `agentd/tree`: the daemon's own `drawing` if it sent one, else the
/// `tree` node or each of `roots[]` drawn here (roots separated by a blank line).
pub fn tree_result(result: &Value) -> String {
    if let Some(d) = result.get("drawing").and_then(Value::as_str) {
        let mut d = d.to_string();
        if !d.ends_with('\n') {
            d.push('\n');
        }
        return d;
    }
    if let Some(t) = result.get("tree").filter(|t| t.is_object()) {
        return draw_tree(t);
    }
    match result.get("roots").and_then(Value::as_array) {
        Some(roots) if !roots.is_empty() => {
            roots.iter().map(draw_tree).collect::<Vec<_>>().join("\n")
        }
        _ => "no sessions\n".to_string(),
    }
}

/// `agentctl diff`: the unified diff, then a per-file summary line each.
pub fn diff_result(v: &Value) -> String {
    let files = v.get("files").and_then(Value::as_array);
    let Some(files) = files.filter(|f| !f.is_empty()) else {
        return "no changes by the session in this range\n".into();
    };
    let mut out = v
        .get("diff")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    for f in files {
        let path = f.get("path").and_then(Value::as_str).unwrap_or("?");
        let status = f.get("status").and_then(Value::as_str).unwrap_or("?");
        let num = |k: &str| f.get(k).and_then(Value::as_u64).unwrap_or(0);
        let _ = writeln!(
            out,
            "{status:<9} +{:<5} -{:<5} {path}",
            num("additions"),
            num("deletions")
        );
    }
    if v.get("truncated").and_then(Value::as_bool) == Some(true) {
        out.push_str("(diff text cut; --json lists every file)\n");
    }
    if let Some(gaps) = v.get("failed_snapshots") {
        let _ = writeln!(
            out,
            "warning: snapshots failed at seqs {gaps}; changes there may be missing"
        );
    }
    out
}

/// `agentctl revert`: what was (or would be) restored.
pub fn revert_result(v: &Value) -> String {
    let files: Vec<&str> = v
        .get("files")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let to = v.get("to_seq").and_then(Value::as_u64).unwrap_or(0);
    let dry = v.get("dry_run").and_then(Value::as_bool) == Some(true);
    let mut out = String::new();
    if files.is_empty() {
        let _ = writeln!(out, "nothing to revert: the files already match seq {to}");
        return out;
    }
    let verb = if dry { "would restore" } else { "restored" };
    let _ = writeln!(out, "{verb} {} file(s) to seq {to}:", files.len());
    for f in &files {
        let _ = writeln!(out, "  {f}");
    }
    if v.get("incomplete").and_then(Value::as_bool) == Some(true) {
        out.push_str(
            "warning: some snapshots after that seq failed; their changes are not reverted\n",
        );
    }
    out
}

/// `agentctl hooks`: one line per hook (event, matcher, command, where it comes from),
/// then the project file and whether it is trusted.
pub fn hooks(v: &Value) -> String {
    let mut out = String::new();
    let list = v
        .get("hooks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if list.is_empty() {
        out.push_str("no hooks\n");
    }
    for h in &list {
        let s = |k: &str| h.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let matcher = h.get("matcher").and_then(Value::as_str).unwrap_or("*");
        let state = if h.get("runs") == Some(&Value::Bool(false)) {
            " (skipped: not trusted)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:<19} {:<16} {}  [{}, {}s]{state}\n",
            s("event"),
            matcher,
            s("command"),
            s("source"),
            h.get("timeout_s").and_then(Value::as_u64).unwrap_or(0)
        ));
    }
    if let Some(p) = v.get("project").filter(|p| p.is_object()) {
        let path = p.get("path").and_then(Value::as_str).unwrap_or("");
        if let Some(e) = p.get("error").and_then(Value::as_str) {
            out.push_str(&format!("{path}: not used: {e}\n"));
        } else if p.get("trusted") == Some(&Value::Bool(true)) {
            out.push_str(&format!("{path}: trusted\n"));
        } else {
            out.push_str(&format!(
                "{path}: NOT trusted; its hooks are skipped. Review it, then run `agentctl hooks trust`\n"
            ));
        }
    }
    out
}

/// `agentctl models`: one `provider:model  source` line per model, then how each
/// listed provider's models endpoint answered.
pub fn models(v: &Value) -> String {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = String::new();
    let rows = v.get("models").and_then(Value::as_array);
    for m in rows.into_iter().flatten() {
        let _ = writeln!(
            out,
            "{}:{}  ({})",
            s(m, "provider"),
            s(m, "model"),
            s(m, "source")
        );
    }
    for l in v
        .get("listings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let n = |k: &str| l.get(k).and_then(Value::as_u64).unwrap_or(0);
        match l.get("error").and_then(Value::as_str) {
            Some(e) => {
                let _ = writeln!(out, "# {}: not listed: {e}", s(l, "provider"));
            }
            None => {
                let _ = writeln!(
                    out,
                    "# {}: {} listed ({}s ago)",
                    s(l, "provider"),
                    n("count"),
                    n("age_s")
                );
            }
        }
    }
    out
}

/// `agentctl instructions`: each part the next turn sends besides the history, with
/// where it came from, then its text; skipped files and why; whether the session's
/// newest record already holds them.
pub fn instructions(v: &Value) -> String {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = String::new();
    let _ = writeln!(out, "workspace: {}", s(v, "workspace"));
    if let Some(b) = v.get("base_prompt") {
        let _ = writeln!(
            out,
            "\n== base prompt v{} (sha256 {})\n{}",
            b.get("version").and_then(Value::as_u64).unwrap_or(0),
            s(b, "sha256"),
            s(b, "text").trim_end()
        );
    }
    for f in v
        .get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let cut = if f.get("truncated").and_then(Value::as_bool) == Some(true) {
            ", cut"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "\n== {} ({}, {} bytes{cut}, sha256 {})\n{}",
            s(f, "path"),
            s(f, "scope"),
            f.get("bytes").and_then(Value::as_u64).unwrap_or(0),
            s(f, "sha256"),
            s(f, "text").trim_end()
        );
    }
    for f in v
        .get("skipped")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "\nskipped {}: {}", s(f, "path"), s(f, "reason"));
    }
    if let Some(r) = v.get("recorded") {
        let current = r.get("current").and_then(Value::as_bool) == Some(true);
        let _ = match r.get("seq").and_then(Value::as_u64) {
            Some(seq) if current => writeln!(out, "\nrecorded at seq {seq}: unchanged"),
            Some(seq) => writeln!(
                out,
                "\nrecorded at seq {seq}: changed since, the next turn records them again"
            ),
            None if current => writeln!(out, "\nnothing recorded, nothing to record"),
            None => writeln!(out, "\nnot recorded yet: the next turn records them"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-21 10:15:00 UTC);

    fn golden(name: &str, actual: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("missing golden {path:?}; run with UPDATE_GOLDEN=1"));
        assert_eq!(actual, want, "golden {name} differs");
    }

    #[test]
    fn relative_times() {
        let cases = [
            ("2026-11-21T10:15:00.000000Z", "just now"),
            ("2026-11-21T10:16:00.000000Z", "just now"),
            ("2026-11-21T10:14:18.000000Z", "42s ago"),
            ("2026-11-21T10:12:00.500000Z", "2m ago"),
            ("2026-11-21T10:12:00Z", "3m ago"),
            ("2026-11-21T05:00:00Z", "5h ago"),
            ("2026-11-19T10:15:00Z", "2d ago"),
            ("2026-10-01T10:15:00.000000Z", "2026-10-01"),
            ("garbage", "garbage"),
        ];
        for (ts, want) in cases {
            assert_eq!(relative_time(ts, NOW), want, "{ts}");
        }
    }

    #[test]
    fn one_line_clips_on_characters() {
        assert_eq!(one_line("a\nb\tc", 10), "a b c");
        assert_eq!(one_line("héllo wörld", 6), "héllo…");
        assert_eq!(one_line("abc", 3), "abc");
    }

    #[test]
    fn session_table_golden() {
        let sessions = vec![
            json!({"session_id":"20261121T101500-3fa2c1","workspace":"/w","title":"Fix the\nparser bug","created_at":"2026-11-21T10:00:00Z","updated_at":"2026-11-21T10:12:00Z","event_count":128,"status":"running"}),
            json!({"session_id":"imported-1","workspace":"/w","title":null,"created_at":"2026-11-01T10:00:00Z","updated_at":"2026-11-19T09:00:00Z","event_count":7,"status":"idle"}),
        ];
        golden("ls.txt", &session_table(&sessions, NOW));
    }

    #[test]
    fn event_lines_golden() {
        let events = [
            json!({"id":"a","session_id":"s","seq":0,"ts":"2026-11-21T10:15:02.123456Z","type":"session_started","data":{"workspace":"/home/u/proj","agentd_version":"0.1.0","log_format":1,"title":"demo"}}),
            json!({"id":"b","session_id":"s","seq":1,"ts":"2026-11-21T10:15:03.000000Z","type":"turn_started","data":{"turn_id":"t1","model":"m1"}}),
            json!({"id":"c","session_id":"s","seq":2,"ts":"2026-11-21T10:15:03.100000Z","type":"user_message","data":{"text":"Please read\nsrc/main.rs"}}),
            json!({"id":"d","session_id":"s","seq":3,"ts":"2026-11-21T10:15:04.000000Z","type":"tool_call","data":{"call_id":"call_1","name":"read_file","args":{"path":"src/main.rs"}}}),
            json!({"id":"e","session_id":"s","seq":4,"ts":"2026-11-21T10:15:04.500000Z","type":"tool_result","data":{"call_id":"call_1","ok":true,"output":"fn main() {}\n"}}),
            json!({"id":"f","session_id":"s","seq":5,"ts":"2026-11-21T10:15:05.000000Z","type":"tool_result","data":{"call_id":"call_2","ok":false,"error":{"kind":"orphan_tool_call","message":"closed on interrupt"}}}),
            json!({"id":"g","session_id":"s","seq":6,"ts":"2026-11-21T10:15:06.000000Z","type":"provider_usage","data":{"provider":"script","model":"m1","usage":{"input_tokens":120,"output_tokens":30}}}),
            json!({"id":"h","session_id":"s","seq":7,"ts":"2026-11-21T10:15:07.000000Z","type":"assistant_message","data":{"text":"Done.","metadata":{"partial":true}}}),
            json!({"id":"i","session_id":"s","seq":8,"ts":"2026-11-21T10:15:08.000000Z","type":"turn_ended","data":{"turn_id":"t1","status":"interrupted","reason":"interrupt"}}),
            json!({"id":"j","session_id":"s","seq":9,"ts":"2026-11-21T10:15:09.000000Z","type":"history_compaction","data":{"strategy":"deterministic_v1","range":{"from_seq":0,"to_seq":5},"source_event_count":6}}),
            json!({"id":"k","session_id":"s","seq":10,"ts":"2026-11-21T10:15:10.000000Z","type":"future_type","data":{"x":[1,2,3]}}),
            json!({"session_id":"s","type":"text_delta","data":{"text":"Hel"}}),
        ];
        let text: String = events.iter().map(|e| event_line(e) + "\n").collect();
        golden("log.txt", &text);
    }

    fn sample_tree() -> Value {
        json!({
            "session_id": "root", "title": "main line", "event_count": 40, "branch_summary": false,
            "forks": [
                {"session_id": "child-a", "title": "try A", "event_count": 12, "forked_to_seq": 5, "branch_summary": true,
                 "forks": [
                    {"session_id": "grand-a1", "event_count": 3, "forked_to_seq": 2, "branch_summary": false, "forks": [], "truncated": true}
                 ]},
                {"session_id": "child-b", "title": "", "event_count": 9, "forked_to_seq": 8, "branch_summary": false, "forks": [
                    {"session_id": "grand-b1", "title": "deep", "event_count": 10, "forked_to_seq": 9, "branch_summary": false, "forks": []}
                ]},
            ]
        })
    }

    #[test]
    fn tree_drawing_golden() {
        golden("tree.txt", &tree_result(&json!({"tree": sample_tree()})));
        let roots = json!({"roots": [sample_tree()["forks"][1].clone(), {"session_id":"solo","event_count":1,"forks":[]}]});
        golden("tree_roots.txt", &tree_result(&roots));
        assert_eq!(
            tree_result(&json!({"drawing": "x\n└── y", "tree": sample_tree()})),
            "x\n└── y\n"
        );
        assert_eq!(tree_result(&json!({"roots": []})), "no sessions\n");
    }
}
