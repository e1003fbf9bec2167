#!/usr/bin/env bash
# PostgreSQL server binaries for the database store's tests (tests/src/pg.rs starts a
# private server from them: initdb + pg_ctl in a temp dir, Unix socket only). Debian's
# `postgresql` package is installed when no initdb is found on PATH or under
# /usr/lib/postgresql/*/bin, where Debian keeps it. The tests run the server as the
# package's `postgres` user (else `nobody`) when CI runs as root, which they check too.
set -euo pipefail

find_initdb() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    done
    command -v initdb >/dev/null && { dirname "$(command -v initdb)"; return 0; }
    return 1
}

if ! bin=$(find_initdb); then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "postgres.sh: initdb not found: install Debian's postgresql package" >&2
        exit 1
    fi
    bin=$(find_initdb) || { echo "postgres.sh: initdb still missing after the install" >&2; exit 1; }
fi
# The package starts a cluster of its own; the tests never use it.
echo "postgres.sh: server binaries in $bin ($("$bin/postgres" --version))"
