#!/usr/bin/env bash
# Reference MCP servers for the MCP tests (tests/tests/mcp.rs), from committed lockfiles:
# @modelcontextprotocol/server-everything and server-filesystem with `npm ci` into
# tests/mcp-servers/node_modules, and mcp-server-time and mcp-server-git (PyPI, versions pinned in
# tests/mcp-servers/requirements.lock) into the venv tests/mcp-servers/venv. The tests
# run the servers by their entry points, never `npx -y`. Idempotent; never skips: a
# missing tool is a failure that names it.
set -euo pipefail
cd "$(dirname "$0")/../tests/mcp-servers"

fail() { echo "mcp.sh: FAIL: $*" >&2; exit 1; }

# A fresh Debian machine: install what is missing (as root with apt-get), else fail naming it.
apt_install() {
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing $* (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  fi
}
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_install python3-venv
command -v git >/dev/null 2>&1 || apt_install git
command -v node >/dev/null 2>&1 || fail "node is not installed (needed for the npm MCP servers)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (needed for the npm MCP servers)"
command -v python3 >/dev/null 2>&1 || fail "python3 is not installed (needed for the PyPI MCP servers)"
command -v git >/dev/null 2>&1 || fail "git is not installed (needed by mcp-server-git)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || fail "node >= 18 is needed, found $(node --version)"
[ -f package-lock.json ] || fail "tests/mcp-servers/package-lock.json is missing"
[ -f requirements.lock ] || fail "tests/mcp-servers/requirements.lock is missing"

echo "== npm ci (tests/mcp-servers)"
npm ci --no-audit --no-fund --loglevel=error
echo "== venv + pip (tests/mcp-servers/venv)"
[ -x venv/bin/python ] || python3 -m venv venv || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
venv/bin/pip install --quiet --disable-pip-version-check -r requirements.lock
for f in node_modules/@modelcontextprotocol/server-everything/dist/index.js \
         node_modules/@modelcontextprotocol/server-filesystem/dist/index.js \
         venv/bin/mcp-server-time venv/bin/mcp-server-git; do
  [ -e "$f" ] || fail "tests/mcp-servers/$f is missing after install"
done
echo "mcp.sh: reference MCP servers installed"
