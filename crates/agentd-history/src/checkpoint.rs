//! The deterministic session checkpoint (docs/history-rules.md#checkpoint): state, not narrative.
//!
//! `CheckpointState` is a pure incremental reducer over Log events. The session owner
//! keeps one per loaded session, feeds it every appended event (`apply`) and asks for a
//! `Checkpoint` (`snapshot`) when compacting or answering `agentd/checkpoint`. The
//! checkpoint is a projection: it can always be rebuilt from the Log, and the Log stays
//! authoritative.
//!
//! Where each part comes from, and why:
//! - `task`: the last `user_message` (whitespace collapsed, clipped to 160 chars;
//!   evidence = its event id). The user, not the model, says what the work is.
//! - `artifacts` and their hashes: only `tool_result.data.artifacts[{uri, kind, sha256}]`,
//!   which the host writes after running a tool. Model text never creates an artifact or
//!   a hash, so a model cannot vouch for a file it did not observe.
//! - `files_read` / `files_modified`: a `tool_call`'s `name` + `args.path`, counted once
//!   its `tool_result` with the same `call_id` reports `ok:true`. `read_file`, `list_dir`,
//!   `search` read (a missing path means the workspace root `.`); `write_file`,
//!   `edit_file` modify. Absolute paths under the session workspace (from
//!   `session_started`) are made workspace-relative.
//! - `plan` / `decisions` / `facts`: only `memory_update` events, which the
//!   `memory_apply` tool records after `history::memory::validate`. Their `data`:
//!   - plan: `{kind:"plan", steps?:[{id,text}], done?:{id:bool}, evidence}` — `steps`
//!     replaces the whole plan and `[]` clears it (done flags of ids no longer in the
//!     plan are dropped); `done` merges into the flags; ids that are not steps are ignored.
//!   - decision: `{kind:"decision", decision_id, topic?, decision, rationale,
//!     supersedes?, evidence}` — a decision with an existing id replaces it;
//!     `supersedes` removes the named decision.
//!   - fact: `{kind:"fact", key, value, depends_on:[{uri, sha256?}], evidence}` — a fact
//!     with an existing key replaces it. A dependency without `sha256` records the
//!     artifact's sha256 known at that point (none if unknown).
//!
//!   `evidence` is `{source: "event"|"call"|"artifact", ref}`. An update missing a
//!   required field is skipped (hand-appended events are not validated as strictly as
//!   `memory_apply`); the reducer never panics on Log input.
//! - Fact status is derived at `snapshot` time: VALID iff the fact has dependencies and
//!   every dependency's current hash (asked from the caller, which answers from the
//!   daemon's file-hash cache) is known and equals the recorded sha256; else SUSPECT.
//!
//! Bounds (docs/history-rules.md#checkpoint): ≤64 facts, ≤32 decisions, ≤32 plan steps, ≤16 recent
//! artifacts, every stored text ≤160 chars (159 + `…`). Beyond the contract, each files
//! list keeps ≤64 paths and a fact ≤8 dependencies, so an embedded checkpoint stays small.
//! Eviction is deterministic: the entry whose last setting event has the lowest seq goes
//! first, ties broken by key. A plan is replaced as a whole, so it has no age order: a
//! plan over the bound keeps its first 32 steps. The `artifacts` map of a snapshot holds
//! the recent artifacts plus every artifact a kept fact depends on.
//!
//! `history_compaction` events are not folded: a full fold has already seen the events
//! they summarize. To continue from an embedded checkpoint instead, start from
//! `CheckpointState::from_checkpoint` and apply the events after it. The checkpoint
//! carries no per-entry seq, so restored facts and files count as older than any later
//! event and tie by key among themselves; restored decisions keep their order. Nor does
//! it carry file tool calls still waiting for a result, which is fine because compaction
//! never cuts between a call and its result; the workspace is given by `set_workspace`.

use std::collections::{BTreeMap, BTreeSet};

use agentd_proto::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentd_base::text::clip_chars;

pub const SCHEMA_VERSION: u32 = 1;
pub const MAX_FACTS: usize = 64;
pub const MAX_DECISIONS: usize = 32;
pub const MAX_PLAN_STEPS: usize = 32;
pub const MAX_RECENT_ARTIFACTS: usize = 16;
pub const MAX_VALUE_CHARS: usize = 160;
pub const MAX_FILES: usize = 64;
pub const MAX_FACT_DEPENDENCIES: usize = 8;

/// The checkpoint of docs/history-rules.md#checkpoint. Maps are `BTreeMap` so serialization order is fixed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub schema_version: u32,
    /// Seq of the last event folded in (0 when none).
    pub seq: u64,
    pub task: Option<Task>,
    pub plan: Plan,
    /// Oldest first.
    pub decisions: Vec<Decision>,
    pub artifacts: BTreeMap<String, Artifact>,
    pub facts: BTreeMap<String, Fact>,
    /// Most recently observed first.
    pub recent_artifacts: Vec<String>,
    /// Sorted.
    pub files_read: Vec<String>,
    /// Sorted.
    pub files_modified: Vec<String>,
    /// The session's open goal (docs/goals.md): kept whole in every checkpoint, so no
    /// compaction drops the objective.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalRecord>,
}

