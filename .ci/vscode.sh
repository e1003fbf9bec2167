#!/usr/bin/env bash
# The VS Code extension, as a new user builds it: the tracked files copied into a clean
# directory (no node_modules, no out/), `npm ci` from the lockfile, then
# `vsce package` with no compile step before it (the manifest's `vscode:prepublish`
# compiles, strict TypeScript). The core's tests then run against a real daemon from the
# out/ that packaging compiled. Needs target/debug/agentd and agentctl (built by the
# cargo steps of .ci/run). Safe to run again; never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
ext=packaging/editors/vscode

fail() { echo "vscode.sh: $*" >&2; exit 1; }

command -v node >/dev/null || fail "node is missing (install Node.js 20 or newer, e.g. Debian's nodejs package)"
command -v npm >/dev/null || fail "npm is missing (install Debian's npm package)"
command -v git >/dev/null || fail "git is missing (the clean copy takes the tracked files)"
command -v python3 >/dev/null || fail "python3 is missing (it reads the .vsix; .ci/links.sh installs it as root)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || fail "node $(node --version) is too old; 20 or newer is needed"
for b in agentd agentctl; do
  [ -x "$repo/target/debug/$b" ] || fail "target/debug/$b is missing; run: cargo build -p agentd -p agentctl"
done

# The clean copy keeps the repository's layout (the tests read examples/ beside it).
clean=$(mktemp -d "${TMPDIR:-/tmp}/agentd-vscode.XXXXXX")
trap 'rm -rf "$clean"' EXIT
git ls-files -z -- "$ext" examples | xargs -0 cp --parents -t "$clean"
[ ! -e "$clean/$ext/out" ] && [ ! -e "$clean/$ext/node_modules" ] \
  || fail "the clean copy has build output in it"

cd "$clean/$ext"
echo "== vscode: npm ci (clean copy in $clean)"
npm ci --no-audit --no-fund
echo "== vscode: package from the clean copy, no compile before it"
npx --no-install vsce package --out agentd-vscode.vsix
[ -s agentd-vscode.vsix ] || fail "vsce did not produce agentd-vscode.vsix"
python3 - agentd-vscode.vsix <<'EOF' || fail "the .vsix lacks the compiled entry point"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
missing = [n for n in ("extension/package.json", "extension/out/extension.js") if n not in names]
if missing:
    sys.exit("missing from the .vsix: " + ", ".join(missing))
EOF
echo "== vscode: tests against a real daemon"
AGENTD_BIN_DIR="$repo/target/debug" node --test out/test/*.test.js
cp agentd-vscode.vsix "$repo/$ext/agentd-vscode.vsix"
echo "== vscode: ok ($ext/agentd-vscode.vsix)"
