// Drives `agentctl acp` with the official ACP TypeScript SDK (@agentclientprotocol/sdk,
// pinned in package.json) as a real third-party client, and validates every frame the
// agent writes against the JSON schema shipped in that package.
//
// Flow: initialize → session/new → prompt with a tool call (permission answered) →
// prompt cancelled mid-stream → session/load (in a second bridge) → session/list →
// session/resume → session/close. The daemon is started by agentctl itself (auto-start)
// on a private AGENTD_HOME / AGENTD_SOCKET and stopped at the end.
//
// Usage: node test.mjs [path/to/agentctl]   (default: ../../target/debug/agentctl)

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { client, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";
import Ajv2020 from "ajv/dist/2020.js";

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

// ---- schema validation of every frame the agent sends ----------------------------------
const schemaPath = path.join(here, "node_modules/@agentclientprotocol/sdk/schema/v1/schema.json");
const schema = JSON.parse(fs.readFileSync(schemaPath, "utf8"));
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(schema, "acp");
const defs = schema.$defs;
const byMethod = (side, suffix) =>
  Object.fromEntries(
    Object.entries(defs)
      .filter(([name, d]) => d["x-side"] === side && name.endsWith(suffix))
      .map(([name, d]) => [d["x-method"], name]),
  );
const agentResponses = byMethod("agent", "Response"); // results of client→agent requests
const clientRequests = byMethod("client", "Request"); // agent→client requests
const clientNotifications = byMethod("client", "Notification");
const validators = new Map();
function validate(defName, value, what) {
  if (!validators.has(defName)) validators.set(defName, ajv.getSchema(`acp#/$defs/${defName}`));
  const v = validators.get(defName);
  if (!v) throw new Error(`schema has no $defs/${defName}`);
  if (!v(value)) {
    throw new Error(`${what} does not match ${defName}: ${ajv.errorsText(v.errors)}\n${JSON.stringify(value)}`);
  }
}

const sentMethods = new Map(); // id of each request we sent → its method
let framesChecked = 0;
const failures = [];
function checkAgentFrame(line) {
  const msg = JSON.parse(line);
  try {
    if (msg.jsonrpc !== "2.0") throw new Error(`frame without jsonrpc 2.0: ${line}`);
    if (msg.method !== undefined && msg.id !== undefined) {
      const def = clientRequests[msg.method];
      if (!def) throw new Error(`agent sent an unknown request ${msg.method}`);
      validate(def, msg.params, `request ${msg.method}`);
    } else if (msg.method !== undefined) {
      const def = clientNotifications[msg.method];
      if (!def) throw new Error(`agent sent an unknown notification ${msg.method}`);
      validate(def, msg.params, `notification ${msg.method}`);
    } else if (msg.error !== undefined) {
      validate("Error", msg.error, `error response ${msg.id}`);
    } else {
      const method = sentMethods.get(msg.id);
      if (method === undefined) throw new Error(`response to an id we never sent: ${line}`);
      if (method.startsWith("_")) {
        if (typeof msg.result !== "object") throw new Error(`extension result not an object: ${line}`);
      } else {
        validate(agentResponses[method], msg.result, `result of ${method}`);
      }
    }
    framesChecked++;
  } catch (e) {
    failures.push(e.message);
  }
}

// ---- one bridge process, its stdio wrapped so every frame is seen -----------------------
const root = fs.mkdtempSync(path.join(os.tmpdir(), "agentd-acp-node-"));
const workspace = path.join(root, "ws");
fs.mkdirSync(workspace);
const env = {
  ...process.env,
  AGENTD_HOME: path.join(root, "home"),
  AGENTD_SOCKET: path.join(root, "run", "agentd.sock"),
  AGENTD_DURABILITY: "none",
};
const script = path.join(root, "script.json");
fs.writeFileSync(
  script,
  JSON.stringify({
    rules: [
      {
        match: "story",
        steps: [{ text: "Once upon a time ".repeat(40), chunk_chars: 4, delay_ms: 50 }],
      },
      {
        steps: [
          {
            reasoning: "The user wants a file.",
            text: "Writing notes.txt.",
            tool_calls: [{ name: "write_file", args: { path: "notes.txt", content: "hello\n" } }],
          },
          { text: "Done." },
        ],
      },
    ],
  }),
);

function bridge(extraArgs = []) {
  const child = spawn(agentctl, ["acp", "--model", `script:${script}`, ...extraArgs], {
    cwd: workspace,
    env,
    stdio: ["pipe", "pipe", "inherit"],
  });
  let buf = "";
  const tapped = new Readable({ read() {} });
  child.stdout.on("data", (chunk) => {
    buf += chunk.toString("utf8");
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim()) checkAgentFrame(line);
    }
    tapped.push(chunk);
  });
  child.stdout.on("end", () => tapped.push(null));
  const out = new Writable({
    write(chunk, _enc, cb) {
      for (const line of chunk.toString("utf8").split("\n")) {
        if (!line.trim()) continue;
        const m = JSON.parse(line);
        if (m.method !== undefined && m.id !== undefined) sentMethods.set(m.id, m.method);
      }
      child.stdin.write(chunk, cb);
    },
    final(cb) {
      child.stdin.end(cb);
    },
  });
  const stream = ndJsonStream(Writable.toWeb(out), Readable.toWeb(tapped));
  return { child, stream };
}

