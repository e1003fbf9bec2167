// Drives `agentctl mcp-server` with the official MCP TypeScript SDK client over stdio.
// Usage: node client.mjs AGENTCTL SOCKET SESSION_ID [--allow-changes]
// Prints one JSON document with what it saw; exits 1 (naming the check) on a mismatch.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [agentctl, socket, sid, flag] = process.argv.slice(2);
const fail = (what) => { console.error(`client.mjs: FAIL: ${what}`); process.exit(1); };
if (!agentctl || !socket || !sid) fail("usage: node client.mjs AGENTCTL SOCKET SESSION_ID");

const args = ["--socket", socket, "mcp-server"];
if (flag) args.push(flag);
const transport = new StdioClientTransport({
  command: agentctl,
  args,
  env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" },
  stderr: "inherit",
});
const client = new Client({ name: "agentd-test-client", version: "1.0.0" });
await client.connect(transport);

const server = client.getServerVersion();
const { tools } = await client.listTools();
const names = tools.map((t) => t.name).sort();

const listed = await client.callTool({ name: "list_sessions", arguments: {} });
if (listed.isError) fail(`list_sessions: ${JSON.stringify(listed)}`);
const ids = (listed.structuredContent?.sessions ?? []).map((s) => s.session_id);
if (!ids.includes(sid)) fail(`list_sessions lacks ${sid}: ${JSON.stringify(listed.structuredContent)}`);

const shown = await client.callTool({ name: "show_session", arguments: { session_id: sid } });
if (shown.isError) fail(`show_session: ${JSON.stringify(shown)}`);

const found = await client.callTool({ name: "search_sessions", arguments: { query: "needle" } });
if (found.isError) fail(`search_sessions: ${JSON.stringify(found)}`);

const ctx = await client.callTool({ name: "session_context", arguments: { session_id: sid } });
const missing = await client.callTool({ name: "show_session", arguments: { session_id: "20990101T000000-000000" } });

let unknown = null;
let forked = null;
if (flag === "--allow-changes") {
  const f = await client.callTool({ name: "fork_session", arguments: { session_id: sid } });
  if (f.isError) fail(`fork_session: ${JSON.stringify(f)}`);
  forked = f.structuredContent;
} else {
  try {
    await client.callTool({ name: "run_turn", arguments: { session_id: sid, input: "x" } });
  } catch (e) {
    unknown = String(e.message ?? e);
  }
}

console.log(JSON.stringify({
  server, names,
  show: shown.structuredContent,
  search_text: found.content?.[0]?.text ?? "",
  context_ok: !ctx.isError,
  missing_is_error: missing.isError === true,
  missing_text: missing.content?.[0]?.text ?? "",
  run_turn_error: unknown,
  forked,
}));
await client.close();
