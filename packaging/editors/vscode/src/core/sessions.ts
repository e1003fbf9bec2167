// The workspace's sessions as a tree of forks (agentd/tree) with each session's status
// (agentd/list), kept live by following every listed session's live events.

import type { AgentdClient, AgentEvent, Follow } from "./client";

export interface SessionNode {
  sessionId: string;
  title: string | null;
  eventCount: number;
  status: string;
  forkedToSeq?: number;
  children: SessionNode[];
}

interface TreeNodeWire {
  session_id: string;
  title: string | null;
  event_count: number;
  forked_to_seq?: number;
  forks: TreeNodeWire[];
}

interface Summary {
  session_id: string;
  status: string;
  title: string | null;
  event_count: number;
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
    const conv = (w: TreeNodeWire): SessionNode => {
      const n: SessionNode = {
        sessionId: w.session_id,
        title: w.title,
        eventCount: w.event_count,
        status: status.get(w.session_id)?.status ?? "idle",
        forkedToSeq: w.forked_to_seq,
        children: w.forks.map(conv),
      };
      byId.set(n.sessionId, n);
      return n;
    };
    this.roots = tree.roots.map(conv);
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
