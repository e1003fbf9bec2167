#!/usr/bin/env bash
# The command sandbox's hostile suite (tests/tests/sandbox.rs, with its sandboxed MCP
# servers and the no-provider-key environment check of MCP servers) again as an
# unprivileged user: the main test pass runs it as root (CI's user). Needs git (installed from Debian
# when missing). The built binaries are copied into a temp dir the user owns, named by
# AGENTD_TEST_BIN_DIR; the suite's files outside /tmp go under AGENTD_SANDBOX_TEST_DIR.
#   bash .ci/sandbox.sh          # build, then run as the user `agentd-sbx` (created) or nobody
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v git >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >/dev/null
    else
        echo "sandbox.sh: git not found: install it" >&2
        exit 1
    fi
fi

cargo build -p agentd -p agentctl -p agentd-tests -p agentd-mcp --bins
test_bin=$(cargo test -p agentd-tests --test sandbox --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | grep '/deps/sandbox-' | tail -1)
[ -x "$test_bin" ] || { echo "sandbox.sh: test binary not found" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then
    echo "sandbox.sh: already unprivileged; running the suite as $(id -un)"
    exec "$test_bin" --test-threads=2
fi

user=agentd-sbx
if ! id "$user" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$user" 2>/dev/null || user=nobody
fi
# Not under /tmp: every command gets a private /tmp, which would hide the binaries.
dir=$(mktemp -d /var/tmp/agentd-sbx-ci.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/bin" "$dir/work" "$dir/home"
profile_dir=$(dirname "$(dirname "$test_bin")")
cp "$profile_dir/agentd" "$profile_dir/agentctl" "$profile_dir/sandbox-probe" \
    "$profile_dir/agentd-mcp-fake" "$test_bin" "$dir/bin/"
chown -R "$user" "$dir"
chmod 0755 "$dir" "$dir/bin"
echo "sandbox.sh: running the suite as $user ($(id "$user"))"
runuser -u "$user" -- env -i PATH="$PATH" HOME="$dir/home" TMPDIR=/tmp RUST_BACKTRACE=1 \
    AGENTD_TEST_BIN_DIR="$dir/bin" AGENTD_SANDBOX_TEST_DIR="$dir/work" \
    "$dir/bin/$(basename "$test_bin")" --test-threads=2 "$@"
