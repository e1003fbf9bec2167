#!/usr/bin/env bash
# Bounded fuzzing: builds the fuzz driver (release, stable toolchain, no special flags)
# and runs every target for FUZZ_SECONDS (default 20) each. Fails if any input crashes
# a target; the input is saved under fuzz/artifacts/TARGET/. README: Fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-20}"
seed="${FUZZ_SEED:-1592451106}"
start=$(date +%s)
cargo build --release -p agentd-fuzz
built=$(date +%s)
echo "fuzz: driver built in $((built - start)) s; ${secs} s per target, seed ${seed}"
target/release/agentd-fuzz all --seconds "$secs" --seed "$seed"
echo "fuzz: done in $(( $(date +%s) - start )) s including the build"
