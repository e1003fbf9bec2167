#!/usr/bin/env bash
# `agentctl mcp-server` against a real third-party MCP client: installs the pinned
# official MCP TypeScript SDK from the committed lockfile (npm ci) and runs
# tests/mcp-client-node/test.mjs, whose Client + StdioClientTransport drive
# target/debug/agentctl mcp-server against a real daemon. Idempotent; never skips: a
# missing tool or binary is a failure that names it.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "mcp-client.sh: FAIL: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || fail "node is not installed (needed for tests/mcp-client-node)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (needed for tests/mcp-client-node)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || fail "node >= 18 is needed, found $(node --version)"
for b in agentctl agentd; do
  [ -x "target/debug/$b" ] || fail "target/debug/$b is missing (run: cargo build -p agentctl -p agentd)"
done

cd tests/mcp-client-node
[ -f package-lock.json ] || fail "tests/mcp-client-node/package-lock.json is missing"
echo "== MCP server driven by the official TypeScript SDK client (.ci/mcp-client.sh)"
echo "== npm ci (tests/mcp-client-node)"
npm ci --no-audit --no-fund --loglevel=error
echo "== node test.mjs"
node test.mjs ../../target/debug/agentctl
