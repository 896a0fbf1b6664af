"""Sessions with a collaborator, and the outer loop that learns the memory policy (issue 19).

A session is ``rounds`` episodes with one collaborator: each round the task policy reads the memory and
proposes one of the candidates, the collaborator accepts or not and reacts, the reaction is distilled into a
note and the memory policy decides what to keep. :func:`reader_choice` is the task policy used here: it
scores each candidate by the notes on its values (likes minus dislikes, each weighted by how often it was
stated) -- the expert a trained proposer role is measured against.

:func:`train_scorer` is the outer loop: REINFORCE on the learned policy's Plackett-Luce rankings, each
decision rewarded with the acceptance over the next ``horizon`` rounds of its session (the task's return
with that memory), the baseline being the batch's mean at the same round (sessions of one batch advance in
lock step, so a decision is compared with decisions made at the same point of other sessions). With a
``checkpoint`` path it saves its whole state after every iteration (atomically: scorer, Adam moments, the
sampling RNG, the curve) and, when the file exists, resumes from it: a run cut anywhere and resumed ends
with the same scorer as one that never stopped (``teamrl memory train-scorer --out S.json`` keeps it
beside ``S.json``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from teamrl.atomic import atomic_write_text
from teamrl.memory.collaborator import Collaborator, Topic, candidates_for, population
from teamrl.memory.policies import FEATURES, Decision, NoteScorer, Policy, make_policy
from teamrl.memory.store import Capacity, Note, distil

Reader = Callable[[list[Note], list[Topic], random.Random], int]


def reader_choice(notes: list[Note], candidates: list[Topic], rng: random.Random) -> int:
    """The candidate whose values the notes favour most (ties drawn with ``rng``)."""
    weight: dict[str, float] = {}
    for n in notes:
        if n.value is not None:
            weight[n.value] = weight.get(n.value, 0.0) + n.sign * n.count
    scores = [sum(weight.get(v, 0.0) for v in c.values()) for c in candidates]
    top = max(scores)
    return rng.choice([i for i, s in enumerate(scores) if s >= top - 1e-9])


@dataclass
class Session:
    accepted: list[float]  # per round, 1.0 when the collaborator accepted the proposal
    memory_sizes: list[int]  # notes kept after each round


def run_session(
    collaborator: Collaborator,
    policy: Policy,
    rounds: int,
    n_candidates: int = 4,
    reader: Reader = reader_choice,
) -> Session:
    """Play ``rounds`` episodes with ``collaborator``; the memory is updated after each."""
    rng = random.Random(f"reader-{collaborator.seed}-{collaborator.index}")
    memory: list[Note] = []
    accepted: list[float] = []
    sizes: list[int] = []
    for r in range(rounds):
        candidates = candidates_for(collaborator.seed, collaborator.index, r, n_candidates)
        choice = reader(memory, candidates, rng)
        reaction = collaborator.react(candidates, choice, r)
        accepted.append(float(reaction.accepted))
        memory = policy(memory, distil(reaction.text, r), r + 1)
        sizes.append(len(memory))
    return Session(accepted, sizes)


def pl_gradient(scorer: NoteScorer, decision: Decision) -> tuple[np.ndarray, float]:
    """d log P(order) / d (weights, stop) of a Plackett-Luce draw over the pool's notes and STOP."""
    s = np.append(scorer.scores(decision.x), scorer.stop)
    feats = np.vstack([decision.x, np.zeros((1, decision.x.shape[1]))])
    is_stop = np.zeros(len(s))
    is_stop[-1] = 1.0
    remaining = list(range(len(s)))
    gw = np.zeros(decision.x.shape[1])
    gs = 0.0
    for pick in decision.order:
        pick = len(s) - 1 if pick == -1 else pick
        logits = s[remaining]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        gw += feats[pick] - p @ feats[remaining]
        gs += is_stop[pick] - p @ is_stop[remaining]
        remaining.remove(pick)
    return gw, gs


def decision_returns(accepted: np.ndarray, horizon: int) -> np.ndarray:
    """[B, R - 1]: the return of the memory decision made after episode r of each session, the mean
    acceptance over episodes r + 1 .. r + horizon (fewer at the end of a session) of ``accepted`` [B, R]."""
    B, R = accepted.shape
    out = np.zeros((B, max(R - 1, 0)))
    for r in range(R - 1):
        out[:, r] = accepted[:, r + 1 : r + 1 + horizon].mean(axis=1)
    return out


@dataclass
class TrainLog:
    iteration: int
    acceptance: float


