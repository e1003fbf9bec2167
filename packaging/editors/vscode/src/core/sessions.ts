// The workspace's sessions as a tree of forks and subagents (agentd/tree) with each
// session's status (agentd/list), kept live by following every listed session's live
// events. A subagent (a `task` call's child session, docs/subagents.md) sits under its
// parent like a fork and is marked as one.

import type { AgentdClient, AgentEvent, Follow } from "./client";

export interface SessionNode {
  sessionId: string;
  title: string | null;
  eventCount: number;
  status: string;
  forkedToSeq?: number;
  /** `subagent` for a `task` call's child session. */
  relation?: string;
  /** The parent's `task` call that made this subagent. */
  parentCallId?: string;
  parentSessionId?: string;
  children: SessionNode[];
}

/** What the Sessions view shows for a node: a subagent is tagged and says whose it is. */
export function nodeView(n: SessionNode): { label: string; description: string; tooltip: string } {
  const label = n.title ?? n.sessionId;
  const fork = n.forkedToSeq !== undefined ? ` · fork @${n.forkedToSeq}` : "";
  if (n.relation === "subagent") {
    const of = `subagent of ${n.parentSessionId ?? "?"} (task ${n.parentCallId ?? "?"})`;
    return {
      label,
      description: `subagent · ${n.status} · ${n.eventCount} events`,
      tooltip: `${n.sessionId}\n${of}\n${n.status}, ${n.eventCount} events`,
    };
  }
  return {
    label,
    description: `${n.status} · ${n.eventCount} events${fork}`,
    tooltip: `${n.sessionId}\n${n.status}, ${n.eventCount} events${fork}`,
  };
}

interface TreeNodeWire {
  session_id: string;
  title: string | null;
  event_count: number;
  forked_to_seq?: number;
  relation?: string;
  forks: TreeNodeWire[];
}

interface Summary {
  session_id: string;
  status: string;
  title: string | null;
  event_count: number;
  parent_session_id?: string;
  parent_call_id?: string;
}

export class SessionTree {
  roots: SessionNode[] = [];
  private byId = new Map<string, SessionNode>();
  private watching = new Map<string, Follow>();
  private listeners = new Set<(changed: SessionNode | undefined) => void>();

  constructor(
    private readonly client: AgentdClient,
    readonly workspace: string,
  ) {}

  /** Called with the node whose status changed, or `undefined` after a full reload. */
  onChange(fn: (changed: SessionNode | undefined) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private fire(n: SessionNode | undefined): void {
    for (const fn of this.listeners) fn(n);
  }

  get(sessionId: string): SessionNode | undefined {
    return this.byId.get(sessionId);
  }

  private reloading: Promise<void> = Promise.resolve();

  /** Reloads tree and statuses, and follows sessions not followed yet. Reloads run one
   *  after another, so two of them never follow a session twice. */
  reload(): Promise<void> {
    const next = this.reloading.catch(() => undefined).then(() => this.reloadNow());
    this.reloading = next;
    return next;
  }

  private async reloadNow(): Promise<void> {
    const tree = await this.client.request<{ roots: TreeNodeWire[] }>("agentd/tree", {
      workspace: this.workspace,
    });
    const status = new Map<string, Summary>();
    let cursor: string | undefined;
    do {
      const page: { sessions: Summary[]; next_cursor?: string | null } = await this.client.request(
        "agentd/list",
        cursor ? { workspace: this.workspace, cursor } : { workspace: this.workspace },
      );
      for (const s of page.sessions) status.set(s.session_id, s);
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
    const byId = new Map<string, SessionNode>();
    const conv = (w: TreeNodeWire, parent?: string): SessionNode => {
      const summary = status.get(w.session_id);
      const n: SessionNode = {
        sessionId: w.session_id,
        title: w.title,
        eventCount: w.event_count,
        status: summary?.status ?? "idle",
        forkedToSeq: w.forked_to_seq,
        relation: w.relation,
        parentCallId: summary?.parent_call_id,
        parentSessionId: summary?.parent_session_id ?? parent,
        children: w.forks.map((f) => conv(f, w.session_id)),
      };
      byId.set(n.sessionId, n);
      return n;
    };
    this.roots = tree.roots.map((r) => conv(r));
    this.byId = byId;
    for (const id of byId.keys()) {
      if (this.watching.has(id)) continue;
      try {
        // Live only (no after_seq): status changes, not history.
        const f = await this.client.follow(id, undefined, (ev) => this.onEvent(id, ev));
        this.watching.set(id, f);
      } catch (e) {
        // E.g. the connection's subscription cap: the tree still shows the session, with
        // the status of this reload.
        this.client.emit("error", new Error(`cannot follow ${id} for live status: ${String(e)}`));
      }
    }
    this.fire(undefined);
  }

  private onEvent(id: string, ev: AgentEvent): void {
    const n = this.byId.get(id);
    if (!n) return;
    let status: string | undefined;
    if (ev.type === "turn_started") status = "running";
    else if (ev.type === "turn_ended" || ev.type === "turn_failed") status = "idle";
    if (typeof ev.seq === "number") n.eventCount = Math.max(n.eventCount, ev.seq + 1);
    if (status && status !== n.status) {
      n.status = status;
      this.fire(n);
    }
  }

  async dispose(): Promise<void> {
    const follows = [...this.watching.values()];
    this.watching.clear();
    this.listeners.clear();
    await Promise.all(follows.map((f) => f.close()));
  }
}
