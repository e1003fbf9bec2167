// Sending input to a session from the editor (docs/editors.md#vs-code): a new turn,
// input steered into the running turn, or a prompt queued behind it. Each send has one
// `client_request_id` and is sent again with it when the connection drops before the
// answer, so the daemon admits it once (docs/durability.md#retrying-clients).

import { randomBytes } from "node:crypto";
import type { AgentdClient } from "./client";

/** How the input goes in: `turn` runs now, `steer` joins the running turn, `queue` waits behind it. */
export type SendHow = "turn" | "steer" | "queue";

export interface Sent {
  /** What the daemon did with it. */
  outcome: "started" | "steered" | "queued";
  turnId: string;
  /** For a steer: the seq of its `user_message`. */
  seq?: number;
  /** One line for the user. */
  message: string;
}

export interface SendOptions {
  permissionMode?: string;
  /** The idempotency key; a new one per input when not given. */
  requestId?: string;
  /** How long a send is retried across a lost connection (default 2 minutes). */
  retryForMs?: number;
}

export function newRequestId(): string {
  return `vscode-${randomBytes(16).toString("hex")}`;
}

type Err = Error & { kind?: string; code?: number };

/**
 * A failure of the connection rather than an answer of the daemon, worth sending again:
 * no connection (no code), vscode-jsonrpc's codes for a connection that broke with the
 * request out (-32099 write, -32098 read, -32097 disposed, -32096 inactive), or a daemon
 * that is shutting down.
 */
function lostConnection(e: Err): boolean {
  if (e.kind === "daemon_unavailable") return true;
  return e.kind === undefined && (e.code === undefined || (e.code <= -32096 && e.code >= -32099));
}

/** `method` with `params`, sent again with the same params after a lost connection. */
async function call<T>(c: AgentdClient, method: string, params: object, retryForMs: number): Promise<T> {
  const until = Date.now() + retryForMs;
  for (;;) {
    try {
      return await c.request<T>(method, params);
    } catch (e) {
      const err = e as Err;
      const left = until - Date.now();
      if (!lostConnection(err) || left <= 0) throw err;
      await c.waitConnected(left).catch(() => {
        throw err;
      });
    }
  }
}

interface TurnAnswer {
  turn_id: string;
  status: string;
}

async function turn(c: AgentdClient, sessionId: string, input: string, queue: boolean, o: SendOptions, id: string): Promise<Sent> {
  const params: Record<string, unknown> = {
    session_id: sessionId,
    input,
    wait: false,
    client_request_id: id,
  };
  if (o.permissionMode) params.permission_mode = o.permissionMode;
  if (queue) params.queue = true;
  const r = await call<TurnAnswer>(c, "agentd/turn", params, o.retryForMs ?? 120000);
  if (r.status === "queued") {
    return { outcome: "queued", turnId: r.turn_id, message: `queued as ${r.turn_id}; it runs when the turns ahead of it end` };
  }
  return { outcome: "started", turnId: r.turn_id, message: `turn ${r.turn_id} started` };
}

/**
 * Sends `input` to the session. A steer that finds no turn running (it ended meanwhile)
 * is sent as a queued prompt instead, so the input is never lost: it starts at once, or
 * behind a turn that started in between.
 */
export async function sendInput(
  c: AgentdClient,
  sessionId: string,
  input: string,
  how: SendHow,
  o: SendOptions = {},
): Promise<Sent> {
  const id = o.requestId ?? newRequestId();
  if (how !== "steer") return turn(c, sessionId, input, how === "queue", o, id);
  try {
    const r = await call<{ turn_id: string; seq: number }>(
      c,
      "agentd/steer",
      { session_id: sessionId, input, client_request_id: id },
      o.retryForMs ?? 120000,
    );
    return { outcome: "steered", turnId: r.turn_id, seq: r.seq, message: `sent to the running turn ${r.turn_id}` };
  } catch (e) {
    if ((e as Err).kind !== "not_running") throw e;
    return turn(c, sessionId, input, true, o, newRequestId());
  }
}
