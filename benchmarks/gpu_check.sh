#!/usr/bin/env bash
# Train a three-role team on a ~0.5B model for a few iterations with vLLM on one GPU and print rollout
# tokens/s, learner tokens/s and peak GPU memory (see benchmarks/gpu_check.py).
#   MODEL=/path/or/hub-id ITERATIONS=3 bash benchmarks/gpu_check.sh [--set key=value ...]
# Exits 2 with a message where no CUDA GPU (or no vLLM) is present.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" benchmarks/gpu_check.py "$@"
