"""The town's model judge (issue 20): a tiny Llama built here, saved as a checkpoint and asked yes or no about
transcripts; it stays frozen through calibration, keeps the question when a transcript is cut, and the monitor
catches it when it changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from teamrl.policies.tiny import TinyModelConfig, build_tiny_model, train_tokenizer
from teamrl.world.judge import (
    DEFAULT_PROMPT,
    JudgeMonitor,
    ModelJudge,
    RuleJudge,
    calibrate,
    load_anchors,
    make_judge,
)

HEAD, TAIL = DEFAULT_PROMPT.split("{transcript}")


@pytest.fixture(scope="module")
def anchors() -> list[dict[str, Any]]:
    return load_anchors()


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, anchors: list[dict[str, Any]]) -> Path:
    """A tiny untrained Llama and its tokenizer (which knows " yes" and " no"), saved as a checkpoint."""
    texts = [a["transcript"] for a in anchors[::4]] + [DEFAULT_PROMPT, " yes no"]
    tokenizer = train_tokenizer(texts, vocab_size=400)
    cfg = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=1024)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_tiny_model(cfg, tokenizer)
    path = tmp_path_factory.mktemp("judge_lm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_scores_are_probabilities_cached_and_the_same_from_a_path_or_a_pair(
    checkpoint: Path, anchors: list[dict[str, Any]]
) -> None:
    judge = ModelJudge(checkpoint)
    scores = [judge(a["transcript"]) for a in anchors]
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    assert len(judge.cache) == len({a["transcript"] for a in anchors})
    assert [judge(a["transcript"]) for a in anchors] == scores
    judge.cache.clear()
    assert [judge(a["transcript"]) for a in anchors] == scores  # the forward pass itself is repeatable
    pair = ModelJudge((judge.model, judge.tokenizer))
    assert [pair(a["transcript"]) for a in anchors] == pytest.approx(scores, abs=1e-6)


def test_calibration_never_trains_the_judge(checkpoint: Path, anchors: list[dict[str, Any]]) -> None:
    judge = ModelJudge(checkpoint)
    before = {name: p.detach().clone() for name, p in judge.model.named_parameters()}
    calibrate(judge, anchors)
    judge.cache.clear()
    calibrate(judge, anchors)
    assert not judge.model.training
    for name, p in judge.model.named_parameters():
        assert torch.equal(p, before[name]), name
        assert not p.requires_grad and p.grad is None, name


def test_a_long_transcript_keeps_its_end_and_the_question(
    checkpoint: Path, anchors: list[dict[str, Any]]
) -> None:
    judge = ModelJudge(checkpoint, max_tokens=256)
    long = "\n".join([anchors[0]["transcript"]] * 200)
    prompt = judge.prompt_for(long)
    assert prompt.startswith(HEAD) and prompt.endswith(TAIL)  # the question at the end stays
    kept = prompt[len(HEAD) : len(prompt) - len(TAIL)]
    assert long.endswith(kept) and 0 < len(kept) < len(long)
    assert len(judge.tokenizer(kept, add_special_tokens=False)["input_ids"]) <= 256
    assert 0.0 <= judge(long) <= 1.0
    short = ModelJudge(checkpoint, max_tokens=4096)
    assert short.prompt_for(anchors[0]["transcript"]) == DEFAULT_PROMPT.format(
        transcript=anchors[0]["transcript"]
    )


def test_the_monitor_catches_a_model_judge_that_changed(
    checkpoint: Path, anchors: list[dict[str, Any]]
) -> None:
    judge = ModelJudge(checkpoint)
    monitor = JudgeMonitor(judge, anchors, threshold=0.0001)
    monitor.check(0)
    judge.cache.clear()
    assert not monitor.check(1)["drifted"] and not monitor.drifted
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        weight = judge.model.lm_head.weight
        weight.add_(0.5 * torch.randn_like(weight))
    judge.cache.clear()
    row = monitor.check(2)
    assert row["drifted"] and monitor.drifted
    assert max(row["drift"], row["auc_drop"]) > 10 * monitor.threshold  # far beyond the threshold
    assert "judge drifted at step 2" in monitor.message()


def test_make_judge_by_name_or_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    rule, noisy = make_judge("rule"), make_judge("rule_noisy", seed=1)
    assert isinstance(rule, RuleJudge) and rule.noise == 0.0
    assert isinstance(noisy, RuleJudge) and noisy.noise > 0.0 and noisy.seed == 2
    assert isinstance(make_judge(str(checkpoint)), ModelJudge)
    for bad in ("rules", str(tmp_path / "missing")):
        with pytest.raises(ValueError, match="rule, rule_noisy, or a directory of a causal LM checkpoint"):
            make_judge(bad)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="no such judge or directory"):
        make_judge(str(tmp_path / "file"))


def test_answers_with_the_same_first_token_are_refused(checkpoint: Path) -> None:
    judge = ModelJudge(checkpoint)
    first = judge.tokenizer(" yes!", add_special_tokens=False)["input_ids"][0]
    assert first == judge.yes_id  # " yes!" begins with the token of " yes"
    with pytest.raises(ValueError, match="begin with the same token"):
        ModelJudge((judge.model, judge.tokenizer), yes=" yes", no=" yes!")
    for prompt in ("Is it plausible?", "{transcript} by {author}?"):
        with pytest.raises(ValueError, match=r"must contain \{transcript\} and no other field"):
            ModelJudge((judge.model, judge.tokenizer), prompt=prompt)
