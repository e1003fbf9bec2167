#!/usr/bin/env bash
# Other coding agents for the import tests and the Codex app-server tests: installs the pinned peers of
# tests/peers/package.json from the committed lockfile (npm ci). tests/tests/import_peers.rs
# runs them against a local mock model to write fresh sessions, then imports those, so a
# format change in a new release shows up as a failing test. Idempotent; never skips: a
# missing tool is a failure that names it.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "peers.sh: FAIL: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || fail "node is not installed (needed for tests/peers)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (needed for tests/peers)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || fail "node >= 20 is needed by the peers, found $(node --version)"

cd tests/peers
[ -f package-lock.json ] || fail "tests/peers/package-lock.json is missing"
echo "== npm ci (tests/peers)"
npm ci --no-audit --no-fund --loglevel=error
[ -x node_modules/.bin/pi ] || fail "tests/peers/node_modules/.bin/pi is missing after npm ci"
# Codex's native binary arrives as the platform package npm picks from the lockfile's
# optional dependencies (@openai/codex-linux-x64 and friends); tests/tests/codex_tui.rs
# runs it (in tmux, which .ci/setup.sh installs) against agentctl app-server.
[ -x node_modules/.bin/codex ] || fail "tests/peers/node_modules/.bin/codex is missing after npm ci"
node_modules/.bin/codex --version >/dev/null || fail "codex from tests/peers does not run (its platform package is missing?)"