/// An open goal as a checkpoint carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalRecord {
    pub goal_id: String,
    pub objective: String,
}

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint {
            schema_version: SCHEMA_VERSION,
            seq: 0,
            task: None,
            plan: Plan::default(),
            decisions: Vec::new(),
            artifacts: BTreeMap::new(),
            facts: BTreeMap::new(),
            recent_artifacts: Vec::new(),
            files_read: Vec::new(),
            files_modified: Vec::new(),
            goal: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub text: String,
    /// Id of the `user_message` event.
    pub evidence: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub steps: Vec<PlanStep>,
    pub done: BTreeMap<String, bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    pub id: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub decision_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    pub decision: String,
    pub rationale: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<String>,
    pub evidence: Evidence,
}

/// What a memory update points at to justify itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub source: EvidenceSource,
    #[serde(rename = "ref")]
    pub reference: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceSource {
    Event,
    Call,
    Artifact,
}

impl EvidenceSource {
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceSource::Event => "event",
            EvidenceSource::Call => "call",
            EvidenceSource::Artifact => "artifact",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    pub uri: String,
    pub kind: ArtifactKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub last_observed_seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    File,
    ToolOutput,
    Command,
}

impl ArtifactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::File => "file",
            ArtifactKind::ToolOutput => "tool_output",
            ArtifactKind::Command => "command",
        }
    }

    fn parse(s: &str) -> Option<ArtifactKind> {
        match s {
            "file" => Some(ArtifactKind::File),
            "tool_output" => Some(ArtifactKind::ToolOutput),
            "command" => Some(ArtifactKind::Command),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub value: String,
    pub evidence: Evidence,
    pub depends_on: Vec<Dependency>,
    pub status: FactStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub uri: String,
    /// The artifact hash the fact was stated against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum FactStatus {
    Valid,
    Suspect,
}

/// Collapses whitespace runs to one space, drops control characters and clips to `max`
/// chars, so every stored or rendered value is one bounded line (a newline in a value
/// could otherwise forge a section header in the rendered view).
pub fn one_line(s: &str, max: usize) -> String {
    // Most texts are already one line: printable ASCII words with single spaces between
    // them come out as they are (no word split, no char filter), up to a length where
    // the early stop below wins.
    let plain = s.len() <= 4096
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && !s.contains("  ")
        && s.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
    if plain {
        // ASCII: a byte is a char.
        if s.len() <= max {
            return s.to_string();
        }
        let mut out = String::with_capacity(max + 2);
        out.push_str(&s[..max.saturating_sub(1)]);
        out.push('…');
        return out;
    }
    let mut out = String::with_capacity(s.len().min(max * 4));
    // Chars in `out`; past `max` the rest cannot show, so the scan stops there (a user
    // message of megabytes costs what its first line does).
    let mut n = 0usize;
    'words: for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
            n += 1;
        }
        for c in word.chars().filter(|c| !c.is_control()) {
            if n > max {
                break 'words;
            }
            out.push(c);
            n += 1;
        }
    }
    clip_chars(&out, max)
}

fn clean(s: &str) -> String {
    one_line(s, MAX_VALUE_CHARS)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileOp {
    Read,
    Modify,
}

#[derive(Debug, Clone, PartialEq)]
struct StoredDecision {
    seq: u64,
    decision: Decision,
}

#[derive(Debug, Clone, PartialEq)]
struct StoredFact {
    seq: u64,
    value: String,
    evidence: Evidence,
    depends_on: Vec<Dependency>,
}

/// The incremental reducer. Feed it events in seq order; ask it for a `Checkpoint`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointState {
    seq: u64,
    workspace: Option<String>,
    task: Option<Task>,
    plan: Plan,
    /// Kept sorted by (seq, decision_id).
    decisions: Vec<StoredDecision>,
    /// Every artifact ever observed; the snapshot emits a bounded subset.
    artifacts: BTreeMap<String, Artifact>,
    facts: BTreeMap<String, StoredFact>,
    /// File tool calls waiting for their result: call_id → (op, path).
    pending: BTreeMap<String, (FileOp, String)>,
    /// path → seq of the result that last touched it.
    files_read: BTreeMap<String, u64>,
    files_modified: BTreeMap<String, u64>,
    /// The open goal (`goal_set` not yet followed by its `goal_ended`).
    goal: Option<GoalRecord>,
}

/// Folds `events` from an empty state.
pub fn reduce(events: &[Event]) -> CheckpointState {
    let mut state = CheckpointState::new();
    for ev in events {
        state.apply(ev);
    }
    state
}

