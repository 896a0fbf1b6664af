#!/usr/bin/env bash
# One command: set up, then train the main job (a Planner/Coder/Reviewer/Tester team on the built-in
# programming tasks with the embedded tiny model, on CPU). Extra arguments go to `teamrl train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/teamrl train examples/pipeline_freeze_rotate.yaml "$@"
