#!/usr/bin/env bash
# ACP conformance against a real third-party client: installs the pinned official ACP
# TypeScript SDK from the committed lockfile (npm ci) and runs tests/acp-node/test.mjs,
# which drives target/debug/agentctl acp and validates every frame the agent sends
# against the JSON schema shipped in that package. Idempotent; never skips: a missing
# tool or binary is a failure that names it.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "acp.sh: FAIL: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || fail "node is not installed (needed for tests/acp-node)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (needed for tests/acp-node)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || fail "node >= 18 is needed, found $(node --version)"
for b in agentctl agentd; do
  [ -x "target/debug/$b" ] || fail "target/debug/$b is missing (run: cargo build -p agentctl -p agentd)"
done

cd tests/acp-node
[ -f package-lock.json ] || fail "tests/acp-node/package-lock.json is missing"
echo "== npm ci (tests/acp-node)"
npm ci --no-audit --no-fund --loglevel=error
echo "== node test.mjs"
node test.mjs ../../target/debug/agentctl
