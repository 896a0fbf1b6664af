"""benchmarks/learner_throughput.py on a tiny checkpoint: the update runs on synthetic turns and is timed."""

import json
import sys

from bench_scripts import load_script
from checkpoints import tiny_checkpoint


def run_script(tmp_path, monkeypatch, *options: str) -> dict:  # noqa: ANN001
    """benchmarks/learner_throughput.py on a tiny checkpoint, 2 tasks x 4 turns, one timed update."""
    model = tiny_checkpoint(tmp_path / "model")
    out = tmp_path / "learner.json"
    sets = [f"policies.default.path={model}", "policies.default.device=cpu", "policies.default.generation=hf"]
    sets += ["policies.default.dtype=float32", "run.threads=1"]
    argv = [
        "learner_throughput",
        "--tasks",
        "2",
        "--group",
        "4",
        "--updates",
        "1",
        "--out",
        str(out),
        *options,
    ]
    monkeypatch.setattr(sys, "argv", argv + [a for s in sets for a in ("--set", s)])
    load_script("learner_throughput").main()
    return json.loads(out.read_text())


def test_the_update_of_synthetic_turns_is_measured(tmp_path, monkeypatch):
    result = run_script(tmp_path, monkeypatch)
    warm_up, timed = result["updates"]
    # rewards vary within each group, so every turn is learned from: 8 turns of 160 + 48 tokens, 2 epochs
    assert timed["turns"] == 8 and timed["learner_tokens"] == 2 * 8 * (160 + 48)
    assert result["tokens_per_s"] == timed["learner_tokens"] / timed["seconds"] > 0


def test_micro_batches_cut_by_length_are_compared_on_the_same_turns(tmp_path, monkeypatch):
    options = ["--prompt-tokens", "40", "--vary-prompts", "--compare-micro-batch-tokens", "200"]
    result = run_script(tmp_path, monkeypatch, *options)
    timed = result["updates"][1]
    # 8 turns of 10 to 40 prompt tokens + 48, 2 epochs: between all short and all long
    assert 2 * 8 * (10 + 48) < timed["learner_tokens"] < 2 * 8 * (40 + 48)
    compared = result["micro_batch_tokens"]
    assert compared["n"] == 200 and compared["seconds_plain"] > 0 and compared["seconds_by_length"] > 0
    assert compared["speedup"] == compared["seconds_plain"] / compared["seconds_by_length"]