function assert(cond, message) {
  if (!cond) throw new Error(`assertion failed: ${message}`);
}

function withTimeout(p, ms, what) {
  let t;
  const timeout = new Promise((_, reject) => {
    t = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(t));
}

// ---- the flow ------------------------------------------------------------------------------
const updates = []; // {sessionId, update}
let onUpdate = () => {};
let permissionRequests = 0;
const app = () =>
  client({ name: "agentd-ci" })
    .onNotification("session/update", ({ params }) => {
      updates.push(params);
      onUpdate(params);
    })
    .onRequest("session/request_permission", ({ params }) => {
      permissionRequests++;
      const allow = params.options.find((o) => o.kind === "allow_once");
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    });

const T = 30_000;
let sessionId;
let exitCode = 0;
try {
  const first = bridge();
  await withTimeout(
    app().connectWith(first.stream, async (agent) => {
      const init = await agent.request("initialize", {
        protocolVersion: PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } },
        clientInfo: { name: "agentd-ci", version: "1" },
      });
      assert(init.protocolVersion === 1, "protocol version 1");
      assert(init.agentCapabilities.loadSession === true, "loadSession advertised");
      const s = await agent.request("session/new", { cwd: workspace, mcpServers: [] });
      sessionId = s.sessionId;
      assert(s.modes.currentModeId === "ask", "ask mode by default");

      // A prompt with a tool call that asks permission.
      updates.length = 0;
      const r1 = await agent.request("session/prompt", {
        sessionId,
        prompt: [{ type: "text", text: "write the notes" }],
      });
      assert(r1.stopReason === "end_turn", `end_turn, got ${r1.stopReason}`);
      assert(permissionRequests === 1, `one permission request, got ${permissionRequests}`);
      const kinds = updates.map((u) => u.update.sessionUpdate);
      for (const k of ["agent_thought_chunk", "agent_message_chunk", "tool_call", "tool_call_update"]) {
        assert(kinds.includes(k), `prompt streamed ${k} (got ${kinds.join(",")})`);
      }
      const done = updates.find((u) => u.update.sessionUpdate === "tool_call_update").update;
      assert(done.status === "completed", "tool call completed");
      assert(fs.readFileSync(path.join(workspace, "notes.txt"), "utf8") === "hello\n", "file written");

      // A prompt cancelled mid-stream.
      let cancelled = false;
      onUpdate = (p) => {
        if (!cancelled && p.update.sessionUpdate === "agent_message_chunk") {
          cancelled = true;
          agent.notify("session/cancel", { sessionId });
        }
      };
      const r2 = await agent.request("session/prompt", {
        sessionId,
        prompt: [{ type: "text", text: "tell me a story" }],
      });
      onUpdate = () => {};
      assert(cancelled, "a chunk arrived before the cancel");
      assert(r2.stopReason === "cancelled", `cancelled, got ${r2.stopReason}`);
    }),
    T,
    "first bridge",
  );
  first.child.stdin.end();

  // A second bridge, as another editor: load replays, list, resume, close.
  const second = bridge();
  await withTimeout(
    app().connectWith(second.stream, async (agent) => {
      await agent.request("initialize", { protocolVersion: PROTOCOL_VERSION, clientCapabilities: {} });
      updates.length = 0;
      await agent.request("session/load", { sessionId, cwd: workspace, mcpServers: [] });
      const replayed = updates.filter((u) => u.sessionId === sessionId).map((u) => u.update.sessionUpdate);
      for (const k of ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk", "tool_call", "tool_call_update"]) {
        assert(replayed.includes(k), `load replayed ${k} (got ${replayed.join(",")})`);
      }
      assert(replayed.filter((k) => k === "user_message_chunk").length === 2, "both prompts replayed");
      const list = await agent.request("session/list", { cwd: workspace });
      assert(list.sessions.some((s) => s.sessionId === sessionId && s.cwd === workspace), "listed");
      updates.length = 0;
      await agent.request("session/resume", { sessionId, cwd: workspace });
      assert(!updates.some((u) => u.update.sessionUpdate.endsWith("_chunk")), "resume does not replay");
      await agent.request("session/close", { sessionId });
    }),
    T,
    "second bridge",
  );
  second.child.stdin.end();
  await new Promise((resolve) => (second.child.exitCode !== null ? resolve() : second.child.on("exit", resolve)));
} catch (e) {
  console.error(`FAIL: ${e.stack ?? e}`);
  exitCode = 1;
} finally {
  spawnSync(agentctl, ["daemon", "stop"], { env, stdio: "inherit" });
}
if (failures.length > 0) {
  for (const f of failures) console.error(`FAIL (schema): ${f}`);
  exitCode = 1;
}
if (framesChecked < 20) {
  console.error(`FAIL: only ${framesChecked} frames were checked`);
  exitCode = 1;
}
if (exitCode === 0) {
  fs.rmSync(root, { recursive: true, force: true });
  console.log(`ok: ${framesChecked} agent frames valid against ${path.relative(here, schemaPath)}`);
}
process.exit(exitCode);
