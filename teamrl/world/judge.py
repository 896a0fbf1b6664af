"""Judges of what has no ground truth (issue 20): how plausible an episode of the town reads as social
behaviour. A judge is never a policy being trained; it is checked against a fixed set of anchor transcripts
(good and bad, shipped as data) at every evaluation, and a run whose judge drifts says so.

* :class:`RuleJudge`: a transparent judge that reads a transcript's lines: the share of actions that could
  happen, conversations that are answered (the partner talks back within two ticks), variety of partners
  and topics, and no chatter (one pair talking tick after tick). ``noise`` (seeded per transcript) makes
  a second, imperfect judge.
* :func:`calibrate`: a judge on the anchors: its scores on the good and the bad ones, and how often it
  ranks a good one above a bad one (the AUC).
* :class:`JudgeMonitor`: calibrates at every evaluation, keeps the first as the reference and flags drift:
  the mean anchor score moved by more than ``threshold``, or the AUC fell by more than ``threshold``.
* :func:`agreement`: two judges on the same transcripts: rank correlation (Spearman) and mean absolute
  difference, reported beside the judged objective.
* :class:`ModelJudge`: a frozen causal language model asked whether a transcript is plausible; its score is
  P(yes) / (P(yes) + P(no)) of the next token after the prompt. It is loaded in eval mode with gradients
  off and never trained, so the monitor's drift check covers it like any other judge.
* :func:`make_judge`: a judge by name: ``rule``, ``rule_noisy`` (a second, imperfect rule judge) or the
  directory of a causal LM checkpoint (a :class:`ModelJudge`).

:func:`make_anchors` builds the anchor set from the town itself: good transcripts are episodes of the
scripted agents (each follows its plan), bad ones episodes of random agents and of chatterers (two agents
talking to each other every tick); ``teamrl/world/anchors.json`` is ``make_anchors()`` as shipped.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from teamrl.world.town import PLACES, TOPICS, Action, Town, read_line, scripted_action

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Judge = Callable[[str], float]  # transcript -> plausibility in [0, 1]
ANCHORS = Path(__file__).with_name("anchors.json")
JUDGE_CHOICES = "rule, rule_noisy, or a directory of a causal LM checkpoint"
DEFAULT_PROMPT = (
    "Below is a day in a small town, one line per action of a person.\n\n{transcript}\n\n"
    "Question: does this read like the plausible social behaviour of real people? Answer yes or no.\n"
    "Answer:"
)


@dataclass
class RuleJudge:
    """See the module. Weights of the four features; ``noise``: the sd of a seeded perturbation."""

    valid: float = 0.4
    answered: float = 0.25
    variety: float = 0.2
    no_chatter: float = 0.15
    noise: float = 0.0
    seed: int = 0

    def __call__(self, transcript: str) -> float:
        lines = [line for line in transcript.splitlines() if line.strip()]
        if not lines:
            return 0.0
        valid = 1.0 - sum(line.endswith("(cannot)") for line in lines) / len(lines)
        read = [x for x in map(read_line, lines) if x is not None and x.valid]
        talks = [(x.tick, x.agent, *x.talk) for x in read if x.talk]
        if talks:
            said = {(t, a, b) for t, a, b, _ in talks}
            answered = sum(any((t + d, b, a) in said for d in (0, 1, 2)) for t, a, b, _ in talks) / len(talks)
            pairs = {(a, b) for _, a, b, _ in talks}
            topics = {topic for *_, topic in talks}
            variety = min(1.0, len(pairs) / max(1.0, len(talks) / 3)) * 0.5 + 0.5 * len(topics) / len(TOPICS)
            repeats = sum((t - 1, a, b) in said and (t - 2, a, b) in said for t, a, b, _ in talks)
            no_chatter = 1.0 - repeats / len(talks)
        else:
            answered, variety, no_chatter = 0.0, 0.0, 1.0
        score = (
            self.valid * valid
            + self.answered * answered
            + self.variety * variety
            + self.no_chatter * no_chatter
        )
        score /= self.valid + self.answered + self.variety + self.no_chatter
        if self.noise:
            rng = random.Random(f"{self.seed}:{transcript}")
            score += rng.gauss(0.0, self.noise)
        return float(min(1.0, max(0.0, score)))


class ModelJudge:
    """A frozen causal LM as a judge (see the module); the judge is never a policy being trained.

    ``model``: a checkpoint directory (or hub name) for ``from_pretrained``, or a built (model, tokenizer)
    pair, which is frozen in place. ``prompt`` holds ``{transcript}``; a transcript longer than
    ``max_tokens`` tokens keeps its last ``max_tokens``, so the question after it stays. Scores are cached
    per transcript.
    """

    def __init__(
        self,
        model: str | Path | tuple[PreTrainedModel, PreTrainedTokenizerBase],
        prompt: str = DEFAULT_PROMPT,
        yes: str = " yes",
        no: str = " no",
        max_tokens: int = 512,
        device: str = "cpu",
    ) -> None:
        try:
            prompt.format(transcript="")
            ok = "{transcript}" in prompt
        except (KeyError, IndexError, ValueError):
            ok = False
        if not ok:
            raise ValueError(
                f"the judge's prompt must contain {{transcript}} and no other field, got {prompt!r}"
            )
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if isinstance(model, tuple):
            self.model, self.tokenizer = model
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.model = AutoModelForCausalLM.from_pretrained(model)
            self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model.to(device)  # type: ignore[arg-type]  # transformers' stub of the wrapped .to wants the model
        self.model.eval().requires_grad_(False)
        self.prompt, self.max_tokens, self.device = prompt, max_tokens, device
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(positions, int):  # the prompt around the transcript must fit the model's positions too
            frame = len(self.tokenizer(prompt.format(transcript=""))["input_ids"])
            if positions - frame < 1:
                raise ValueError(
                    f"the judge's prompt takes {frame} tokens, more than the model's {positions} positions"
                )
            self.max_tokens = min(max_tokens, positions - frame)
        self.yes_id, self.no_id = self._first_id(yes), self._first_id(no)
        if self.yes_id == self.no_id:
            raise ValueError(
                f"yes={yes!r} and no={no!r} begin with the same token (id {self.yes_id}) under the judge's "
                "tokenizer, so it could not tell them apart: choose answers whose first tokens differ"
            )
        self.cache: dict[str, float] = {}

    def _first_id(self, word: str) -> int:
        ids = self.tokenizer(word, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"the answer {word!r} encodes to no token")
        return int(ids[0])

    def _tail(self, transcript: str) -> str:
        """The end of ``transcript`` that fits in ``max_tokens`` tokens."""
        tok = self.tokenizer
        while True:
            enc = tok(transcript, add_special_tokens=False, return_offsets_mapping=tok.is_fast)
            ids = enc["input_ids"]
            if len(ids) <= self.max_tokens:
                return transcript
            if not tok.is_fast:  # no character offsets: decode the kept tokens
                return str(tok.decode(ids[-self.max_tokens :]))
            # a cut inside a word may tokenize into more pieces than before, hence the loop
            transcript = transcript[max(1, enc["offset_mapping"][-self.max_tokens][0]) :]

    def prompt_for(self, transcript: str) -> str:
        """The prompt the model reads for ``transcript`` (its end, if too long)."""
        return self.prompt.format(transcript=self._tail(transcript))

    def __call__(self, transcript: str) -> float:
        if transcript not in self.cache:
            import torch

            inputs = self.tokenizer(self.prompt_for(transcript), return_tensors="pt").to(self.device)
            with torch.no_grad():
                logits = self.model(**inputs).logits[0, -1]
            pair = logits[[self.yes_id, self.no_id]].float()
            self.cache[transcript] = float(torch.softmax(pair, dim=0)[0])  # = P(yes) / (P(yes) + P(no))
        return self.cache[transcript]


def make_judge(spec: str, seed: int = 0) -> Judge:
    """``rule``, ``rule_noisy`` (a second, imperfect judge) or a checkpoint directory (a ModelJudge)."""
    if spec == "rule":
        return RuleJudge()
    if spec == "rule_noisy":
        return RuleJudge(noise=0.1, seed=seed + 1)
    if not Path(spec).is_dir():
        raise ValueError(f"judge {spec!r}: no such judge or directory; choose {JUDGE_CHOICES}")
    return ModelJudge(spec)


@dataclass
class Calibration:
    mean_good: float
    mean_bad: float
    auc: float  # P(score of a good anchor > score of a bad one), ties half

    @property
    def mean(self) -> float:
        return (self.mean_good + self.mean_bad) / 2


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(a score of ``positive`` > one of ``negative``), ties half (the ROC AUC); NaN without both."""
    if not positive or not negative:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def calibrate(judge: Judge, anchors: Sequence[dict[str, Any]]) -> Calibration:
    """``judge`` on the anchors (``{"transcript": ..., "label": "good" | "bad"}``)."""
    good = [judge(a["transcript"]) for a in anchors if a["label"] == "good"]
    bad = [judge(a["transcript"]) for a in anchors if a["label"] == "bad"]
    if not good or not bad:
        raise ValueError("the anchors need good and bad transcripts")
    return Calibration(float(np.mean(good)), float(np.mean(bad)), auc(good, bad))


