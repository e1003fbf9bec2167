// Seeing and undoing what a session changed in the workspace: `agentd/diff` for the last
// turn or the whole session, and "Undo turn", an `agentd/revert` to the seq right before
// the last turn that changed files and is not undone yet. A `conflict` answer names the
// files someone else changed; overwriting them takes a second, forced call that the UI
// makes only after the user confirmed.

import type { AgentdClient, AgentEvent } from "./client";

export interface FileDiff {
  path: string;
  status: string;
  additions: number;
  deletions: number;
  binary: boolean;
  diff?: string;
}

export interface DiffResult {
  from_seq?: number | null;
  to_seq: number;
  turn_id?: string;
  files: FileDiff[];
  diff: string;
  truncated: boolean;
}

/** A turn that changed files: its id and the seq of its `turn_started`. */
export interface ChangingTurn {
  turnId: string;
  startSeq: number;
}

async function events(client: AgentdClient, sid: string, types: string[]): Promise<AgentEvent[]> {
  const out: AgentEvent[] = [];
  let after: number | undefined;
  for (;;) {
    const p: Record<string, unknown> = { session_id: sid, types, limit: 1000 };
    if (after !== undefined) p.after_seq = after;
    const page = await client.request<{ events: AgentEvent[]; next_after_seq?: number | null }>("agentd/events", p);
    out.push(...page.events);
    if (page.events.length < 1000 || page.next_after_seq === undefined || page.next_after_seq === null) break;
    after = page.next_after_seq;
  }
  return out;
}

/**
 * The last turn that changed files (an `after` snapshot with a tree inside it) and that
 * no later revert has already taken back (a `workspace_revert` to a seq before it).
 */
export async function lastChangingTurn(client: AgentdClient, sid: string): Promise<ChangingTurn | undefined> {
  const evs = await events(client, sid, ["turn_started", "workspace_snapshot", "workspace_revert"]);
  const turns: { turn: ChangingTurn; changed: boolean }[] = [];
  const revertedTo: { seq: number; toSeq: number }[] = [];
  for (const e of evs) {
    const seq = e.seq ?? -1;
    if (e.type === "turn_started") {
      turns.push({ turn: { turnId: String(e.data.turn_id ?? ""), startSeq: seq }, changed: false });
    } else if (e.type === "workspace_snapshot") {
      const cur = turns[turns.length - 1];
      if (cur && e.data.reason === "after" && typeof e.data.tree === "string") cur.changed = true;
    } else if (e.type === "workspace_revert" && typeof e.data.to_seq === "number") {
      revertedTo.push({ seq, toSeq: e.data.to_seq });
    }
  }
  for (let i = turns.length - 1; i >= 0; i--) {
    const t = turns[i];
    if (!t.changed) continue;
    const undone = revertedTo.some((r) => r.seq > t.turn.startSeq && r.toSeq < t.turn.startSeq);
    if (!undone) return t.turn;
  }
  return undefined;
}

/** `agentd/diff` of the last turn that changed files, or of the whole session. */
export async function sessionDiff(
  client: AgentdClient,
  sid: string,
  scope: "turn" | "session",
): Promise<DiffResult> {
  if (scope === "session") return client.request<DiffResult>("agentd/diff", { session_id: sid });
  const t = await lastChangingTurn(client, sid);
  if (!t) throw new Error("no turn of this session changed any file");
  return client.request<DiffResult>("agentd/diff", { session_id: sid, turn_id: t.turnId });
}

export type UndoOutcome =
  | { kind: "nothing" }
  | { kind: "reverted"; toSeq: number; files: string[]; seq?: number }
  | { kind: "conflict"; toSeq: number; conflicts: string[]; message: string };

/**
 * Reverts the workspace to the seq before the last turn that changed files. Without
 * `force` a `conflict` answer comes back as `{kind: "conflict"}` naming the files; the
 * caller asks the user and calls again with `force` only after an explicit yes.
 */
export async function undoTurn(
  client: AgentdClient,
  sid: string,
  opts: { force?: boolean; toSeq?: number } = {},
): Promise<UndoOutcome> {
  let toSeq = opts.toSeq;
  if (toSeq === undefined) {
    const t = await lastChangingTurn(client, sid);
    if (!t) return { kind: "nothing" };
    toSeq = t.startSeq - 1;
  }
  try {
    const r = await client.request<{ files: string[]; reverted: boolean; seq?: number }>("agentd/revert", {
      session_id: sid,
      to_seq: toSeq,
      force: opts.force === true,
    });
    return { kind: "reverted", toSeq, files: r.files ?? [], seq: r.seq };
  } catch (e) {
    const err = e as Error & { kind?: string; details?: { files?: string[] } };
    if (err.kind === "conflict") {
      const files = err.details?.files ?? [];
      return { kind: "conflict", toSeq, conflicts: files, message: err.message };
    }
    throw e;
  }
}
