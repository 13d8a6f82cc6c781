#!/usr/bin/env bash
# posenc's entry points on a fresh machine with Python >= 3.11 and pip.
#
#   ./run.sh serve [ARGS]   start the service on the built-in default model (python -m service ARGS)
#   ./run.sh test  [ARGS]   scripts/check (lock, format, lint, types); without ARGS also
#                           scripts/wheel_check (the built wheel in a fresh venv) and then the
#                           whole suite with its coverage report; with ARGS, pytest ARGS.
#                           Both run on every core (pytest-xdist, see pytest_workers below);
#                           ./run.sh test -m "not slow" is the fast lane
#   ./run.sh fuzz  [ARGS]   the exploratory lane: every hypothesis test with new examples from a
#                           seed it prints (POSENC_FUZZ_SEED=N replays it), 5x the examples
#                           (POSENC_FUZZ_SCALE); ARGS as for pytest, e.g. a test file
#   ./run.sh bench [ARGS]   the loopback benchmark (python -m bench ARGS)
#   ./run.sh lock [--keep]  refresh the lock, requirements/*.txt, from pyproject.toml (scripts/lock.py)
#   ./run.sh newest [ARGS]  the parity tests against the newest transformers and FastAPI, in .venv-newest
#
# Each command creates ./.venv when it is missing and installs into it exactly what the lock pins,
# every file checked against the lock's sha256 (--require-hashes): requirements/service.txt for
# serve, requirements/test.txt for test and bench (torch is pinned there too, with the hashes of
# the local CPU build where one is on disk and of PyPI's files), then posenc itself without
# dependencies. A stamp keyed on the lock file skips the install next time; a changed lock
# installs again (an older stamp is removed).
set -euo pipefail
cd "$(dirname "$0")"

VENV=${POSENC_VENV:-.venv}
PYTHON=${PYTHON:-python3}

ensure_env() {  # $1: the lock file to install (requirements/service.txt or requirements/test.txt)
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
    fi
    local py="$VENV/bin/python"
    # "hashed": the install mode below; a venv installed before it is installed again once
    local name stamp
    name=$(basename "$1" .txt)
    stamp="$VENV/.posenc-$name-hashed-$(cat "$1" pyproject.toml | sha1sum | cut -c1-12)"
    if [ ! -f "$stamp" ]; then
        # torch first and alone (scripts/install_torch): the local CPU build where the machine
        # has one, else the index's build and its CUDA libraries; then the rest, --no-deps (the
        # lock is the whole closure)
        scripts/install_torch "$py" "$1"
        "$py" -m pip install -q --require-hashes --no-deps -r "$1"
        # compat: the clone's root goes on sys.path (a .pth), so a script run from the clone's
        # parent folder, which sees the clone folder itself as a namespace package "posenc",
        # still imports posenc/ (a regular package wins over a namespace one; setuptools' default
        # finder only runs after the namespace one is found)
        "$py" -m pip install -q --no-deps --no-build-isolation -e . --config-settings editable_mode=compat
        rm -f "$VENV"/.posenc-"$name"-*
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

pytest_workers() {  # ARGS: pytest's; prints the pytest-xdist options to add to them
    # one worker a core (nproc: the cores this process may use), or POSENC_TEST_WORKERS of them
    # (0: one process, no xdist); none where ARGS choose themselves or step into a debugger;
    # --dist worksteal: a worker that runs out takes half the queue of the other, so that long
    # tests (the sweeps, the servers) do not leave one core idle at the end
    local arg
    for arg in "$@"; do
        case $arg in
            -n | -n* | --numprocesses* | --dist* | no:xdist | --pdb | --trace | --sw | --stepwise) return 0 ;;
        esac
    done
    local n=${POSENC_TEST_WORKERS:-$(nproc)}
    [ "$n" -gt 1 ] && echo "-n $n --dist worksteal"
    return 0
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    serve)
        ensure_env requirements/service.txt  # the client extra too: the README's client example runs here
        exec "$VENV/bin/python" -m service "$@"
        ;;
    test)
        ensure_env requirements/test.txt
        ensure_chromium
        ensure_nginx
        # The suite's processes (two workers and the servers and commands they start) each
        # import posenc, service and the tests: with their bytecode written once (__pycache__,
        # git-ignored; the wheel takes only .py and its package data), a process skips compiling
        # them, about a second each. A machine with PYTHONDONTWRITEBYTECODE set compiled them in
        # every process, and pytest rewrote every test module's asserts in every worker.
        unset PYTHONDONTWRITEBYTECODE
        if [ $# -eq 0 ]; then  # the whole suite (CI): the package as users install it, too,
            # and the coverage of posenc and service (in the test processes, the workers' data
            # combined by pytest-cov; [tool.coverage] in pyproject.toml). scripts/wheel_check
            # (builds and pip installs, mostly one process) runs beside scripts/check (mypy, one
            # process), its output shown when it ends
            local_log=$(mktemp "${TMPDIR:-/tmp}/posenc-wheel-check.XXXXXX")
            PYTHON="$VENV/bin/python" scripts/wheel_check >"$local_log" 2>&1 &
            wheel_pid=$!
            trap 'kill "$wheel_pid" 2>/dev/null; rm -f "$local_log"' EXIT  # check failed: stop it
            PYTHON="$VENV/bin/python" scripts/check  # the lock, ruff format --check, ruff check, mypy
            wheel_rc=0
            wait "$wheel_pid" || wheel_rc=$?
            trap - EXIT
            cat "$local_log"
            rm -f "$local_log"
            [ "$wheel_rc" = 0 ] || { echo "run.sh: scripts/wheel_check failed ($wheel_rc)" >&2; exit "$wheel_rc"; }
            # shellcheck disable=SC2046  # the options, word by word
            exec "$VENV/bin/python" -m pytest $(pytest_workers) --cov=posenc --cov=service --cov-report=term
        fi
        PYTHON="$VENV/bin/python" scripts/check  # the lock, ruff format --check, ruff check, mypy
        # shellcheck disable=SC2046
        exec "$VENV/bin/python" -m pytest $(pytest_workers "$@") "$@"
        ;;
    fuzz)
        ensure_env requirements/test.txt
        POSENC_FUZZ=1 exec "$VENV/bin/python" -m pytest -p no:cacheprovider -m hypothesis "$@"
        ;;
    bench)
        ensure_env requirements/test.txt
        exec "$VENV/bin/python" -m bench "$@"
        ;;
    lock)
        ensure_env requirements/test.txt  # pip-tools is in the lock's dev group
        exec "$VENV/bin/python" scripts/lock.py "$@"
        ;;
    newest)
        # The lane for what comes next (not CI): the lock, then the newest transformers, tokenizers
        # and FastAPI the registry has, and the parity and HTTP tests on them, so that an upstream
        # change shows up as a named failure before it reaches the lock.
        VENV=${POSENC_NEWEST_VENV:-.venv-newest}
        ensure_env requirements/test.txt
        "$VENV/bin/python" -m pip install -q --upgrade transformers tokenizers fastapi starlette pydantic
        "$VENV/bin/python" -m pip list 2>/dev/null | grep -i -E '^(transformers|tokenizers|fastapi|starlette|pydantic) '
        exec "$VENV/bin/python" -m pytest -m "not slow" tests/lib tests/service "$@"
        ;;
    *)
        echo "usage: ./run.sh serve|test|fuzz|bench|lock|newest [ARGS]" >&2
        exit 2
        ;;
esac
