#!/usr/bin/env bash
# The Debian packages the test suite runs for real (a browser, servers), installed only where their
# binary is missing, so `make test` sets up a fresh machine and leaves a prepared one alone. One
# `want BINARY PACKAGE WHY` line per package. Where nothing can be installed (no apt-get, no
# network), it says so and goes on: the tests that need the binary skip, naming it and this script.
set -euo pipefail

missing=()
want() {
    if ! command -v "$1" >/dev/null 2>&1 && [ ! -x "/usr/bin/$1" ]; then
        echo "system-deps: $1 not found: installing Debian's $2 ($3)"
        missing+=("$2")
    fi
}

want chromium chromium "tests/ui/test_browser.py drives headless Chromium through Playwright"
want redis-server redis-server "tests/engine/: the Celery executor's broker (a server the tests start, never a service)"
# Debian keeps PostgreSQL's server binaries (initdb, pg_ctl) off PATH, in /usr/lib/postgresql/<version>/bin.
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    echo "system-deps: initdb not found: installing Debian's postgresql (tests/engine/test_postgres.py starts a server)"
    missing+=("postgresql")
fi

[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: no apt-get here; install ${missing[*]} yourself (the tests that need them skip)" >&2
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"; }; then
    echo "system-deps: could not install ${missing[*]} (the tests that need them skip)" >&2
fi
