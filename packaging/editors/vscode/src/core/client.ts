// The connection to agentd: vscode-jsonrpc (Content-Length framing) over the Unix
// socket, reconnect with backoff, and follows (subscriptions) that resume after the last
// seq they delivered, so a restart of the daemon shows no gap and no duplicate.

import { execFile } from "node:child_process";
import { EventEmitter } from "node:events";
import * as net from "node:net";
import {
  createMessageConnection,
  MessageConnection,
  SocketMessageReader,
  SocketMessageWriter,
} from "vscode-jsonrpc/node";

export interface AgentEvent {
  id?: string;
  session_id: string;
  seq?: number;
  ts?: string;
  type: string;
  data: Record<string, unknown>;
}

export interface PermissionRequest {
  session_id: string;
  turn_id?: string;
  call_id: string;
  tool: string;
  args: unknown;
}

export type Decision = "allow" | "deny";
export type ClientState = "connecting" | "connected" | "disconnected" | "closed";

/** Runs `agentctl socket-path`, which starts the daemon when none is running. */
export function agentctlSocketPath(
  agentctl: string,
  env: NodeJS.ProcessEnv = process.env,
  timeoutMs = 20000,
): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(agentctl, ["socket-path"], { env, timeout: timeoutMs }, (err, stdout, stderr) => {
      if (err) {
        const why = (err as NodeJS.ErrnoException).code === "ENOENT"
          ? `agentctl not found at '${agentctl}' (set agentd.agentctlPath)`
          : `agentctl socket-path failed: ${String(stderr).trim() || err.message}`;
        reject(new Error(why));
        return;
      }
      const p = String(stdout).trim();
      if (!p) {
        reject(new Error("agentctl socket-path printed nothing"));
        return;
      }
      resolve(p);
    });
  });
}

export interface ClientOptions {
  /** Where the socket is; called again before every reconnect. */
  socketPath: () => Promise<string>;
  /** Answers `agentd/permission` requests; without it every request is denied. */
  onPermission?: (req: PermissionRequest) => Promise<Decision>;
  /** Delays between reconnect attempts, the last one repeating. */
  backoffMs?: number[];
  clientName?: string;
}

type Listener = (ev: AgentEvent) => void;

/** One subscription to a session's events that survives reconnects. */
export class Follow {
  /** The last durable seq delivered to the listener (`undefined`: none yet). */
  lastSeq: number | undefined;
  subscription: string | number | undefined;
  /** The connection this follow's subscription was made on (or is being made on). */
  subscribedOn: unknown;
  closed = false;

  constructor(
    readonly client: AgentdClient,
    readonly sessionId: string,
    afterSeq: number | undefined,
    readonly permissions: boolean,
    private readonly listener: Listener,
  ) {
    this.lastSeq = afterSeq;
  }

  /** Delivers an event once: durable events at or below `lastSeq` are duplicates. */
  deliver(ev: AgentEvent): void {
    if (this.closed) return;
    if (ev.type === "lagged") {
      // The daemon dropped this subscription because we fell behind: subscribe again
      // after the last seq delivered, which replays what was missed.
      this.client.resubscribe(this);
      return;
    }
    if (typeof ev.seq === "number") {
      if (this.lastSeq !== undefined && ev.seq <= this.lastSeq) return;
      this.lastSeq = ev.seq;
    }
    this.listener(ev);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.client.unfollow(this);
  }
}

export class AgentdClient extends EventEmitter {
  state: ClientState = "disconnected";
  socketPath: string | undefined;
  lastError: string | undefined;
  private conn: MessageConnection | undefined;
  private socket: net.Socket | undefined;
  private follows = new Set<Follow>();
  private bySub = new Map<string, Follow>();
  /** Notifications for a subscription whose id the subscribe call has not returned yet. */
  private early = new Map<string, AgentEvent[]>();
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;
  private subscribing = 0;

  constructor(private readonly opts: ClientOptions) {
    super();
  }

