#!/usr/bin/env bash
# posenc's entry points on a fresh machine with Python >= 3.11 and pip.
#
#   ./run.sh serve [ARGS]   start the service on the built-in default model (python -m service ARGS)
#   ./run.sh test  [ARGS]   scripts/check (format, lint, types), then the whole suite (pytest ARGS)
#   ./run.sh bench [ARGS]   the loopback benchmark (python -m bench ARGS)
#
# Each command creates ./.venv when it is missing and installs what it needs into it: torch first
# (the local CPU build, torch==2.13.0, where one is on disk; else any torch>=2.4), then posenc
# with the extras that command uses. A stamp keyed on pyproject.toml skips the install next time.
set -euo pipefail
cd "$(dirname "$0")"

VENV=${POSENC_VENV:-.venv}
PYTHON=${PYTHON:-python3}

ensure_env() {  # $1: the pyproject extras to install
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
    fi
    local py="$VENV/bin/python"
    if ! "$py" -c "import torch" >/dev/null 2>&1; then
        "$py" -m pip install -q "torch==2.13.0" || "$py" -m pip install -q "torch>=2.4"
    fi
    local stamp="$VENV/.posenc-$1-$(cat pyproject.toml | sha1sum | cut -c1-12)"
    if [ ! -f "$stamp" ]; then
        "$py" -m pip install -q -e ".[$1]"
        touch "$stamp"
    fi
}

ensure_chromium() {  # the /docs browser test drives Debian's chromium; it skips where there is none
    command -v chromium >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
            || echo "run.sh: could not install chromium; the browser test will be skipped" >&2
    fi
}

ensure_nginx() {  # the failover test runs Debian's nginx in front of two replicas; it skips where there is none
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null) \
            || echo "run.sh: could not install nginx; the failover test will be skipped" >&2
    fi
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    serve)
        ensure_env service,client  # the client extra too: the README's client example runs here
        exec "$VENV/bin/python" -m service "$@"
        ;;
    test)
        ensure_env test
        ensure_chromium
        ensure_nginx
        PYTHON="$VENV/bin/python" scripts/check  # ruff format --check, ruff check, mypy
        exec "$VENV/bin/python" -m pytest "$@"
        ;;
    bench)
        ensure_env test
        exec "$VENV/bin/python" -m bench "$@"
        ;;
    *)
        echo "usage: ./run.sh serve|test|bench [ARGS]" >&2
        exit 2
        ;;
esac
