// Starts a real agentd for a test: binaries from the cargo target directory, a temp
// AGENTD_HOME and AGENTD_SOCKET, and `agentctl socket-path` to auto-start it (the same
// path the extension takes).

import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { agentctlSocketPath, AgentdClient, ClientOptions } from "../core/client";

const REPO = path.resolve(__dirname, "../../../../..");


export function binDir(): string {
  const dir = process.env.AGENTD_BIN_DIR ?? path.join(REPO, "target", "debug");
  for (const b of ["agentd", "agentctl"]) {
    const p = path.join(dir, b);
    if (!fs.existsSync(p)) {
      throw new Error(`missing ${p}: build it first with \`cargo build -p agentd -p agentctl\``);
    }
  }
  return dir;
}

export function example(name: string): string {
  const p = path.join(REPO, "examples", name);
  if (!fs.existsSync(p)) throw new Error(`missing example script ${p}`);
  return p;
}

export class TestDaemon {
  readonly root = fs.mkdtempSync(path.join(os.tmpdir(), "agentd-vsc-"));
  readonly home = path.join(this.root, "home");
  readonly socket = path.join(this.root, "run", "agentd.sock");
  readonly workspace = path.join(this.root, "ws");
  readonly agentctl: string;
  readonly env: NodeJS.ProcessEnv;
  private clients: AgentdClient[] = [];

  constructor() {
    const bins = binDir();
    fs.mkdirSync(this.workspace);
    this.agentctl = path.join(bins, "agentctl");
    this.env = {
      ...process.env,
      AGENTD_HOME: this.home,
      AGENTD_SOCKET: this.socket,
      AGENTD_BIN: path.join(bins, "agentd"),
      AGENTD_CONFIG: path.join(this.root, "no-config.toml"),
      AGENTD_DURABILITY: "none",
    };
  }

  /** The extension's way: `agentctl socket-path`, starting the daemon if needed. */
  socketPath = (): Promise<string> => agentctlSocketPath(this.agentctl, this.env);

  client(opts: Partial<ClientOptions> = {}): AgentdClient {
    const c = new AgentdClient({ socketPath: this.socketPath, backoffMs: [50, 100, 200], ...opts });
    c.on("error", () => undefined);
    this.clients.push(c);
    return c;
  }

  /** Stops the daemon with `agentd/shutdown` and waits until its socket is gone. */
  async stop(timeoutMs = 15000): Promise<void> {
    const alive = await canConnect(this.socket);
    if (!alive) return;
    const c = new AgentdClient({ socketPath: async () => this.socket, backoffMs: [1e9] });
    c.on("error", () => undefined);
    await c.start();
    await c.request("agentd/shutdown", {}).catch(() => undefined);
    c.close();
    const deadline = Date.now() + timeoutMs;
    while (await canConnect(this.socket)) {
      if (Date.now() > deadline) throw new Error("daemon did not stop");
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async dispose(): Promise<void> {
    for (const c of this.clients) c.close();
    await this.stop();
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}

function canConnect(p: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(p);
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

/** Resolves with the first value `pred` accepts among future calls to the returned feed. */
export function waiter<T>(
  pred: (v: T) => boolean,
  timeoutMs: number,
  what: string,
): { feed: (v: T) => void; done: Promise<T> } {
  let resolve!: (v: T) => void;
  let reject!: (e: Error) => void;
  const done = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Marked handled here; whoever awaits `done` still sees the rejection.
  done.catch(() => undefined);
  const t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
  t.unref();
  let finished = false;
  return {
    feed: (v: T) => {
      if (!finished && pred(v)) {
        finished = true;
        clearTimeout(t);
        resolve(v);
      }
    },
    done,
  };
}
