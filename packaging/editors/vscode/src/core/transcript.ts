// A session's transcript as a list of items built from its events, rendered to HTML
// fragments. Changes come out as small patches (append or replace one item) so a view
// renders incrementally: a streamed delta replaces one item, never the page.

import type { AgentdClient, AgentEvent } from "./client";

export type Item =
  | { key: string; kind: "user"; seq?: number; text: string; steer?: boolean }
  | { key: string; kind: "assistant"; seq?: number; text: string; streaming: boolean }
  | {
      key: string;
      kind: "tool";
      seq?: number;
      callId: string;
      name: string;
      args: unknown;
      decision?: string;
      ok?: boolean;
      output?: string;
      /** A `task` call's child session (docs/subagents.md). */
      subagent?: string;
    }
  | { key: string; kind: "notice"; seq?: number; text: string };

export interface Patch {
  op: "append" | "replace";
  key: string;
  html: string;
}

export function escapeHtml(s: string): string {
  return s
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

/** Longest tool output shown inline; the rest is cut with a note. */
export const MAX_OUTPUT_CHARS = 20000;

function clip(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max)}\n… (${s.length - max} more characters)`;
}

export function renderItem(it: Item): string {
  const seq = it.seq !== undefined ? ` data-seq="${it.seq}"` : "";
  switch (it.kind) {
    case "user":
      return `<div class="msg user"${seq}><div class="who">You${it.steer ? " (steered into the running turn)" : ""}</div><pre>${escapeHtml(
        it.text,
      )}</pre></div>`;
    case "assistant":
      return `<div class="msg assistant${it.streaming ? " streaming" : ""}"${seq}><div class="who">Assistant${
        it.streaming ? " …" : ""
      }</div><pre>${escapeHtml(it.text)}</pre></div>`;
    case "tool": {
      const state = it.ok === undefined ? "running" : it.ok ? "ok" : "failed";
      const decision = it.decision ? ` · ${escapeHtml(it.decision)}` : "";
      const child = it.subagent ? ` · subagent ${escapeHtml(it.subagent)}` : "";
      const args = escapeHtml(clip(JSON.stringify(it.args, null, 2) ?? "", MAX_OUTPUT_CHARS));
      const out = it.output !== undefined
        ? `<div class="label">output</div><pre>${escapeHtml(clip(it.output, MAX_OUTPUT_CHARS))}</pre>`
        : "";
      return `<details class="tool ${state}"${seq} data-call="${escapeHtml(it.callId)}"><summary>tool ${escapeHtml(
        it.name,
      )} · ${state}${decision}${child}</summary><div class="label">args</div><pre>${args}</pre>${out}</details>`;
    }
    case "notice":
      return `<div class="notice"${seq}>${escapeHtml(it.text)}</div>`;
  }
}

function str(v: unknown): string {
  if (typeof v === "string") return v;
  if (v === undefined || v === null) return "";
  return JSON.stringify(v, null, 2);
}

export class Transcript {
  readonly items: Item[] = [];
  private byKey = new Map<string, Item>();
  private tools = new Map<string, Item & { kind: "tool" }>();
  private streamingKey: string | undefined;
  private pending: Patch[] = [];
  private dirty = new Set<string>();
  private n = 0;
  lastSeq: number | undefined;
  running = false;

  constructor(readonly sessionId: string) {}

  private add(it: Item): void {
    this.items.push(it);
    this.byKey.set(it.key, it);
    this.pending.push({ op: "append", key: it.key, html: "" });
  }

  private touch(key: string): void {
    this.dirty.add(key);
  }

  /** Applies one event (durable or ephemeral). Unknown types are ignored. */
  apply(ev: AgentEvent): void {
    if (typeof ev.seq === "number") {
      if (this.lastSeq !== undefined && ev.seq <= this.lastSeq) return;
      this.lastSeq = ev.seq;
    }
    const d = ev.data ?? {};
    switch (ev.type) {
      case "user_message": {
        // A prompt's images: one line each (the bytes stay with the daemon).
        const imgs = Array.isArray(d.images) ? (d.images as Record<string, unknown>[]).slice(0, 16) : [];
        const lines = imgs.map((i) => `\n[image: ${str(i.mime).slice(0, 40)}, ${Number(i.bytes) || 0} bytes]`);
        const text = str(d.text) + lines.join("");
        this.add({ key: `k${this.n++}`, kind: "user", seq: ev.seq, text, steer: d.steer === true });
        break;
      }
      case "turn_queued":
        this.add({ key: `k${this.n++}`, kind: "notice", seq: ev.seq, text: `queued: ${str(d.input)}` });
        break;
      case "turn_dequeued": {
        const err = d.error as { kind?: unknown; message?: unknown } | undefined;
        const text = d.reason === "failed"
          ? `queued prompt not started: ${str(err?.kind)}: ${str(err?.message)}`
          : "queued prompt withdrawn";
        this.add({ key: `k${this.n++}`, kind: "notice", seq: ev.seq, text });
        break;
      }
      case "text_delta": {
        const cur = this.streamingKey ? this.byKey.get(this.streamingKey) : undefined;
        if (cur && cur.kind === "assistant") {
          cur.text += str(d.text);
          this.touch(cur.key);
        } else {
          const it: Item = { key: `k${this.n++}`, kind: "assistant", text: str(d.text), streaming: true };
          this.streamingKey = it.key;
          this.add(it);
        }
        break;
      }
      case "assistant_message": {
        const cur = this.streamingKey ? this.byKey.get(this.streamingKey) : undefined;
        this.streamingKey = undefined;
        if (cur && cur.kind === "assistant") {
          cur.text = str(d.text);
          cur.streaming = false;
          cur.seq = ev.seq;
          this.touch(cur.key);
        } else {
          this.add({ key: `k${this.n++}`, kind: "assistant", seq: ev.seq, text: str(d.text), streaming: false });
        }
        break;
      }
      case "tool_call": {
        const it = {
          key: `k${this.n++}`,
          kind: "tool" as const,
          seq: ev.seq,
          callId: str(d.call_id),
          name: str(d.name),
          args: d.args,
        };
        this.tools.set(it.callId, it);
        this.add(it);
        break;
      }
      case "permission_decision": {
        const t = this.tools.get(str(d.call_id));
        if (t) {
          t.decision = `${str(d.decision)}${d.reason ? ` (${str(d.reason)})` : ""}`;
          this.touch(t.key);
        }
        break;
      }
      case "tool_result": {
        const t = this.tools.get(str(d.call_id));
        const output = d.output !== undefined ? str(d.output) : d.error !== undefined ? str(d.error) : "";
        if (t) {
          t.ok = d.ok === true;
          t.output = output;
          const sub = d.subagent as { session_id?: unknown } | undefined;
          if (sub && typeof sub.session_id === "string") t.subagent = sub.session_id;
          this.touch(t.key);
        } else {
          this.add({ key: `k${this.n++}`, kind: "notice", seq: ev.seq, text: `tool result ${str(d.call_id)}: ${output}` });
        }
        break;
      }
      case "turn_started":
        this.running = true;
        break;
      case "turn_ended": {
        this.running = false;
        this.streamingKey = undefined;
        const status = str(d.status);
        if (status !== "completed") {
          this.add({ key: `k${this.n++}`, kind: "notice", seq: ev.seq, text: `turn ${status}` });
        }
        break;
      }
      case "turn_failed":
        this.running = false;
        this.add({
          key: `k${this.n++}`,
          kind: "notice",
          seq: ev.seq,
          text: `turn failed: ${str(d.error_kind)}: ${str(d.error_message)}`,
        });
        break;
      case "history_compaction":
        this.add({ key: `k${this.n++}`, kind: "notice", seq: ev.seq, text: "history compacted" });
        break;
      case "session_started":
        if (d.relation === "subagent") {
          this.add({
            key: `k${this.n++}`,
            kind: "notice",
            seq: ev.seq,
            text: `subagent of ${str(d.parent_session_id)} (task ${str(d.parent_call_id)})`,
          });
        }
        break;
      case "session_fork":
        this.add({
          key: `k${this.n++}`,
          kind: "notice",
          seq: ev.seq,
          text: `forked from ${str(d.parent_session_id)} at seq ${str(d.forked_to_seq)}`,
        });
        break;
      default:
        break;
    }
  }

  /** Patches since the last call, each item rendered once in its latest state. */
  takePatches(): Patch[] {
    const out: Patch[] = [];
    const appended = new Set<string>();
    for (const p of this.pending) {
      const it = this.byKey.get(p.key);
      if (!it) continue;
      appended.add(p.key);
      out.push({ op: "append", key: p.key, html: renderItem(it) });
    }
    for (const key of this.dirty) {
      const it = this.byKey.get(key);
      if (!it || appended.has(key)) continue;
      out.push({ op: "replace", key, html: renderItem(it) });
    }
    this.pending = [];
    this.dirty.clear();
    return out;
  }

  /** The whole transcript as HTML (for a first render or a test). */
  html(): string {
    return this.items.map((it) => `<div id="${it.key}">${renderItem(it)}</div>`).join("\n");
  }
}

/**
 * Loads a session's durable events page by page (`agentd/events` with `after_seq` and
 * `limit`), yielding to the event loop between pages so a huge session never blocks the
 * editor; `onPage` runs after each page. Returns the last seq loaded.
 */
export async function loadHistory(
  client: AgentdClient,
  t: Transcript,
  pageSize: number,
  onPage?: (loaded: number) => void,
): Promise<number | undefined> {
  let after: number | undefined = t.lastSeq;
  let loaded = 0;
  for (;;) {
    const params: Record<string, unknown> = { session_id: t.sessionId, limit: pageSize };
    if (after !== undefined) params.after_seq = after;
    const page = await client.request<{ events: AgentEvent[]; next_after_seq?: number | null }>(
      "agentd/events",
      params,
    );
    for (const ev of page.events) t.apply(ev);
    loaded += page.events.length;
    onPage?.(loaded);
    if (page.events.length < pageSize || page.next_after_seq === undefined || page.next_after_seq === null) {
      break;
    }
    after = page.next_after_seq;
    await new Promise((r) => setImmediate(r));
  }
  return t.lastSeq;
}
