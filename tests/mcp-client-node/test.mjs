// Drives `agentctl mcp-server` with the official MCP TypeScript SDK's Client and
// StdioClientTransport (@modelcontextprotocol/sdk, pinned in package.json) as a real
// third-party MCP client. The SDK checks every response against its own schemas, so a
// malformed initialize, tools/list or tools/call answer fails here.
//
// Flow: a session with one `script` turn is made by `agentctl run` (which starts the
// daemon on a private AGENTD_HOME / AGENTD_SOCKET); then a read-only server:
// initialize (2025-11-25) → tools/list → every read-only tool → errors; then a server
// with --allow-writes: fork and turn. The daemon is stopped at the end.
//
// Usage: node test.mjs [path/to/agentctl]   (default: ../../target/debug/agentctl)

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const agentctl = path.resolve(process.argv[2] ?? path.join(here, "../../target/debug/agentctl"));
if (!fs.existsSync(agentctl)) {
  console.error(`FAIL: agentctl binary not found at ${agentctl} (build it: cargo build -p agentctl -p agentd)`);
  process.exit(1);
}
const agentd = path.join(path.dirname(agentctl), "agentd");
if (!fs.existsSync(agentd)) {
  console.error(`FAIL: agentd binary not found next to agentctl at ${agentd}`);
  process.exit(1);
}
const hello = path.resolve(here, "../../examples/hello.json");
const PROMPT = "what is in this workspace?";
const ANSWER = "Those are the files at the top of your workspace.";
const READ_TOOLS = ["list_sessions", "search", "show", "context", "tree", "checkpoint"];

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "agentd-mcp-node-"));
const workspace = path.join(tmp, "ws");
fs.mkdirSync(workspace);
const env = {
  ...process.env,
  AGENTD_HOME: path.join(tmp, "home"),
  AGENTD_SOCKET: path.join(tmp, "run", "agentd.sock"),
  AGENTD_DURABILITY: "none",
};

let checks = 0;
function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}${detail === undefined ? "" : `\n${typeof detail === "string" ? detail : JSON.stringify(detail, null, 2)}`}`);
  }
  checks += 1;
}

function agentctlJson(args) {
  const r = spawnSync(agentctl, ["--json", ...args], { cwd: workspace, env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`agentctl ${args.join(" ")} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** A transport that records what the server sent, around the SDK's stdio transport. */
class Recording {
  constructor(inner) {
    this.inner = inner;
    this.received = [];
  }
  async start() {
    this.inner.onmessage = (m) => {
      this.received.push(m);
      this.onmessage?.(m);
    };
    this.inner.onerror = (e) => this.onerror?.(e);
    this.inner.onclose = () => this.onclose?.();
    return this.inner.start();
  }
  send(m, o) {
    return this.inner.send(m, o);
  }
  close() {
    return this.inner.close();
  }
}

async function connect(args) {
  const transport = new Recording(
    new StdioClientTransport({ command: agentctl, args: ["mcp-server", ...args], env, cwd: workspace, stderr: "inherit" }),
  );
  const client = new Client({ name: "agentd-mcp-node-test", version: "0.0.0" });
  await client.connect(transport);
  return { client, transport };
}

function textOf(result, tool) {
  check(result.isError !== true, `${tool} failed`, result);
  check(result.content.length === 1 && result.content[0].type === "text", `${tool}: one text block`, result);
  return result.content[0].text;
}

function errorOf(result, kind, tool) {
  check(result.isError === true, `${tool}: an isError result`, result);
  check(result.structuredContent?.error?.kind === kind, `${tool}: error kind ${kind}`, result);
  const t = result.content[0].text;
  check(t.startsWith(`error: ${kind}: `), `${tool}: error text names the kind`, t);
  return t;
}