impl CheckpointState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Continues from an embedded checkpoint (re-compaction folds the previous one in).
    pub fn from_checkpoint(cp: &Checkpoint) -> Self {
        let mut state = CheckpointState {
            seq: cp.seq,
            task: cp.task.clone(),
            plan: cp.plan.clone(),
            artifacts: cp.artifacts.clone(),
            goal: cp.goal.clone(),
            ..Self::default()
        };
        // The checkpoint keeps decisions oldest first; their index is an order key older
        // than any later event (index < count ≤ cp.seq + 1 ≤ any later seq).
        for (i, d) in cp.decisions.iter().enumerate() {
            state.decisions.push(StoredDecision {
                seq: i as u64,
                decision: d.clone(),
            });
        }
        state.decisions.sort_by(order);
        for (key, f) in &cp.facts {
            state.facts.insert(
                key.clone(),
                StoredFact {
                    seq: 0,
                    value: f.value.clone(),
                    evidence: f.evidence.clone(),
                    depends_on: f.depends_on.clone(),
                },
            );
        }
        state.files_read = cp.files_read.iter().map(|p| (p.clone(), 0)).collect();
        state.files_modified = cp.files_modified.iter().map(|p| (p.clone(), 0)).collect();
        state
    }

    /// Sets the session workspace used to make absolute tool paths relative. A fold learns
    /// it from `session_started`; a state continued from a checkpoint needs it from the
    /// caller, since the checkpoint does not carry it.
    pub fn set_workspace(&mut self, workspace: &str) {
        self.workspace = Some(workspace.trim_end_matches('/').to_string());
    }

    /// Seq of the last event folded in.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The latest observation of an artifact (for `memory::EvidenceLookup` and watchers).
    pub fn artifact(&self, uri: &str) -> Option<&Artifact> {
        self.artifacts.get(uri)
    }

    /// Uris whose current hash decides a fact's status: the files the daemon should
    /// watch and rehash for this session.
    pub fn fact_dependency_uris(&self) -> BTreeSet<String> {
        self.facts
            .values()
            .flat_map(|f| f.depends_on.iter().map(|d| d.uri.clone()))
            .collect()
    }

    pub fn apply(&mut self, ev: &Event) {
        self.seq = self.seq.max(ev.seq);
        match ev.event_type() {
            EventType::SessionStarted => {
                if let Some(ws) = ev.str_field("workspace") {
                    self.set_workspace(ws);
                }
            }
            EventType::UserMessage => {
                if let Some(text) = ev.str_field("text") {
                    self.task = Some(Task {
                        text: clean(text),
                        evidence: ev.id.clone(),
                    });
                }
            }
            EventType::ToolCall => self.on_tool_call(ev),
            EventType::ToolResult => self.on_tool_result(ev),
            EventType::MemoryUpdate => self.on_memory_update(ev),
            EventType::GoalSet => {
                if let (Some(id), Some(o)) = (ev.str_field("goal_id"), ev.str_field("objective")) {
                    self.goal = Some(GoalRecord {
                        goal_id: id.to_string(),
                        objective: o.to_string(),
                    });
                }
            }
            EventType::GoalEnded
                if self.goal.as_ref().map(|g| g.goal_id.as_str()) == ev.str_field("goal_id") =>
            {
                self.goal = None;
            }
            _ => {}
        }
    }

    /// The open goal as of the last applied event.
    pub fn goal(&self) -> Option<&GoalRecord> {
        self.goal.as_ref()
    }

    fn on_tool_call(&mut self, ev: &Event) {
        let (Some(call_id), Some(name)) = (ev.str_field("call_id"), ev.str_field("name")) else {
            return;
        };
        let op = match name {
            "read_file" | "list_dir" | "search" => FileOp::Read,
            "write_file" | "edit_file" => FileOp::Modify,
            _ => return,
        };
        let path = ev.data.get("args").and_then(|a| a.get("path"));
        let path = match (path.and_then(Value::as_str), name) {
            (Some(p), _) => p,
            // Listing and searching default to the workspace root.
            (None, "list_dir" | "search") => ".",
            (None, _) => return,
        };
        let path = self.relative(path);
        self.pending.insert(call_id.to_string(), (op, path));
    }

    fn relative(&self, path: &str) -> String {
        let mut p = path.trim();
        if let Some(ws) = &self.workspace {
            if p == ws {
                p = ".";
            } else if let Some(rest) = p
                .strip_prefix(ws.as_str())
                .and_then(|r| r.strip_prefix('/'))
            {
                p = rest;
            }
        }
        while let Some(rest) = p.strip_prefix("./") {
            p = rest;
        }
        if p.is_empty() {
            p = ".";
        }
        clean(p)
    }

    fn on_tool_result(&mut self, ev: &Event) {
        if let Some(artifacts) = ev.data.get("artifacts").and_then(Value::as_array) {
            for a in artifacts {
                let uri = a.get("uri").and_then(Value::as_str);
                let kind = a
                    .get("kind")
                    .and_then(Value::as_str)
                    .and_then(ArtifactKind::parse);
                let (Some(uri), Some(kind)) = (uri, kind) else {
                    continue;
                };
                if uri.is_empty() {
                    continue;
                }
                let sha256 = a.get("sha256").and_then(Value::as_str).map(str::to_string);
                self.artifacts.insert(
                    uri.to_string(),
                    Artifact {
                        uri: uri.to_string(),
                        kind,
                        sha256,
                        last_observed_seq: ev.seq,
                    },
                );
            }
        }
        let Some(call_id) = ev.str_field("call_id") else {
            return;
        };
        let Some((op, path)) = self.pending.remove(call_id) else {
            return;
        };
        if ev.data.get("ok").and_then(Value::as_bool) != Some(true) {
            return;
        }
        let files = match op {
            FileOp::Read => &mut self.files_read,
            FileOp::Modify => &mut self.files_modified,
        };
        files.insert(path, ev.seq);
        evict_oldest(files, MAX_FILES, |seq| *seq);
    }

    fn on_memory_update(&mut self, ev: &Event) {
        let d = &ev.data;
        let Some(evidence) = d
            .get("evidence")
            .and_then(|e| serde_json::from_value::<Evidence>(e.clone()).ok())
        else {
            return;
        };
        let evidence = Evidence {
            source: evidence.source,
            reference: clean(&evidence.reference),
        };
        match ev.str_field("kind") {
            Some("plan") => self.on_plan(d),
            Some("decision") => self.on_decision(ev.seq, d, evidence),
            Some("fact") => self.on_fact(ev.seq, d, evidence),
            _ => {}
        }
    }

    fn on_plan(&mut self, d: &Value) {
        if let Some(steps) = d.get("steps").and_then(Value::as_array) {
            let mut seen = BTreeSet::new();
            let mut new_steps = Vec::new();
            for s in steps {
                let (Some(id), Some(text)) = (str_at(s, "id"), str_at(s, "text")) else {
                    continue;
                };
                let id = clean(id);
                if id.is_empty() || !seen.insert(id.clone()) {
                    continue;
                }
                new_steps.push(PlanStep {
                    id,
                    text: clean(text),
                });
                if new_steps.len() == MAX_PLAN_STEPS {
                    break;
                }
            }
            self.plan.steps = new_steps;
        }
        if let Some(done) = d.get("done").and_then(Value::as_object) {
            for (id, flag) in done {
                if let Some(flag) = flag.as_bool() {
                    self.plan.done.insert(clean(id), flag);
                }
            }
        }
        let ids: BTreeSet<&str> = self.plan.steps.iter().map(|s| s.id.as_str()).collect();
        self.plan.done.retain(|id, _| ids.contains(id.as_str()));
    }

    fn on_decision(&mut self, seq: u64, d: &Value, evidence: Evidence) {
        let (Some(id), Some(decision), Some(rationale)) = (
            str_at(d, "decision_id"),
            str_at(d, "decision"),
            str_at(d, "rationale"),
        ) else {
            return;
        };
        let id = clean(id);
        if id.is_empty() {
            return;
        }
        let supersedes = str_at(d, "supersedes").map(clean);
        self.decisions.retain(|s| {
            s.decision.decision_id != id && Some(&s.decision.decision_id) != supersedes.as_ref()
        });
        self.decisions.push(StoredDecision {
            seq,
            decision: Decision {
                decision_id: id,
                topic: str_at(d, "topic").map(clean),
                decision: clean(decision),
                rationale: clean(rationale),
                supersedes,
                evidence,
            },
        });
        self.decisions.sort_by(order);
        while self.decisions.len() > MAX_DECISIONS {
            self.decisions.remove(0);
        }
    }

    fn on_fact(&mut self, seq: u64, d: &Value, evidence: Evidence) {
        let (Some(key), Some(value)) = (str_at(d, "key"), str_at(d, "value")) else {
            return;
        };
        let key = clean(key);
        if key.is_empty() {
            return;
        }
        let mut depends_on = Vec::new();
        for dep in d
            .get("depends_on")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let Some(uri) = str_at(dep, "uri") else {
                continue;
            };
            let sha256 = str_at(dep, "sha256")
                .map(str::to_string)
                .or_else(|| self.artifacts.get(uri).and_then(|a| a.sha256.clone()));
            depends_on.push(Dependency {
                uri: uri.to_string(),
                sha256,
            });
            if depends_on.len() == MAX_FACT_DEPENDENCIES {
                break;
            }
        }
        self.facts.insert(
            key,
            StoredFact {
                seq,
                value: clean(value),
                evidence,
                depends_on,
            },
        );
        evict_oldest(&mut self.facts, MAX_FACTS, |f| f.seq);
    }

    /// The checkpoint as of the last applied event. `hashes(uri)` answers an artifact's
    /// current sha256 (None when unknown); it decides each fact's status.
    pub fn snapshot(&self, hashes: &dyn Fn(&str) -> Option<String>) -> Checkpoint {
        let mut facts = BTreeMap::new();
        for (key, f) in &self.facts {
            let valid = !f.depends_on.is_empty()
                && f.depends_on
                    .iter()
                    .all(|dep| match (&dep.sha256, hashes(&dep.uri)) {
                        (Some(recorded), Some(current)) => *recorded == current,
                        _ => false,
                    });
            facts.insert(
                key.clone(),
                Fact {
                    value: f.value.clone(),
                    evidence: f.evidence.clone(),
                    depends_on: f.depends_on.clone(),
                    status: if valid {
                        FactStatus::Valid
                    } else {
                        FactStatus::Suspect
                    },
                },
            );
        }

        let mut by_recency: Vec<&Artifact> = self.artifacts.values().collect();
        by_recency.sort_by(|a, b| {
            b.last_observed_seq
                .cmp(&a.last_observed_seq)
                .then_with(|| a.uri.cmp(&b.uri))
        });
        let recent_artifacts: Vec<String> = by_recency
            .iter()
            .take(MAX_RECENT_ARTIFACTS)
            .map(|a| a.uri.clone())
            .collect();
        let mut artifacts = BTreeMap::new();
        let kept = recent_artifacts
            .iter()
            .cloned()
            .chain(self.fact_dependency_uris());
        for uri in kept {
            if let Some(a) = self.artifacts.get(&uri) {
                artifacts.insert(uri, a.clone());
            }
        }

        Checkpoint {
            schema_version: SCHEMA_VERSION,
            seq: self.seq,
            task: self.task.clone(),
            plan: self.plan.clone(),
            decisions: self.decisions.iter().map(|s| s.decision.clone()).collect(),
            artifacts,
            facts,
            recent_artifacts,
            files_read: self.files_read.keys().cloned().collect(),
            files_modified: self.files_modified.keys().cloned().collect(),
            goal: self.goal.clone(),
        }
    }
}

