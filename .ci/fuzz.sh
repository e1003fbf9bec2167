#!/usr/bin/env bash
# Coverage-guided fuzzing (docs/fuzzing.md): every target in fuzz/fuzz_targets/ is
# built once by cargo-fuzz (libFuzzer, AddressSanitizer, debug assertions; nightly) and
# run for FUZZ_SECONDS (default 20) each. Fails on a crash, a leak, a timeout or an
# out-of-memory; libFuzzer saves the reproducer under fuzz/artifacts/TARGET/. Prints each
# target's executions, executions per second and coverage (cov: edges, ft: features).
#
# FUZZ_SECONDS   seconds per target (default 20)
# FUZZ_TARGETS   targets to run, space-separated (default: all)
# FUZZ_TIMEOUT   seconds one input may take before it counts as a hang (default 25)
# FUZZ_WORK      where the grown corpora and the logs go (default fuzz/target/work;
#                kept between runs, so a later run starts from what an earlier one found)
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
secs="${FUZZ_SECONDS:-20}"
timeout="${FUZZ_TIMEOUT:-25}"
work="${FUZZ_WORK:-fuzz/target/work}"
start=$(date +%s)

# The instrumented build needs nightly-only flags (-Zsanitizer, sanitizer coverage).
if rustup run nightly rustc --version >/dev/null 2>&1; then
    toolchain=(rustup run nightly)
else
    echo "fuzz: no nightly toolchain (rustup toolchain list); it is needed for the sanitizer flags" >&2
    exit 1
fi

if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
    echo "fuzz: cargo-fuzz installed in $(( $(date +%s) - start )) s"
fi

cargo fmt --manifest-path fuzz/Cargo.toml -- --check

built_at=$(date +%s)
# One build of every target (release, ASan, debug assertions on).
"${toolchain[@]}" cargo fuzz build --fuzz-dir fuzz
bin=fuzz/target/x86_64-unknown-linux-gnu/release
echo "fuzz: targets built in $(( $(date +%s) - built_at )) s"

targets="${FUZZ_TARGETS:-$("${toolchain[@]}" cargo fuzz list --fuzz-dir fuzz | tr '\n' ' ')}"
json=(-dict=fuzz/dict/json.dict)

# Per target: extra seed directories, the largest input, the dictionary.
seeds() {
    local peers=daemon/tests/data/import/peers
    case "$1" in
        log | history) echo fuzz/corpus/import_pixir ;;
        import_pi) echo daemon/tests/data/import "$peers/pi-0.73.1" ;;
        import_codex) echo "$peers/codex-0.169.0" ;;
        import_claude) echo "$peers/claude-code-2.1.328" ;;
        import_opencode) echo "$peers/opencode-1.18.33" ;;
        import_gemini) echo "$peers/gemini-cli-0.61.0" ;;
        import_auto) echo "$peers" ;;
        export_roundtrip) echo "$peers/claude-code-2.1.332" "$peers/codex-0.171.0" "$peers/pi-1.6.0" "$peers/pi-1.6.0-retry" "$peers/gemini-cli-0.61.0-resume" ;;
    esac
    # Inputs that once failed, kept as seeds.
    [ -d "fuzz/regressions/$1" ] && echo "fuzz/regressions/$1"
    return 0
}
max_len() {
    case "$1" in
        log | ndjson | import_* | export_roundtrip) echo 65536 ;;
        *) echo 4096 ;;
    esac
}
dict() {
    case "$1" in
        log | ndjson | rpc_call | import_* | export_roundtrip | mcp_result | acp_mcp_servers | acp_params) echo "${json[@]}" ;;
        apply_patch) echo -dict=fuzz/dict/patch.dict ;;
    esac
}

# Files the targets write (Logs, imports, a daemon's home) go to tmpfs when there is one.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    scratch=$(mktemp -d /dev/shm/agentd-fuzz.XXXXXX)
else
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/agentd-fuzz.XXXXXX")
fi
trap 'rm -rf "$scratch"' EXIT
export AGENTD_FUZZ_SCRATCH="$scratch"
# The bundled SQLite's C code is instrumented too, and two same-named static arrays in
# it read as a one-definition-rule violation at start-up.
export ASAN_OPTIONS="detect_odr_violation=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
mkdir -p "$work/logs"

failed=()
summary=()
for t in $targets; do
    mkdir -p "$work/corpus/$t" "fuzz/artifacts/$t"
    log="$work/logs/$t.log"
    set +e
    # The first directory gets what the run finds; the committed corpus is only read.
    # shellcheck disable=SC2046
    "$bin/$t" -max_total_time="$secs" -timeout="$timeout" -rss_limit_mb=2048 \
        -max_len="$(max_len "$t")" $(dict "$t") -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$t/" \
        "$work/corpus/$t" "fuzz/corpus/$t" $(seeds "$t") >"$log" 2>&1
    rc=$?
    set -e
    status=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$status")
    if [ "$rc" -eq 0 ]; then
        result=ok
    else
        result="FAILED (exit $rc)"
        failed+=("$t")
        echo "fuzz: $t failed; the end of its log ($log):"
        tail -n 60 "$log"
        ls -l "fuzz/artifacts/$t/"
    fi
    line=$(printf '%-14s execs %-10s exec/s %-8s cov: %-6s ft: %-7s corpus %-6s %s' \
        "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result")
    echo "fuzz: $line"
    summary+=("$line")
done

echo "fuzz: ${secs} s per target; done in $(( $(date +%s) - start )) s including install and build"
printf '  %s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (reproducers under fuzz/artifacts/; docs/fuzzing.md: Reproduce)" >&2
    exit 1
fi
