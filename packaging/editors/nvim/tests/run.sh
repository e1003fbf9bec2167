#!/usr/bin/env bash
# Runs the Neovim plugin's tests headless against a real daemon on a private home,
# socket and config. Binaries come from target/debug unless AGENTD_BIN_DIR says otherwise;
# AGENTD_TEST_NVIM names the nvim to run (default: nvim on PATH).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
plugin="$(dirname "$here")"
root="$(cd "$plugin/../../.." && pwd)"
bin="${AGENTD_BIN_DIR:-$root/target/debug}"
nvim="${AGENTD_TEST_NVIM:-nvim}" # another Neovim build to test against

for b in agentd agentctl; do
  if [ ! -x "$bin/$b" ]; then
    echo "nvim tests: $bin/$b is missing; run cargo build --workspace first" >&2
    exit 1
  fi
done
command -v "$nvim" >/dev/null || { echo "nvim tests: $nvim is not installed (Debian package: neovim)" >&2; exit 1; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentd-nvim.XXXXXX")"
export AGENTD_HOME="$tmp/home"
export AGENTD_SOCKET="$tmp/run/agentd.sock"
export AGENTD_CONFIG="$tmp/config.toml"
export PATH="$bin:$PATH"
export AGENTD_NVIM_EXAMPLES="$root/examples"
mkdir -p "$tmp/ws" "$tmp/other"
: >"$AGENTD_CONFIG"

cleanup() {
  agentctl daemon stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

agentctl daemon start >/dev/null
cd "$tmp/ws"
# -u NONE: no user config; the test loads plugin/agentd.lua itself. Exit status comes
# from the test (cquit on failure).
"$nvim" --headless -u NONE -i NONE -n \
  --cmd "set rtp^=$plugin" \
  -c "luafile $here/run.lua" </dev/null