async function main() {
  const run = agentctlJson(["run", "--model", `script:${hello}`, "--title", "node probe", PROMPT]);
  const sid = run.session_id;
  check(typeof sid === "string" && run.output_text.startsWith(ANSWER), "agentctl run made a session", run);

  // ---- read-only server -----------------------------------------------------------
  const { client, transport } = await connect([]);
  const init = transport.received.find((m) => m.result?.protocolVersion);
  check(init?.result.protocolVersion === LATEST_PROTOCOL_VERSION, `negotiated ${LATEST_PROTOCOL_VERSION}`, init);
  check(client.getServerVersion()?.name === "agentd", "serverInfo.name is agentd", client.getServerVersion());
  check(client.getServerCapabilities()?.tools !== undefined, "tools capability", client.getServerCapabilities());
  check((client.getInstructions() ?? "").includes("list_sessions"), "instructions name the tools");

  const { tools } = await client.listTools();
  check(JSON.stringify(tools.map((t) => t.name)) === JSON.stringify(READ_TOOLS), "read-only tool list", tools.map((t) => t.name));
  for (const t of tools) {
    check(t.annotations?.readOnlyHint === true, `${t.name} is readOnlyHint`, t);
    check(t.inputSchema.type === "object", `${t.name} has an object schema`, t);
  }

  const call = (name, args) => client.callTool({ name, arguments: args });
  const list = textOf(await call("list_sessions", {}), "list_sessions");
  check(list.includes(sid) && list.includes('"node probe"'), "list_sessions shows the session", list);
  const hits = textOf(await call("search", { query: "top of your workspace" }), "search");
  check(hits.includes(sid) && hits.includes("assistant_message"), "search finds the answer", hits);
  const shown = textOf(await call("show", { session_id: sid }), "show");
  check(shown.includes(`user: ${PROMPT}`) && shown.includes(`assistant: ${ANSWER}`), "show has the conversation", shown);
  check(shown.includes("tool_call list_dir"), "show has the tool call", shown);
  const page = textOf(await call("show", { session_id: sid, limit: 2 }), "show page");
  check(page.includes("more: call show with after_seq = 1"), "show pages on", page);
  const ctx = textOf(await call("context", { session_id: sid, dialect: "chat" }), "context");
  check(ctx.startsWith("dialect: chat\n") && ctx.includes(ANSWER) && ctx.includes('"balanced":true'), "context replays the session", ctx);
  const tree = textOf(await call("tree", { session_id: sid }), "tree");
  check(tree.includes(sid), "tree names the session", tree);
  const cp = textOf(await call("checkpoint", { session_id: sid }), "checkpoint");
  check(cp.includes("[SESSION_CHECKPOINT v1]") && cp.includes(PROMPT), "checkpoint has the task", cp);

  errorOf(await call("show", { session_id: "20200101T000000-000000" }), "not_found", "show of a missing session");
  errorOf(await call("show", {}), "invalid_args", "show without session_id");
  const off = errorOf(await call("turn", { session_id: sid, prompt: "again" }), "permission_denied", "turn without --allow-writes");
  check(off.includes("--allow-writes"), "the refusal names the flag", off);
  let unknown;
  try {
    await call("no_such_tool", {});
  } catch (e) {
    unknown = e;
  }
  check(unknown && /unknown tool/.test(String(unknown.message)), "an unknown tool is a protocol error", String(unknown));
  await client.close();

  // ---- server with --allow-writes -------------------------------------------------
  const w = await connect(["--allow-writes"]);
  const names = (await w.client.listTools()).tools.map((t) => t.name);
  check(JSON.stringify(names) === JSON.stringify([...READ_TOOLS, "fork", "turn"]), "write tools listed with the flag", names);
  const forked = JSON.parse(textOf(await w.client.callTool({ name: "fork", arguments: { session_id: sid, title: "node child" } }), "fork"));
  check(forked.recorded === true && forked.parent_session_id === sid, "fork recorded a child", forked);
  const progress = [];
  const turn = textOf(
    await w.client.callTool(
      { name: "turn", arguments: { session_id: forked.child_session_id, prompt: "and again" } },
      undefined,
      { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true },
    ),
    "turn",
  );
  check(turn.includes(" completed ") && turn.includes(ANSWER), "turn ran in the child", turn);
  const steps = progress.map((p) => p.message);
  check(steps[0] === "turn started" && steps.includes("tool call: list_dir"), "turn reported progress", steps);
  // The server sends the turn's end as progress before its answer (tests/tests/mcp_server.rs
  // checks that on the raw stream). This SDK runs notification handlers a microtask later
  // than it settles a response, so a progress read in the same chunk as the answer may be
  // dropped: what arrived must be the turn's steps in order, ending at the end if it came.
  const expected = ["turn started", "assistant: Let me look at the workspace.", "tool call: list_dir", "tool result: ok"];
  check(JSON.stringify(steps.slice(0, 4)) === JSON.stringify(expected), "the turn's steps arrive in order", steps);
  check(steps.slice(5).every((m) => m === "turn ended: completed") && steps.length <= 6, "nothing follows the turn's end", steps);
  const childShown = textOf(await w.client.callTool({ name: "show", arguments: { session_id: forked.child_session_id } }), "show child");
  check(childShown.includes("user: and again"), "the child's Log has the turn", childShown);
  await w.client.close();
}

let failed = false;
try {
  await main();
  console.log(`ok: ${checks} checks against agentctl mcp-server with @modelcontextprotocol/sdk`);
} catch (e) {
  failed = true;
  console.error(`FAIL: ${e.stack ?? e}`);
} finally {
  spawnSync(agentctl, ["daemon", "stop"], { env, cwd: workspace, encoding: "utf8" });
  fs.rmSync(tmp, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