@dataclass
class JudgeMonitor:
    """Calibration at every evaluation against the first one (see the module)."""

    judge: Judge
    anchors: Sequence[dict[str, Any]]
    threshold: float = 0.05
    history: list[dict[str, Any]] = field(default_factory=list)

    def check(self, step: int) -> dict[str, Any]:
        c = calibrate(self.judge, self.anchors)
        first = self.history[0] if self.history else None
        drift = 0.0 if first is None else abs(c.mean - first["anchor_mean"])
        auc_drop = 0.0 if first is None else max(0.0, first["auc"] - c.auc)
        row = {
            "step": step,
            "anchor_mean": c.mean,
            "mean_good": c.mean_good,
            "mean_bad": c.mean_bad,
            "auc": c.auc,
            "drift": drift,
            "auc_drop": auc_drop,
            "drifted": drift > self.threshold or auc_drop > self.threshold,
        }
        self.history.append(row)
        return row

    @property
    def drifted(self) -> bool:
        return any(r["drifted"] for r in self.history)

    def message(self) -> str:
        bad = [r for r in self.history if r["drifted"]]
        if not bad:
            return f"judge stable on {len(self.anchors)} anchors (threshold {self.threshold})"
        r = bad[0]
        return (
            f"judge drifted at step {r['step']}: anchor mean moved {r['drift']:.3f}, AUC fell "
            f"{r['auc_drop']:.3f} (threshold {self.threshold}); judged scores after it are not comparable "
            "with those before"
        )


