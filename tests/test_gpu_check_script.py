"""benchmarks/gpu_check.sh stops with a clear message where no GPU is visible (here, or with CUDA hidden)."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.sh"


def test_without_a_gpu_the_check_says_so_and_fails() -> None:
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "gpu_check: no CUDA GPU is visible to torch" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
