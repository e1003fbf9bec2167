#!/usr/bin/env bash
# The main job, offline: build agentd + agentctl, start the daemon on a private home
# and socket, run a real turn with the `script` provider (examples/hello.json), then
# inspect, compact, fork and tree the session. Safe to run repeatedly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

cargo build --release -p agentd -p agentctl

state="$root/target/quickstart"
mkdir -p "$state"
export AGENTD_HOME="${AGENTD_HOME:-$state/home}"
export AGENTD_SOCKET="${AGENTD_SOCKET:-$state/run/agentd.sock}"
export AGENTD_CONFIG="${AGENTD_CONFIG:-$state/config.toml}"
export PATH="$root/target/release:$PATH"
[ -f "$AGENTD_CONFIG" ] || : > "$AGENTD_CONFIG"

stop() { agentctl daemon stop >/dev/null 2>&1 || true; }
trap stop EXIT

echo "== start the daemon"
agentctl daemon start

echo "== run a turn (script provider, offline); the answer streams below"
agentctl run --title "quick start" --model "script:$root/examples/hello.json" "What is in this directory?"
sid=$(agentctl --json ls --limit 1 | sed -n 's/^[^[]*\[{"session_id":"\([^"]*\)".*/\1/p')
[ -n "$sid" ] || { echo "quickstart: no session found after agentctl run" >&2; exit 1; }

echo "== a second turn in the same session"
agentctl turn "$sid" "Thanks. Look once more, please."

echo "== the Log"
agentctl log "$sid"

echo "== show"
agentctl show "$sid"

echo "== provider input replay would send"
agentctl context "$sid" | head -n 12

echo "== compact the first turn into a deterministic checkpoint (the second stays raw)"
agentctl compact "$sid" --tail-events 6
agentctl checkpoint "$sid"

echo "== fork after the tool result (seq 7) with a branch summary, then the tree"
agentctl fork "$sid" --to-seq 7 --summarize
agentctl tree "$sid"

echo "== sessions"
agentctl ls
