#!/usr/bin/env bash
# One command: set up, then train the main job (the test-driven team: Planner, Tester, Coder on the built-in
# programming tasks, the brief's examples and the Tester's tests run on every code version, with the
# embedded tiny model, on CPU). Extra arguments go to `teamrl train`.
set -euo pipefail
cd "$(dirname "$0")/.."
TEAMRL_SETUP=run bash scripts/setup.sh   # what the run needs; the test command adds the test tools
exec .venv/bin/teamrl train examples/test_driven.yaml "$@"
