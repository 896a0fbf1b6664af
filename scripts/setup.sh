#!/usr/bin/env bash
# Set up teamrl in ./.venv: torch first (the pinned CPU build), then the package and its test tools,
# then bubblewrap for the code sandbox and headless Chromium for the report's browser test where the
# machine can install them. Safe to run again. TEAMRL_SETUP=run (scripts/quickstart.sh) installs only what
# a training run needs: no test tools, no Chromium (about half a minute less on a fresh machine); the test
# command adds them later.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${TEAMRL_SETUP:-dev}
if [ "$MODE" != dev ] && [ "$MODE" != run ]; then
    echo "setup: TEAMRL_SETUP=$MODE: expected 'dev' (the default: the package and its test tools) or 'run'" >&2
    exit 2
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# pip byte-compiles what it installs on one core; the packages are compiled once at the end instead, on
# all cores (the same .pyc files: 20 s less of a fresh run-mode setup on 2 cores, 67 s -> 47 s)
PIP=".venv/bin/python -m pip"
INSTALL="$PIP install -q --no-compile"
COMPILE=  # set once anything is installed
MARKER=   # the install marker to write once compiled
export PIP_DISABLE_PIP_VERSION_CHECK=1

# torch before anything that depends on it, so no other build of it is pulled in.
TORCH_VERSION=${TEAMRL_TORCH:-2.13.0}
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    $INSTALL "torch==$TORCH_VERSION"
    COMPILE=1
fi
# a marker newer than pyproject.toml: that install is current (the dev one covers a run's needs too)
current() { [ -e "$1" ] && ! [ pyproject.toml -nt "$1" ]; }
if [ "$MODE" = run ]; then
    if ! .venv/bin/python -c "import teamrl" 2>/dev/null \
        || ! { current .venv/.teamrl-installed || current .venv/.teamrl-installed-run; }; then
        $INSTALL -e .
        COMPILE=1 MARKER=.venv/.teamrl-installed-run
    fi
elif ! .venv/bin/python -c "import teamrl, pytest, ruff" 2>/dev/null || ! current .venv/.teamrl-installed; then
    $INSTALL -e ".[dev]"
    COMPILE=1 MARKER=.venv/.teamrl-installed
fi
if [ -n "$COMPILE" ]; then
    # what pip would have compiled (files that fail to compile are skipped, as pip skips them); the marker
    # only then, so that an interrupted set-up compiles again
    .venv/bin/python -m compileall -q -j 0 \
        "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
    [ -z "$MARKER" ] || touch "$MARKER"
fi

# The sandbox uses bubblewrap where available and falls back (with a warning) where not.
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
            || echo "setup: could not install bubblewrap; the sandbox will use its rlimits fallback" >&2
    else
        echo "setup: bubblewrap not found; install it (e.g. apt-get install bubblewrap) for full isolation" >&2
    fi
fi

# tests/test_report.py opens the HTML report in headless Chromium (driven by selenium via chromedriver).
if [ "$MODE" = dev ] && { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
            >/dev/null 2>&1 \
            || echo "setup: could not install chromium + chromium-driver; the report's browser test will fail" >&2
    else
        echo "setup: chromium/chromedriver not found; install them (apt-get install chromium chromium-driver)" \
            "for the report's browser test" >&2
    fi
fi
