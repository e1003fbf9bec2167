#!/usr/bin/env bash
# The VS Code extension: install from the lockfile, compile (strict TypeScript), run the
# core's tests against a real daemon, package the .vsix. Needs target/debug/agentd and
# agentctl (built by the cargo steps of .ci/run). Safe to run again; never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
ext=packaging/editors/vscode

fail() { echo "vscode.sh: $*" >&2; exit 1; }

command -v node >/dev/null || fail "node is missing (install Node.js 20 or newer, e.g. Debian's nodejs package)"
command -v npm >/dev/null || fail "npm is missing (install Debian's npm package)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || fail "node $(node --version) is too old; 20 or newer is needed"
for b in agentd agentctl; do
  [ -x "$repo/target/debug/$b" ] || fail "target/debug/$b is missing; run: cargo build -p agentd -p agentctl"
done

cd "$ext"
echo "== vscode: npm ci"
npm ci --no-audit --no-fund
echo "== vscode: compile"
rm -rf out
npx --no-install tsc -p .
echo "== vscode: tests against a real daemon"
AGENTD_BIN_DIR="$repo/target/debug" node --test out/test/*.test.js
echo "== vscode: package"
rm -f agentd-vscode.vsix
npx --no-install vsce package --allow-missing-repository --out agentd-vscode.vsix
[ -s agentd-vscode.vsix ] || fail "vsce did not produce agentd-vscode.vsix"
echo "== vscode: ok ($ext/agentd-vscode.vsix)"
