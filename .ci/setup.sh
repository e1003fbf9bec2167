#!/usr/bin/env bash
# Everything the whole test suite (`cargo build --workspace --all-targets && cargo test
# --workspace`, README: Tests) needs beyond a Rust toolchain, on a fresh Debian machine:
#   - git, python3 with venv, node >= 20 and npm, tmux (Debian packages, when missing;
#     tmux hosts the real Codex TUI of tests/tests/codex_tui.rs);
#   - systemd's tools for the service tests and cargo-deb (.ci/service.sh tools);
#   - PostgreSQL's server binaries for the database store's tests (.ci/postgres.sh);
#   - the reference MCP servers, from committed lockfiles (.ci/mcp.sh);
#   - the other agents the import and export tests run, from committed lockfiles (.ci/peers.sh).
# Run it as root (it installs Debian packages with apt-get); as another user it installs
# only what needs no root and fails naming whatever is missing. Safe to run again (the
# npm and pip steps reinstall from their lockfiles). `.ci/run` (CI) starts with it.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "setup.sh: FAIL: $*" >&2; exit 1; }

missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    fail "missing: ${missing[*]} (install them, or run this script as root on Debian)"
  fi
fi
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || fail "node >= 20 is needed (the import tests' peers), found $(node --version); Debian 13 ships node 20"

echo "== systemd tools and cargo-deb (.ci/service.sh tools)"
bash .ci/service.sh tools
echo "== PostgreSQL server binaries (.ci/postgres.sh)"
bash .ci/postgres.sh
echo "== reference MCP servers (.ci/mcp.sh)"
bash .ci/mcp.sh
echo "== other agents for the import tests (.ci/peers.sh)"
bash .ci/peers.sh
echo "setup.sh: everything the test suite needs is installed"
