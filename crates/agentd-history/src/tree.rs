//! The fork tree (docs/history-rules.md#tree), built from the lineage index only.
//!
//! The daemon keeps one [`LineageEntry`] per session (from each Log's first line plus
//! counters it maintains), so a tree over thousands of sessions never reads a Log. Each
//! call builds a parent → children map in O(n) over the index, then walks it depth-first.
//! Children are ordered by (`forked_to_seq`, `session_id`). A node at `max_depth` that has
//! forks shows none and says `truncated:true`; a session that is its own ancestor (a
//! damaged index) appears once more as a truncated leaf instead of looping.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// What the lineage index knows about one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineageEntry {
    pub session_id: String,
    pub workspace: String,
    pub title: Option<String>,
    pub event_count: u64,
    pub first_event_ts: String,
    pub last_event_ts: String,
    pub parent_session_id: Option<String>,
    pub fork_root_session_id: Option<String>,
    pub forked_to_seq: Option<u64>,
    /// The Log records a `branch_summary`.
    pub branch_summary: bool,
    /// `subagent` for a child session a `task` call created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relation: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub archived: bool,
    /// The session is in the trash; it stays in the lineage so its forks can name it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub deleted: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeNode {
    pub session_id: String,
    pub workspace: String,
    pub title: Option<String>,
    pub event_count: u64,
    pub first_event_ts: String,
    pub last_event_ts: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_to_seq: Option<u64>,
    pub branch_summary: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relation: Option<String>,
    pub forks: Vec<TreeNode>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub archived: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub deleted: bool,
}

type Children<'a> = HashMap<&'a str, Vec<&'a LineageEntry>>;

fn children_map(index: &HashMap<String, LineageEntry>) -> Children<'_> {
    let mut map: Children = HashMap::new();
    for e in index.values() {
        if let Some(p) = &e.parent_session_id {
            map.entry(p.as_str()).or_default().push(e);
        }
    }
    for v in map.values_mut() {
        v.sort_by(|a, b| (a.forked_to_seq, &a.session_id).cmp(&(b.forked_to_seq, &b.session_id)));
    }
    map
}

fn leaf(e: &LineageEntry) -> TreeNode {
    TreeNode {
        session_id: e.session_id.clone(),
        workspace: e.workspace.clone(),
        title: e.title.clone(),
        event_count: e.event_count,
        first_event_ts: e.first_event_ts.clone(),
        last_event_ts: e.last_event_ts.clone(),
        forked_to_seq: e.forked_to_seq,
        branch_summary: e.branch_summary,
        relation: e.relation.clone(),
        forks: Vec::new(),
        truncated: false,
        archived: e.archived,
        deleted: e.deleted,
    }
}

fn walk<'a>(
    e: &'a LineageEntry,
    children: &Children<'a>,
    depth: usize,
    max_depth: usize,
    on_path: &mut HashSet<&'a str>,
) -> TreeNode {
    let mut node = leaf(e);
    let kids = children
        .get(e.session_id.as_str())
        .map_or(&[][..], Vec::as_slice);
    if kids.is_empty() {
        return node;
    }
    if depth >= max_depth {
        node.truncated = true;
        return node;
    }
    on_path.insert(&e.session_id);
    for k in kids {
        if on_path.contains(k.session_id.as_str()) {
            let mut cyc = leaf(k);
            cyc.truncated = true;
            node.forks.push(cyc);
        } else {
            node.forks
                .push(walk(k, children, depth + 1, max_depth, on_path));
        }
    }
    on_path.remove(e.session_id.as_str());
    node
}

/// The tree under `root` (`None` if the index does not know it), at most `max_depth`
/// levels of forks below it.
pub fn build(
    root: &str,
    index: &HashMap<String, LineageEntry>,
    max_depth: usize,
) -> Option<TreeNode> {
    let e = index.get(root)?;
    let children = children_map(index);
    Some(walk(e, &children, 0, max_depth, &mut HashSet::new()))
}

/// Trees of every session in `workspace` whose parent is absent, unknown, or in another
/// workspace, ordered by (`first_event_ts`, `session_id`).
pub fn roots_for_workspace(
    workspace: &str,
    index: &HashMap<String, LineageEntry>,
    max_depth: usize,
) -> Vec<TreeNode> {
    let children = children_map(index);
    let mut roots: Vec<&LineageEntry> = index
        .values()
        .filter(|e| e.workspace == workspace)
        .filter(|e| match &e.parent_session_id {
            None => true,
            Some(p) => index.get(p).is_none_or(|pe| pe.workspace != workspace),
        })
        .collect();
    roots.sort_by(|a, b| {
        (&a.first_event_ts, &a.session_id).cmp(&(&b.first_event_ts, &b.session_id))
    });
    roots
        .into_iter()
        .map(|e| walk(e, &children, 0, max_depth, &mut HashSet::new()))
        .collect()
}

fn label(n: &TreeNode) -> String {
    let mut s = n.session_id.clone();
    if let Some(seq) = n.forked_to_seq {
        let _ = write!(s, " @{seq}");
    }
    if let Some(t) = &n.title {
        // JSON quoting keeps a title with newlines or quotes on one line.
        let _ = write!(s, " {}", serde_json::Value::String(t.clone()));
    }
    let _ = write!(
        s,
        " ({} event{})",
        n.event_count,
        if n.event_count == 1 { "" } else { "s" }
    );
    if n.branch_summary {
        s.push_str(" [branch summary]");
    }
    if n.relation.as_deref() == Some("subagent") {
        s.push_str(" [subagent]");
    }
    if n.archived {
        s.push_str(" [archived]");
    }
    if n.deleted {
        s.push_str(" [deleted]");
    }
    if n.truncated {
        s.push_str(" [truncated]");
    }
    s
}

