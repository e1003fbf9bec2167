#!/usr/bin/env bash
# Service and packaging checks that are not cargo tests (docs/service.md).
# Idempotent; runs after the cargo tests and the quick start, whose release build it
# reuses. `service.sh tools` only installs the systemd tools (before the cargo tests).
#
#  1. tools: Debian's `systemd` (systemd-socket-activate, systemd-analyze) and cargo-deb
#     are installed when missing (cargo-deb compiles from crates.io: a few minutes, once
#     per machine; `--fast` compression keeps packing to seconds of CPU);
#  2. `cargo xtask dist` renders man pages, completions and the packaged user units;
#  3. the packaged units pass `systemd-analyze verify`; the launchd plist, as the
#     template and as `agentctl service install --manager launchd` writes it, parses
#     with python's plistlib and names its Sockets entry;
#  4. `cargo deb` builds the .deb, `dpkg -i` installs it, `agentctl --version` runs from
#     /usr/bin, man pages and completions are where the package says;
#  5. a daemon is started through the installed files: the installed agentd.service's
#     ExecStart under systemd-socket-activate on the installed agentd.socket's path
#     layout, reached by the installed agentctl, then stopped; the activated socket must
#     survive it. Then agentctl's own auto-start from /usr/bin;
#  6. the package is removed again.
#
# `systemctl --user` needs a user manager (a login session), which CI containers lack:
# the real `agentctl service install` is covered by the golden --dry-run tests, and runs
# for real here only when `systemctl --user is-system-running` answers.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
started=$(date +%s)

step() { echo "== service: $*"; }
fail() { echo "service.sh: $*" >&2; exit 1; }

step "tools"
if ! command -v systemd-socket-activate >/dev/null || ! command -v systemd-analyze >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
    else
        fail "systemd-socket-activate / systemd-analyze missing: install Debian's systemd package"
    fi
fi
# `.ci/run` calls `service.sh tools` before the cargo tests, which need systemd's tools.
[ "${1:-}" = tools ] && exit 0
if ! cargo deb --version >/dev/null 2>&1; then
    echo "installing cargo-deb (compiles from crates.io; a few minutes, once)"
    cargo install cargo-deb --locked --quiet
fi
command -v python3 >/dev/null || fail "python3 missing (plist check)"

step "build (release, reused from the quick start) and render dist files"
cargo build --release -p agentd -p agentctl
cargo xtask dist target/dist >/dev/null
dist="$root/target/dist"