  private setState(s: ClientState, detail?: string): void {
    this.state = s;
    if (detail !== undefined) this.lastError = detail;
    this.emit("state", s, detail);
  }

  /** Connects (once); rejects if this attempt fails, and keeps retrying in the background. */
  start(): Promise<void> {
    if (this.state === "connected") return Promise.resolve();
    if (this.connecting) return this.connecting;
    this.connecting = this.connectOnce().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  /** Resolves when connected, rejects after `timeoutMs`. */
  waitConnected(timeoutMs: number): Promise<void> {
    if (this.state === "connected") return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.off("state", on);
        reject(new Error(`not connected within ${timeoutMs} ms (${this.lastError ?? "no error"})`));
      }, timeoutMs);
      const on = (s: ClientState) => {
        if (s === "connected") {
          clearTimeout(t);
          this.off("state", on);
          resolve();
        }
      };
      this.on("state", on);
    });
  }

  private async connectOnce(): Promise<void> {
    if (this.state === "closed") throw new Error("client closed");
    this.setState("connecting");
    let path: string;
    let socket: net.Socket;
    try {
      path = await this.opts.socketPath();
      socket = await new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect(path);
        s.once("connect", () => {
          s.off("error", reject);
          resolve(s);
        });
        s.once("error", reject);
      });
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      this.setState("disconnected", msg);
      this.emit("error", new Error(`cannot connect to agentd: ${msg}`));
      this.scheduleReconnect();
      throw new Error(`cannot connect to agentd: ${msg}`);
    }
    this.socketPath = path;
    this.socket = socket;
    const conn = createMessageConnection(
      new SocketMessageReader(socket),
      new SocketMessageWriter(socket),
    );
    this.conn = conn;
    conn.onNotification("agentd/event", (p: { subscription: string | number; result: AgentEvent }) => {
      const key = String(p.subscription);
      const f = this.bySub.get(key);
      if (f) {
        f.deliver(p.result);
      } else if (this.subscribing > 0) {
        // Only while a subscribe call is out; anything else is for a subscription
        // already closed here.
        const q = this.early.get(key) ?? [];
        q.push(p.result);
        this.early.set(key, q);
      }
    });
    conn.onRequest("agentd/permission", async (p: PermissionRequest) => {
      if (!this.opts.onPermission) return { decision: "deny" };
      try {
        return { decision: await this.opts.onPermission(p) };
      } catch (e) {
        this.emit("error", new Error(`permission prompt failed: ${String(e)}`));
        return { decision: "deny" };
      }
    });
    conn.onClose(() => this.lost(conn, "the daemon closed the connection"));
    conn.onError(([err]) => this.emit("error", err));
    socket.on("error", (e) => this.emit("error", e));
    socket.on("close", () => this.lost(conn, "connection to the daemon lost"));
    conn.listen();
    try {
      await conn.sendRequest("agentd/hello", { client: this.opts.clientName ?? "agentd-vscode" });
    } catch (e) {
      this.lost(conn, `hello failed: ${String(e)}`);
      throw e;
    }
    this.attempt = 0;
    this.setState("connected");
    // Resume every follow after the last seq it delivered.
    for (const f of this.follows) {
      try {
        await this.subscribe(f);
      } catch (e) {
        this.emit("error", new Error(`resubscribe to ${f.sessionId} failed: ${String(e)}`));
      }
    }
    this.emit("reconnected");
  }

  private lost(conn: MessageConnection, why: string): void {
    if (this.conn !== conn) return;
    this.conn = undefined;
    this.socket?.destroy();
    this.socket = undefined;
    this.bySub.clear();
    this.early.clear();
    for (const f of this.follows) f.subscription = undefined;
    conn.dispose();
    if (this.state === "closed") return;
    this.setState("disconnected", why);
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.state === "closed" || this.timer) return;
    const delays = this.opts.backoffMs ?? [100, 250, 500, 1000, 2000, 5000];
    const d = delays[Math.min(this.attempt, delays.length - 1)];
    this.attempt++;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.start().catch(() => undefined);
    }, d);
  }

  /** Drops the socket as a fault would (the client reconnects on its own). */
  dropConnection(): void {
    this.socket?.destroy();
  }

  async request<T = any>(method: string, params: object = {}): Promise<T> {
    if (!this.conn || this.state !== "connected") {
      await this.start();
    }
    const c = this.conn;
    if (!c) throw new Error("not connected to agentd");
    try {
      return (await c.sendRequest(method, params)) as T;
    } catch (e: any) {
      // Keep the daemon's error kind visible in the message.
      const kind = e?.data?.kind ? ` [${e.data.kind}]` : "";
      throw Object.assign(new Error(`${method}: ${e?.message ?? String(e)}${kind}`), {
        kind: e?.data?.kind,
        code: e?.code,
        details: e?.data?.details,
      });
    }
  }

  /**
   * Follows a session: durable events after `afterSeq` (all of them for `0`... none when
   * `undefined`: live only) and then live ones, across reconnects.
   */
  async follow(
    sessionId: string,
    afterSeq: number | undefined,
    listener: Listener,
    opts: { permissions?: boolean } = {},
  ): Promise<Follow> {
    const f = new Follow(this, sessionId, afterSeq, opts.permissions ?? false, listener);
    this.follows.add(f);
    try {
      // Connecting subscribes every follow, this one included.
      if (this.state !== "connected") await this.start();
      // A connect already past its resubscribe loop did not see this follow.
      await this.subscribe(f);
    } catch (e) {
      this.follows.delete(f);
      throw e;
    }
    return f;
  }

  private async subscribe(f: Follow): Promise<void> {
    const c = this.conn;
    // One subscription per follow and connection, even if a reconnect's loop and a new
    // follow race for it.
    if (!c || f.closed || f.subscribedOn === c) return;
    f.subscribedOn = c;
    const params: Record<string, unknown> = { session_id: f.sessionId };
    if (f.lastSeq !== undefined) params.after_seq = f.lastSeq;
    if (f.permissions) params.permissions = true;
    this.subscribing++;
    let sub: string | number;
    try {
      sub = await c.sendRequest<string | number>("agentd/subscribe", params);
    } catch (e) {
      f.subscribedOn = undefined;
      throw e;
    } finally {
      this.subscribing--;
    }
    const key = String(sub);
    f.subscription = sub;
    this.bySub.set(key, f);
    const q = this.early.get(key);
    this.early.delete(key);
    if (this.subscribing === 0) this.early.clear();
    for (const ev of q ?? []) f.deliver(ev);
  }

  /** Replaces a follow's subscription with a new one after its `lastSeq`. */
  resubscribe(f: Follow): void {
    const old = f.subscription;
    if (old !== undefined) {
      this.bySub.delete(String(old));
      // Usually gone already (the daemon ends a lagged subscription); make sure.
      this.conn?.sendRequest("agentd/unsubscribe", [old]).catch(() => undefined);
    }
    f.subscription = undefined;
    f.subscribedOn = undefined;
    this.emit("error", new Error(`subscription to ${f.sessionId} lagged; resuming after seq ${f.lastSeq ?? "start"}`));
    this.subscribe(f).catch((e) => this.emit("error", new Error(`resubscribe to ${f.sessionId} failed: ${String(e)}`)));
  }

  async unfollow(f: Follow): Promise<void> {
    this.follows.delete(f);
    if (f.subscription === undefined) return;
    this.bySub.delete(String(f.subscription));
    const c = this.conn;
    const sub = f.subscription;
    f.subscription = undefined;
    if (c && this.state === "connected") {
      await c.sendRequest("agentd/unsubscribe", [sub]).catch(() => undefined);
    }
  }

  close(): void {
    this.setState("closed");
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.follows.clear();
    const c = this.conn;
    this.conn = undefined;
    c?.dispose();
    this.socket?.destroy();
  }
}
