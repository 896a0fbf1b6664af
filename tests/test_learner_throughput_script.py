"""benchmarks/learner_throughput.py on a tiny checkpoint: the update runs on synthetic turns and is timed."""

import json
import sys

from bench_scripts import load_script
from checkpoints import tiny_checkpoint


def test_the_update_of_synthetic_turns_is_measured(tmp_path, monkeypatch):
    model = tiny_checkpoint(tmp_path / "model")
    out = tmp_path / "learner.json"
    sets = [f"policies.default.path={model}", "policies.default.device=cpu", "policies.default.generation=hf"]
    sets += ["policies.default.dtype=float32", "run.threads=1"]
    argv = ["learner_throughput", "--tasks", "2", "--group", "4", "--updates", "1", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv + [a for s in sets for a in ("--set", s)])
    load_script("learner_throughput").main()
    result = json.loads(out.read_text())
    warm_up, timed = result["updates"]
    # rewards vary within each group, so every turn is learned from: 8 turns of 160 + 48 tokens, 2 epochs
    assert timed["turns"] == 8 and timed["learner_tokens"] == 2 * 8 * (160 + 48)
    assert result["tokens_per_s"] == timed["learner_tokens"] / timed["seconds"] > 0