def agreement(a: Judge, b: Judge, transcripts: Sequence[str]) -> dict[str, float]:
    """Spearman rank correlation and mean absolute difference of two judges on ``transcripts``."""
    if len(transcripts) < 2:
        raise ValueError("agreement needs at least two transcripts")
    x = np.array([a(t) for t in transcripts])
    y = np.array([b(t) for t in transcripts])
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        rho = float("nan")
    else:
        rho = float(np.corrcoef(rx, ry)[0, 1])
    return {"spearman": rho, "mean_abs_diff": float(np.abs(x - y).mean()), "n": float(len(transcripts))}


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for value in np.unique(x):
        tie = x == value
        ranks[tie] = ranks[tie].mean()
    return ranks


def _episode(kind: str, seed: int, n_agents: int = 4, horizon: int = 12) -> str:
    town = Town(n_agents, horizon, seed=seed)
    rng = np.random.default_rng(seed)
    while not town.over:
        actions = {}
        for i, a in enumerate(town.agents):
            if kind == "scripted":
                actions[a] = scripted_action(town, a, rng)
            elif kind == "chatter" and i < 2:
                actions[a] = Action("talk", to=town.agents[1 - i], topic="weather")
            else:
                actions[a] = _random_action(town, a, rng)
        town.step(actions)
    return town.transcript()


def _random_action(town: Town, agent: str, rng: np.random.Generator) -> Action:
    kind = ["wait", "move", "use", "talk"][int(rng.integers(4))]
    if kind == "move":
        return Action("move", place=PLACES[int(rng.integers(len(PLACES)))])
    if kind == "use":
        return Action("use", obj=["coffee", "bread", "book"][int(rng.integers(3))])
    if kind == "talk":
        others = [o for o in town.agents if o != agent]
        return Action(
            "talk", to=others[int(rng.integers(len(others)))], topic=TOPICS[int(rng.integers(len(TOPICS)))]
        )
    return Action("wait")


def make_anchors(n: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` good anchors (scripted agents) and ``n`` bad ones (random agents and chatterers, alternately)."""
    good = [
        {"label": "good", "source": "scripted", "transcript": _episode("scripted", seed * 1000 + i)}
        for i in range(n)
    ]
    bad = [
        {"label": "bad", "source": kind, "transcript": _episode(kind, seed * 1000 + 500 + i)}
        for i, kind in zip(range(n), ["random", "chatter"] * n, strict=False)
    ]
    return good + bad


def load_anchors(path: str | Path = ANCHORS) -> list[dict[str, Any]]:
    """The shipped anchor transcripts (or another file of the same form); ValueError for a bad file."""
    try:
        data = json.loads(Path(path).read_text())
        anchors = data["anchors"]
        if not all(a["label"] in ("good", "bad") and isinstance(a["transcript"], str) for a in anchors):
            raise ValueError("every anchor needs a label good or bad and a transcript")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"anchor file {path}: {exc}") from None
    return list(anchors)


def write_anchors(path: str | Path = ANCHORS, n: int = 8, seed: int = 0) -> None:
    from teamrl.atomic import atomic_write_text

    data = {"made_by": f"make_anchors(n={n}, seed={seed})", "anchors": make_anchors(n, seed)}
    atomic_write_text(Path(path), json.dumps(data, indent=1))
