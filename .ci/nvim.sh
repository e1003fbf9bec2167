#!/usr/bin/env bash
# Neovim plugin tests (packaging/editors/nvim): headless nvim against the real daemon.
# Uses the target/debug binaries the cargo step of .ci/run built. Installs Debian's
# `neovim` package when nvim is missing and this runs as root; otherwise fails naming it.
# Safe to run again: the install is skipped once nvim is present.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== Neovim plugin (packaging/editors/nvim)"

if ! command -v nvim >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing neovim (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq neovim >/dev/null
  else
    echo "nvim is missing: install the Debian package 'neovim' (apt-get install -y neovim), version 0.7 or newer" >&2
    exit 1
  fi
fi

if ! nvim --headless -u NONE -i NONE -c 'if has("nvim-0.7") | qall! | else | cquit 1 | endif' </dev/null; then
  echo "nvim is older than 0.7: $(nvim --version | head -1); the plugin needs Neovim 0.7 or newer" >&2
  exit 1
fi
nvim --version | head -1

for b in agentd agentctl; do
  if [ ! -x "target/debug/$b" ]; then
    echo "target/debug/$b is missing: run cargo build --workspace first (.ci/run does)" >&2
    exit 1
  fi
done

AGENTD_BIN_DIR="$PWD/target/debug" bash packaging/editors/nvim/tests/run.sh