tmp=$(mktemp -d)
pkg_installed=0
cleanup() {
    [ -f "$tmp/sa.pid" ] && kill "$(cat "$tmp/sa.pid")" 2>/dev/null || true
    if [ "$pkg_installed" = 1 ]; then dpkg -r agentd >/dev/null 2>&1 || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -m 700 "$tmp/run"

step "systemd-analyze verify (packaged units)"
mkdir "$tmp/units"
sed "s#^ExecStart=/usr/bin/agentd\$#ExecStart=$root/target/release/agentd#" \
    "$dist/systemd/agentd.service" > "$tmp/units/agentd.service"
cp "$dist/systemd/agentd.socket" "$tmp/units/"
out=$(XDG_RUNTIME_DIR="$tmp/run" systemd-analyze verify --man=no --user \
    "$tmp/units/agentd.socket" "$tmp/units/agentd.service" 2>&1) || fail "verify failed: $out"
[ -z "$out" ] || fail "systemd-analyze verify warned: $out"

step "launchd plist parses (plistlib)"
HOME="$tmp/home" XDG_RUNTIME_DIR="$tmp/run" AGENTD_BIN="$root/target/release/agentd" \
    "$root/target/release/agentctl" --json service install --dry-run --manager launchd > "$tmp/launchd.json"
python3 - "$root/packaging/launchd/dev.agentd.plist" "$tmp/launchd.json" <<'PY'
import json, plistlib, sys
template = plistlib.loads(open(sys.argv[1], "rb").read())
plan = json.load(open(sys.argv[2]))
written = [a for a in plan["actions"] if a["action"] == "write"]
assert len(written) == 1, plan
rendered = plistlib.loads(written[0]["content"].encode())
for p in (template, rendered):
    assert p["Label"] == "dev.agentd", p
    listeners = p["Sockets"]["Listeners"]
    assert listeners["SockPathMode"] == 0o600, listeners
    assert listeners["SockPathName"], listeners
    assert p["KeepAlive"] is False, p
assert rendered["Sockets"]["Listeners"]["SockPathName"].startswith("/"), rendered
assert rendered["ProgramArguments"][3].endswith("/agentd"), rendered
assert "/Library/Logs/agentd/" in rendered["StandardErrorPath"], rendered
print("plist ok:", rendered["Sockets"]["Listeners"]["SockPathName"])
PY

step "cargo deb + dpkg -i"
rm -f target/debian/agentd_*.deb
cargo deb -p agentctl --no-build --fast --quiet > "$tmp/deb.log" 2>&1 || fail "cargo deb failed: $(cat "$tmp/deb.log")"
deb=$(ls target/debian/agentd_*.deb)
dpkg-deb --contents "$deb" > "$tmp/contents"
for f in usr/bin/agentd usr/bin/agentctl usr/share/man/man1/agentd.1 usr/share/man/man1/agentctl.1 \
         usr/share/bash-completion/completions/agentctl usr/lib/systemd/user/agentd.socket \
         usr/lib/systemd/user/agentd.service; do
    grep -q "\./$f" "$tmp/contents" || fail "$deb lacks $f"
done
dpkg -i "$deb" >/dev/null
pkg_installed=1
/usr/bin/agentctl --version
/usr/bin/agentd --version
grep -qx "ExecStart=/usr/bin/agentd" /usr/lib/systemd/user/agentd.service \
    || fail "installed agentd.service does not run /usr/bin/agentd"
XDG_RUNTIME_DIR="$tmp/run" systemd-analyze verify --man=no --user \
    /usr/lib/systemd/user/agentd.socket /usr/lib/systemd/user/agentd.service

step "start and stop a daemon through the installed files (socket activation)"
exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/user/agentd.service)
# %t/agentd/agentd.sock, with %t = XDG_RUNTIME_DIR as the user manager sets it.
listen=$(sed -n 's/^ListenStream=//p' /usr/lib/systemd/user/agentd.socket)
sock="${listen/\%t/$tmp/run}"
mkdir -m 700 -p "$(dirname "$sock")"
systemd-socket-activate --listen "$sock" \
    -E AGENTD_HOME="$tmp/home/state" -E AGENTD_CONFIG="$tmp/none.toml" -E XDG_RUNTIME_DIR="$tmp/run" \
    $exec_start > "$tmp/sa.log" 2>&1 &
echo $! > "$tmp/sa.pid"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || fail "systemd-socket-activate did not bind $sock: $(cat "$tmp/sa.log")"
XDG_RUNTIME_DIR="$tmp/run" /usr/bin/agentctl daemon status | tee "$tmp/status"
grep -q "^pid:.*$(cat "$tmp/sa.pid")" "$tmp/status" || fail "the activated agentd did not answer"
XDG_RUNTIME_DIR="$tmp/run" /usr/bin/agentctl daemon stop
wait "$(cat "$tmp/sa.pid")" || fail "agentd exited with an error: $(cat "$tmp/sa.log")"
rm -f "$tmp/sa.pid"
[ -S "$sock" ] || fail "agentd removed the activated socket $sock"

step "agentctl auto-start from /usr/bin"
sock2="$tmp/run2/agentd.sock"
AGENTD_SOCKET="$sock2" AGENTD_HOME="$tmp/home2" AGENTD_CONFIG="$tmp/none.toml" /usr/bin/agentctl daemon start
AGENTD_SOCKET="$sock2" /usr/bin/agentctl daemon stop
[ ! -e "$sock2" ] || fail "a self-bound agentd left its socket behind"

if systemctl --user is-system-running >/dev/null 2>&1; then
    step "real install through the user manager"
    /usr/bin/agentctl service install
    /usr/bin/agentctl service status
    /usr/bin/agentctl service uninstall
else
    step "no systemd user manager here: real install/enable not exercised (golden --dry-run tests cover the plan)"
fi

step "remove the package"
dpkg -r agentd >/dev/null
pkg_installed=0
[ ! -e /usr/bin/agentd ] || fail "dpkg -r left /usr/bin/agentd"
echo "== service: ok in $(( $(date +%s) - started ))s"