def scorer_json(scorer: NoteScorer) -> dict[str, float]:
    """The scorer as the JSON the collaborate workflow reads (``workflow.memory.scorer``)."""
    return dict(zip(FEATURES, map(float, scorer.weights), strict=True)) | {"stop": float(scorer.stop)}


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def train_scorer(
    seed: int,
    capacity: Capacity,
    iterations: int = 60,
    batch: int = 32,
    rounds: int = 40,
    horizon: int = 5,
    lr: float = 0.05,
    progress: Callable[[TrainLog], None] | None = None,
    checkpoint: str | Path | None = None,
    **collaborator_kwargs: object,
) -> tuple[NoteScorer, list[TrainLog]]:
    """Learn a :class:`NoteScorer` on the train collaborators of population ``seed`` (fresh ones every
    iteration; never a held-out one). Adam on the REINFORCE gradient; returns the scorer and the curve.
    ``checkpoint``: save the state there after every iteration, and resume from it when it exists (its
    settings must be these, ``iterations`` aside: a finished run can be trained further; ValueError
    otherwise)."""
    scorer = NoteScorer()
    rng = random.Random(f"memory-outer-{seed}")
    n_params = len(scorer.weights) + 1
    m, v = np.zeros(n_params), np.zeros(n_params)
    logs: list[TrainLog] = []
    settings = {
        "seed": seed,
        "capacity": [capacity.entries, capacity.tokens],
        "batch": batch,
        "rounds": rounds,
        "horizon": horizon,
        "lr": lr,
        "collaborators": {k: v for k, v in sorted(collaborator_kwargs.items())},
        "features": list(FEATURES),
    }
    start = 0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        start, scorer, m, v, logs = _resume(path, settings, rng)
    pool = population(seed, "train", max(iterations, start) * batch, **collaborator_kwargs)
    for it in range(start, iterations):
        sessions: list[tuple[Session, list[Decision]]] = []
        for c in pool[it * batch : (it + 1) * batch]:
            record: list[Decision] = []
            policy = make_policy("learned", capacity, scorer, rng, record)
            sessions.append((run_session(c, policy, rounds), record))
        returns = decision_returns(np.asarray([s.accepted for s, _ in sessions]), horizon)
        baseline = returns.mean(axis=0)
        spread = returns.std(axis=0) + 1e-6
        grad = np.zeros(n_params)
        count = 0
        for b, (_, record) in enumerate(sessions):
            for d in record:
                r = d.round - 1  # the decision after episode r
                if r >= rounds - 1:
                    continue
                adv = (returns[b, r] - baseline[r]) / spread[r]
                gw, gs = pl_gradient(scorer, d)
                grad += adv * np.append(gw, gs)
                count += 1
        grad /= max(count, 1)
        # Adam ascent
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        step = lr * (m / (1 - 0.9 ** (it + 1))) / (np.sqrt(v / (1 - 0.999 ** (it + 1))) + 1e-8)
        scorer = NoteScorer(scorer.weights + step[:-1], scorer.stop + float(step[-1]))
        log = TrainLog(it, float(np.mean([np.mean(s.accepted) for s, _ in sessions])))
        logs.append(log)
        if path is not None:
            state = {
                "settings": settings,
                "iteration": it + 1,
                "scorer": scorer_json(scorer),
                "adam": {"m": m.tolist(), "v": v.tolist()},
                "rng": _rng_state(rng),
                "curve": [asdict(x) for x in logs],
            }
            atomic_write_text(path, json.dumps(state))
        if progress is not None:
            progress(log)
    return scorer, logs


def _resume(
    path: Path, settings: dict[str, Any], rng: random.Random
) -> tuple[int, NoteScorer, np.ndarray, np.ndarray, list[TrainLog]]:
    """The state saved at ``path`` (``rng`` set to its draws); ValueError for a damaged file or one
    written with other settings."""
    try:
        state = json.loads(path.read_text())
        saved = state["settings"]
        weights = np.array([float(state["scorer"][f]) for f in FEATURES])
        scorer = NoteScorer(weights, float(state["scorer"]["stop"]))
        m, v = np.array(state["adam"]["m"], dtype=float), np.array(state["adam"]["v"], dtype=float)
        version, internal, gauss = state["rng"]
        rng.setstate((version, tuple(internal), gauss))
        logs = [TrainLog(int(x["iteration"]), float(x["acceptance"])) for x in state["curve"]]
        iteration = int(state["iteration"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"outer-loop checkpoint {path}: cannot read it ({type(exc).__name__}: {exc})"
        ) from None
    wanted = json.loads(json.dumps(settings))  # as JSON has it (tuples as lists)
    differ = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
    if differ:
        raise ValueError(
            f"outer-loop checkpoint {path} was written with other settings ({', '.join(differ)}); use the "
            "same ones, or another path to start afresh"
        )
    return iteration, scorer, m, v, logs


def evaluate_policy(
    name: str,
    seed: int,
    capacity: Capacity,
    n: int = 200,
    rounds: int = 40,
    scorer: NoteScorer | None = None,
    **collaborator_kwargs: object,
) -> np.ndarray:
    """[n, rounds] acceptance of policy ``name`` on ``n`` held-out collaborators of population ``seed``
    (greedy rankings for ``learned``)."""
    out = np.zeros((n, rounds))
    for i, c in enumerate(population(seed, "heldout", n, **collaborator_kwargs)):
        out[i] = run_session(c, make_policy(name, capacity, scorer), rounds).accepted
    return out