fn order(a: &StoredDecision, b: &StoredDecision) -> std::cmp::Ordering {
    a.seq
        .cmp(&b.seq)
        .then_with(|| a.decision.decision_id.cmp(&b.decision.decision_id))
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Removes the entries with the lowest (seq, key) until at most `max` remain.
fn evict_oldest<V>(map: &mut BTreeMap<String, V>, max: usize, seq: impl Fn(&V) -> u64) {
    while map.len() > max {
        // BTreeMap iterates keys in order, so min_by_key's first minimum is the lowest key.
        let oldest = map
            .iter()
            .min_by_key(|(_, v)| seq(v))
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => map.remove(&k),
            None => break,
        };
    }
}

/// Event builder shared by the history tests: ids are derived from seq so goldens are stable.
#[cfg(test)]
pub(crate) fn test_event(seq: u64, kind: &str, data: Value) -> Event {
    Event {
        id: format!("{:016x}", 0xe000 + seq),
        session_id: "20261121T101500-3fa2c1".into(),
        seq,
        ts: format!("2026-11-21T10:15:{:02}.000000Z", seq % 60),
        kind: kind.into(),
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    fn ev(seq: u64, kind: &str, data: Value) -> Event {
        test_event(seq, kind, data)
    }

    fn observe(seq: u64, call_id: &str, uri: &str, sha: &str) -> Event {
        ev(
            seq,
            "tool_result",
            json!({"call_id": call_id, "ok": true, "output": "…",
                   "artifacts": [{"uri": uri, "kind": "file", "sha256": sha}]}),
        )
    }

    fn fact(seq: u64, key: &str, value: &str, uri: &str) -> Event {
        ev(
            seq,
            "memory_update",
            json!({"kind": "fact", "key": key, "value": value,
                   "depends_on": [{"uri": uri}],
                   "evidence": {"source": "artifact", "ref": uri}}),
        )
    }

    fn decision(seq: u64, id: &str, supersedes: Option<&str>) -> Event {
        let mut data = json!({"kind": "decision", "decision_id": id, "decision": format!("do {id}"),
                              "rationale": "because", "evidence": {"source": "event", "ref": "e1"}});
        if let Some(s) = supersedes {
            data["supersedes"] = json!(s);
        }
        ev(seq, "memory_update", data)
    }

    fn hashes_from(map: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = map
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |uri: &str| map.get(uri).cloned()
    }

    fn no_hashes(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn empty_state_serializes_to_the_contract_shape() {
        let cp = CheckpointState::new().snapshot(&no_hashes);
        assert_eq!(
            serde_json::to_value(&cp).unwrap(),
            json!({"schema_version": 1, "seq": 0, "task": null,
                   "plan": {"steps": [], "done": {}}, "decisions": [], "artifacts": {},
                   "facts": {}, "recent_artifacts": [], "files_read": [], "files_modified": []})
        );
        assert_eq!(cp, Checkpoint::default());
    }

    #[test]
    fn one_line_stops_early_and_gives_what_the_whole_scan_gives() {
        fn whole(s: &str, max: usize) -> String {
            let mut out = String::new();
            for word in s.split_whitespace() {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.extend(word.chars().filter(|c| !c.is_control()));
            }
            clip_chars(&out, max)
        }
        let long = "wörd ".repeat(10_000);
        let plain = "plain words, one space apart; 0-9 and ~!".repeat(20);
        for s in [
            plain.as_str(),
            &plain[..100],
            " leading",
            "trailing ",
            "two  spaces",
            "a\ttab",
            "del\u{7f}",
            "",
            "a",
            "  a \n\t b  ",
            "ab\u{7}cd efg",
            "\u{7} \u{7} x",
            "12345",
            "123456",
            "1234 6",
            "héllo wörld ünïcode ✓✓✓",
            long.as_str(),
        ] {
            for max in [0, 1, 2, 4, 5, 6, 10, 200] {
                assert_eq!(one_line(s, max), whole(s, max), "{s:?} {max}");
            }
        }
    }

    #[test]
    fn task_is_the_last_user_message_clipped_to_one_line() {
        let long = format!("second\n\ntask {}", "x".repeat(300));
        let st = reduce(&[
            ev(0, "user_message", json!({"text": "first task"})),
            ev(1, "assistant_message", json!({"text": "ok"})),
            ev(2, "user_message", json!({"text": long})),
        ]);
        let task = st.snapshot(&no_hashes).task.unwrap();
        assert_eq!(task.evidence, format!("{:016x}", 0xe002));
        assert!(task.text.starts_with("second task xxx"), "{}", task.text);
        assert_eq!(task.text.chars().count(), MAX_VALUE_CHARS);
        assert!(task.text.ends_with('…'));
    }

    #[test]
    fn artifacts_come_only_from_tool_results() {
        let st = reduce(&[
            ev(
                0,
                "assistant_message",
                json!({"text": "I read src/lib.rs, sha256 of it is 1111 and I wrote notes.md"}),
            ),
            ev(
                1,
                "tool_call",
                json!({"call_id": "c1", "name": "shell",
                                      "args": {"command": "cat src/lib.rs"}}),
            ),
        ]);
        let cp = st.snapshot(&no_hashes);
        assert!(cp.artifacts.is_empty() && cp.recent_artifacts.is_empty());
        assert!(cp.files_read.is_empty() && cp.files_modified.is_empty());

        let mut st = st;
        st.apply(&observe(2, "c1", "src/lib.rs", H1));
        let cp = st.snapshot(&no_hashes);
        assert_eq!(
            cp.artifacts["src/lib.rs"],
            Artifact {
                uri: "src/lib.rs".into(),
                kind: ArtifactKind::File,
                sha256: Some(H1.into()),
                last_observed_seq: 2
            }
        );
        assert_eq!(cp.recent_artifacts, vec!["src/lib.rs"]);
    }

    #[test]
    fn artifacts_with_unknown_kind_or_no_uri_are_skipped() {
        let st = reduce(&[ev(
            0,
            "tool_result",
            json!({"call_id": "c", "ok": true,
            "artifacts": [{"uri": "a", "kind": "weird"}, {"kind": "file"}, {"uri": "b", "kind": "command"}]}),
        )]);
        let cp = st.snapshot(&no_hashes);
        assert_eq!(cp.artifacts.keys().collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(cp.artifacts["b"].sha256, None);
    }

    #[test]
    fn files_come_from_successful_file_tool_calls() {
        let ws = "/home/u/proj";
        let st = reduce(&[
            ev(
                0,
                "session_started",
                json!({"workspace": ws, "agentd_version": "0", "log_format": 1}),
            ),
            ev(
                1,
                "tool_call",
                json!({"call_id": "r1", "name": "read_file", "args": {"path": "./src/a.rs"}}),
            ),
            ev(
                2,
                "tool_call",
                json!({"call_id": "r2", "name": "search", "args": {"pattern": "fn"}}),
            ),
            ev(
                3,
                "tool_call",
                json!({"call_id": "w1", "name": "write_file",
                                      "args": {"path": "/home/u/proj/out.txt", "content": "x"}}),
            ),
            ev(
                4,
                "tool_call",
                json!({"call_id": "w2", "name": "edit_file", "args": {"path": "b.rs"}}),
            ),
            ev(
                5,
                "tool_call",
                json!({"call_id": "s1", "name": "shell", "args": {"path": "c.rs"}}),
            ),
            ev(6, "tool_result", json!({"call_id": "r1", "ok": true})),
            ev(7, "tool_result", json!({"call_id": "r2", "ok": true})),
            ev(8, "tool_result", json!({"call_id": "w1", "ok": true})),
            // A failed edit modified nothing.
            ev(
                9,
                "tool_result",
                json!({"call_id": "w2", "ok": false,
                                        "error": {"kind": "not_found", "message": "m"}}),
            ),
            ev(10, "tool_result", json!({"call_id": "s1", "ok": true})),
            // A result without its call counts for nothing.
            ev(11, "tool_result", json!({"call_id": "zz", "ok": true})),
            ev(
                12,
                "assistant_message",
                json!({"text": "I also edited d.rs"}),
            ),
        ]);
        let cp = st.snapshot(&no_hashes);
        assert_eq!(cp.files_read, vec![".", "src/a.rs"]);
        assert_eq!(cp.files_modified, vec!["out.txt"]);
    }

    #[test]
    fn fact_is_valid_only_while_its_dependency_hash_matches() {
        let st = reduce(&[
            observe(0, "c1", "src/lib.rs", H1),
            fact(1, "port", "config uses port 8080", "src/lib.rs"),
        ]);
        let f = &st.snapshot(&hashes_from(&[("src/lib.rs", H1)])).facts["port"];
        assert_eq!(f.status, FactStatus::Valid);
        assert_eq!(
            f.depends_on,
            vec![Dependency {
                uri: "src/lib.rs".into(),
                sha256: Some(H1.into())
            }]
        );
        // The file changed on disk since.
        let cp = st.snapshot(&hashes_from(&[("src/lib.rs", H2)]));
        assert_eq!(cp.facts["port"].status, FactStatus::Suspect);
        // The daemon cannot tell the current hash.
        assert_eq!(
            st.snapshot(&no_hashes).facts["port"].status,
            FactStatus::Suspect
        );
    }

    #[test]
    fn fact_stated_before_any_observation_is_suspect() {
        let st = reduce(&[fact(0, "k", "v", "never/seen.rs")]);
        let cp = st.snapshot(&hashes_from(&[("never/seen.rs", H1)]));
        assert_eq!(cp.facts["k"].depends_on[0].sha256, None);
        assert_eq!(cp.facts["k"].status, FactStatus::Suspect);
    }

    #[test]
    fn fact_records_the_hash_known_when_it_was_stated() {
        let st = reduce(&[
            observe(0, "c1", "a.rs", H1),
            fact(1, "k", "v", "a.rs"),
            // A later observation does not rewrite what the fact was stated against.
            observe(2, "c2", "a.rs", H2),
        ]);
        let cp = st.snapshot(&hashes_from(&[("a.rs", H2)]));
        assert_eq!(cp.facts["k"].depends_on[0].sha256.as_deref(), Some(H1));
        assert_eq!(cp.facts["k"].status, FactStatus::Suspect);
        assert_eq!(cp.artifacts["a.rs"].sha256.as_deref(), Some(H2));
    }

    #[test]
    fn fact_with_an_explicit_hash_keeps_it_and_needs_every_dependency() {
        let st = reduce(&[ev(
            0,
            "memory_update",
            json!({"kind": "fact", "key": "k", "value": "v",
            "depends_on": [{"uri": "a", "sha256": H1}, {"uri": "b", "sha256": H2}],
            "evidence": {"source": "call", "ref": "c1"}}),
        )]);
        let both = st.snapshot(&hashes_from(&[("a", H1), ("b", H2)]));
        assert_eq!(both.facts["k"].status, FactStatus::Valid);
        let one = st.snapshot(&hashes_from(&[("a", H1)]));
        assert_eq!(one.facts["k"].status, FactStatus::Suspect);
        // Facts keep the artifacts they depend on even when not observed by a tool.
        assert!(both.artifacts.is_empty());
    }

    #[test]
    fn fact_without_dependencies_is_suspect() {
        let st = reduce(&[ev(
            0,
            "memory_update",
            json!({"kind": "fact", "key": "k", "value": "v",
            "evidence": {"source": "event", "ref": "e"}}),
        )]);
        assert_eq!(
            st.snapshot(&|_: &str| Some(H1.to_string())).facts["k"].status,
            FactStatus::Suspect
        );
    }

    #[test]
    fn facts_evict_oldest_first_ties_by_key() {
        let mut events = vec![observe(0, "c", "a.rs", H1)];
        // Two facts share seq 1 through a hand-built pair; the rest get their own seqs.
        for i in 0..MAX_FACTS {
            events.push(fact(2 + i as u64, &format!("f{i:03}"), "v", "a.rs"));
        }
        let mut st = reduce(&events);
        // Refreshing f000 makes f001 the oldest.
        st.apply(&fact(100, "f000", "v2", "a.rs"));
        st.apply(&fact(101, "new", "v", "a.rs"));
        let cp = st.snapshot(&no_hashes);
        assert_eq!(cp.facts.len(), MAX_FACTS);
        assert!(!cp.facts.contains_key("f001"));
        assert_eq!(cp.facts["f000"].value, "v2");
        assert!(cp.facts.contains_key("new") && cp.facts.contains_key("f002"));

        // Same seq: the lower key goes first.
        let mut st = CheckpointState::new();
        for i in 0..MAX_FACTS + 2 {
            let mut e = fact(7, &format!("k{:03}", MAX_FACTS + 2 - i), "v", "a.rs");
            e.id = format!("{i}");
            st.apply(&e);
        }
        let cp = st.snapshot(&no_hashes);
        assert_eq!(cp.facts.len(), MAX_FACTS);
        assert!(!cp.facts.contains_key("k001") && !cp.facts.contains_key("k002"));
        assert!(cp.facts.contains_key("k003"));
    }

    #[test]
    fn decisions_evict_oldest_first_and_keep_chronological_order() {
        let mut st = CheckpointState::new();
        for i in 0..MAX_DECISIONS + 3 {
            st.apply(&decision(i as u64, &format!("d{i:02}"), None));
        }
        let cp = st.snapshot(&no_hashes);
        assert_eq!(cp.decisions.len(), MAX_DECISIONS);
        assert_eq!(cp.decisions[0].decision_id, "d03");
        assert_eq!(cp.decisions[MAX_DECISIONS - 1].decision_id, "d34");
    }

    #[test]
    fn supersedes_removes_the_superseded_decision() {
        let st = reduce(&[
            decision(0, "storage", None),
            decision(1, "format", None),
            decision(2, "storage-v2", Some("storage")),
        ]);
        let cp = st.snapshot(&no_hashes);
        let ids: Vec<_> = cp
            .decisions
            .iter()
            .map(|d| d.decision_id.as_str())
            .collect();
        assert_eq!(ids, vec!["format", "storage-v2"]);
        assert_eq!(cp.decisions[1].supersedes.as_deref(), Some("storage"));
        // Restating an id replaces it and makes it the newest.
        let mut st = st;
        st.apply(&decision(3, "format", None));
        let ids: Vec<_> = st
            .snapshot(&no_hashes)
            .decisions
            .into_iter()
            .map(|d| d.decision_id)
            .collect();
        assert_eq!(ids, vec!["storage-v2", "format"]);
    }

    #[test]
    fn plan_replaces_steps_merges_done_and_is_bounded() {
        let ev_ = |seq, data: Value| {
            let mut data = data;
            data["kind"] = json!("plan");
            data["evidence"] = json!({"source": "event", "ref": "e"});
            ev(seq, "memory_update", data)
        };
        let mut st = reduce(&[
            ev_(
                0,
                json!({"steps": [{"id": "a", "text": "read"}, {"id": "b", "text": "fix"},
                                    {"id": "a", "text": "dup"}]}),
            ),
            ev_(1, json!({"done": {"a": true, "zzz": true}})),
        ]);
        let plan = st.snapshot(&no_hashes).plan;
        assert_eq!(plan.steps.len(), 2);
        assert_eq!(plan.steps[0].text, "read");
        assert_eq!(plan.done, BTreeMap::from([("a".to_string(), true)]));

        st.apply(&ev_(
            2,
            json!({"steps": [{"id": "b", "text": "fix"}, {"id": "c", "text": "test"}],
                                "done": {"b": true}}),
        ));
        let plan = st.snapshot(&no_hashes).plan;
        assert_eq!(plan.done, BTreeMap::from([("b".to_string(), true)]));

        let steps: Vec<Value> = (0..40)
            .map(|i| json!({"id": format!("s{i}"), "text": "t"}))
            .collect();
        st.apply(&ev_(3, json!({"steps": steps})));
        let plan = st.snapshot(&no_hashes).plan;
        assert_eq!(plan.steps.len(), MAX_PLAN_STEPS);
        assert_eq!(plan.steps[31].id, "s31");

        // An empty plan clears steps and flags (a new task).
        st.apply(&ev_(4, json!({"steps": [], "done": {"s0": true}})));
        assert_eq!(st.snapshot(&no_hashes).plan, Plan::default());
    }

    #[test]
    fn recent_artifacts_are_bounded_newest_first() {
        let mut st = CheckpointState::new();
        for i in 0..20u64 {
            st.apply(&observe(i, "c", &format!("f{i:02}"), H1));
        }
        // Two observed in the same event: ties by uri.
        st.apply(&ev(20, "tool_result", json!({"call_id": "c", "ok": true, "artifacts": [
            {"uri": "zz", "kind": "tool_output", "sha256": H2}, {"uri": "f00", "kind": "file", "sha256": H2}]})));
        let cp = st.snapshot(&no_hashes);
        assert_eq!(cp.recent_artifacts.len(), MAX_RECENT_ARTIFACTS);
        assert_eq!(&cp.recent_artifacts[..3], &["f00", "zz", "f19"]);
        assert_eq!(cp.recent_artifacts[15], "f06");
        assert_eq!(cp.artifacts.len(), MAX_RECENT_ARTIFACTS);
    }

    #[test]
    fn old_artifacts_stay_while_a_fact_depends_on_them() {
        let mut st = reduce(&[observe(0, "c", "old.rs", H1), fact(1, "k", "v", "old.rs")]);
        for i in 0..20u64 {
            st.apply(&observe(2 + i, "c", &format!("f{i:02}"), H1));
        }
        let cp = st.snapshot(&no_hashes);
        assert!(!cp.recent_artifacts.contains(&"old.rs".to_string()));
        assert_eq!(cp.artifacts["old.rs"].last_observed_seq, 0);
        assert_eq!(
            st.fact_dependency_uris(),
            BTreeSet::from(["old.rs".to_string()])
        );
    }

    #[test]
    fn values_are_clipped_to_160_chars() {
        let long = "é".repeat(400);
        let st = reduce(&[
            observe(0, "c", "a", H1),
            fact(1, "k", &long, "a"),
            ev(
                2,
                "memory_update",
                json!({"kind": "decision", "decision_id": "d", "decision": long,
                "rationale": long, "topic": long, "evidence": {"source": "event", "ref": "e"}}),
            ),
        ]);
        let cp = st.snapshot(&no_hashes);
        let expect = format!("{}…", "é".repeat(159));
        assert_eq!(cp.facts["k"].value, expect);
        assert_eq!(cp.decisions[0].decision, expect);
        assert_eq!(cp.decisions[0].rationale, expect);
        assert_eq!(cp.decisions[0].topic.as_deref(), Some(expect.as_str()));
    }

    #[test]
    fn malformed_memory_updates_are_skipped() {
        let st = reduce(&[
            ev(
                0,
                "memory_update",
                json!({"kind": "fact", "key": "k", "value": "v"}),
            ),
            ev(
                1,
                "memory_update",
                json!({"kind": "decision", "decision_id": "d",
                                          "evidence": {"source": "event", "ref": "e"}}),
            ),
            ev(
                2,
                "memory_update",
                json!({"kind": "fact", "key": 3, "value": "v",
                                          "evidence": {"source": "bogus", "ref": "e"}}),
            ),
            ev(3, "memory_update", json!("not an object")),
            ev(4, "user_message", json!({"text": 5})),
        ]);
        let cp = st.snapshot(&no_hashes);
        assert!(cp.facts.is_empty() && cp.decisions.is_empty() && cp.task.is_none());
        assert_eq!(cp.seq, 4);
    }

    #[test]
    fn continuing_from_a_checkpoint_matches_a_full_fold() {
        let events = vec![
            ev(
                0,
                "session_started",
                json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
            ),
            ev(1, "user_message", json!({"text": "fix the parser"})),
            ev(
                2,
                "tool_call",
                json!({"call_id": "c1", "name": "read_file", "args": {"path": "/w/p.rs"}}),
            ),
            observe(3, "c1", "p.rs", H1),
            fact(4, "parser", "parser is recursive descent", "p.rs"),
            decision(5, "d1", None),
            decision(6, "d2", None),
            ev(
                7,
                "tool_call",
                json!({"call_id": "c2", "name": "edit_file", "args": {"path": "p.rs"}}),
            ),
            observe(8, "c2", "p.rs", H2),
            decision(9, "d3", Some("d1")),
            fact(10, "tests", "tests pass on main", "p.rs"),
        ];
        let h = hashes_from(&[("p.rs", H2)]);
        let full = reduce(&events).snapshot(&h);
        // Compaction never cuts between a tool_call and its result (docs/history-rules.md#compaction), and the
        // checkpoint does not carry pending calls, so cuts 3 and 8 are not continuations.
        for cut in (0..events.len()).filter(|c| ![3, 8].contains(c)) {
            let mut st = CheckpointState::from_checkpoint(&reduce(&events[..cut]).snapshot(&h));
            st.set_workspace("/w/");
            for e in &events[cut..] {
                st.apply(e);
            }
            assert_eq!(st.snapshot(&h), full, "cut at {cut}");
        }
        // And the serialized form round-trips.
        let text = serde_json::to_string(&full).unwrap();
        assert_eq!(serde_json::from_str::<Checkpoint>(&text).unwrap(), full);
    }
}