fn draw_forks(n: &TreeNode, prefix: &str, out: &mut String) {
    for (i, child) in n.forks.iter().enumerate() {
        let last = i + 1 == n.forks.len();
        let _ = writeln!(
            out,
            "{prefix}{}{}",
            if last { "└── " } else { "├── " },
            label(child)
        );
        let deeper = format!("{prefix}{}", if last { "    " } else { "│   " });
        draw_forks(child, &deeper, out);
    }
}

/// An ASCII drawing: one line per session with id, `@seq` fork point, title, event count,
/// and `[branch summary]` / `[subagent]` / `[archived]` / `[deleted]` / `[truncated]` markers.
pub fn draw(node: &TreeNode) -> String {
    let mut out = label(node);
    out.push('\n');
    draw_forks(node, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::golden;

    fn entry(id: &str, parent: Option<&str>, seq: Option<u64>, ws: &str) -> LineageEntry {
        LineageEntry {
            session_id: id.into(),
            workspace: ws.into(),
            title: None,
            event_count: seq.map_or(10, |s| s + 2),
            first_event_ts: format!("2026-11-21T10:00:00.{:06}Z", id.len()),
            last_event_ts: "2026-11-21T11:00:00.000000Z".into(),
            parent_session_id: parent.map(Into::into),
            fork_root_session_id: parent.map(|_| "root".into()),
            forked_to_seq: seq,
            branch_summary: false,
            relation: None,
            archived: false,
            deleted: false,
        }
    }

    fn index(entries: Vec<LineageEntry>) -> HashMap<String, LineageEntry> {
        entries
            .into_iter()
            .map(|e| (e.session_id.clone(), e))
            .collect()
    }

    fn sample() -> HashMap<String, LineageEntry> {
        let mut root = entry("root", None, None, "/w");
        root.title = Some("refactor \"parser\"".into());
        let mut b = entry("b-late", Some("root"), Some(9), "/w");
        b.branch_summary = true;
        index(vec![
            root,
            b,
            entry("a-early", Some("root"), Some(3), "/w"),
            entry("c-same-seq", Some("root"), Some(3), "/w"),
            entry("a1", Some("a-early"), Some(1), "/w"),
            entry("a11", Some("a1"), Some(0), "/w"),
            entry("other", None, None, "/x"),
        ])
    }

    #[test]
    fn children_sorted_depth_limited_and_drawn() {
        let idx = sample();
        let t = build("root", &idx, 2).unwrap();
        let ids: Vec<_> = t.forks.iter().map(|n| n.session_id.as_str()).collect();
        assert_eq!(ids, ["a-early", "c-same-seq", "b-late"]);
        let a1 = &t.forks[0].forks[0];
        assert!(a1.truncated && a1.forks.is_empty());
        golden!("tree_draw.txt", draw(&t));
        let v = serde_json::to_value(&t).unwrap();
        assert!(v.get("forked_to_seq").is_none() && v.get("truncated").is_none());
        assert_eq!(v["forks"][0]["forks"][0]["truncated"], true);
        assert_eq!(v["forks"][2]["branch_summary"], true);
        assert!(build("nope", &idx, 4).is_none());
        let full = build("root", &idx, 4).unwrap();
        assert_eq!(full.forks[0].forks[0].forks[0].session_id, "a11");
    }

    #[test]
    fn cycles_do_not_loop() {
        let idx = index(vec![
            entry("x", Some("y"), Some(1), "/w"),
            entry("y", Some("x"), Some(2), "/w"),
        ]);
        let t = build("x", &idx, 10).unwrap();
        assert_eq!(t.forks[0].session_id, "y");
        assert_eq!(t.forks[0].forks[0].session_id, "x");
        assert!(t.forks[0].forks[0].truncated);
        assert!(t.forks[0].forks[0].forks.is_empty());
    }

    #[test]
    fn workspace_roots_include_orphaned_and_cross_workspace_forks() {
        let mut idx = sample();
        idx.insert("lost".into(), entry("lost", Some("deleted"), Some(4), "/w"));
        idx.insert("moved".into(), entry("moved", Some("other"), Some(1), "/w"));
        let roots = roots_for_workspace("/w", &idx, 4);
        let ids: Vec<_> = roots.iter().map(|n| n.session_id.as_str()).collect();
        assert_eq!(ids, ["lost", "root", "moved"]);
        assert_eq!(roots[1].forks.len(), 3);
        assert!(roots_for_workspace("/none", &idx, 4).is_empty());
    }

    #[test]
    fn ten_thousand_sessions_build_quickly() {
        let mut entries = vec![entry("r", None, None, "/w")];
        for i in 0..10_000u64 {
            let parent = if i < 100 {
                "r".to_string()
            } else {
                format!("s{}", i % 100)
            };
            entries.push(entry(&format!("s{i}"), Some(&parent), Some(i), "/w"));
        }
        let idx = index(entries);
        let t = build("r", &idx, 4).unwrap();
        let mut count = 0;
        let mut stack = vec![&t];
        while let Some(n) = stack.pop() {
            count += 1;
            stack.extend(n.forks.iter());
        }
        assert_eq!(count, 10_001);
    }
}
