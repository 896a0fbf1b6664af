"""Aggregate scores over seeds the way MARL papers should (Agarwal et al. 2021, "Deep RL at the edge of the
statistical precipice", the rliable protocol): the interquartile mean (IQM) beside the mean, each with a
percentile bootstrap confidence interval.

``scores`` is one list per run (a seed), each the returns of that run's evaluation episodes (the same
episode set for every policy compared). The bootstrap is hierarchical: it resamples runs with replacement,
then the episodes of each drawn run, so the interval covers the variation between seeds and between
episodes; with one run it resamples that run's episodes only. The IQM is the mean of the middle half of all
scores pooled (a quarter cut from each end, as ``scipy.stats.trim_mean(x, 0.25)``): robust to a few
outlying episodes or seeds, and less noisy than the median.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Statistic = Callable[[np.ndarray], float]


def iqm(x: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: the mean after cutting ``int(0.25 n)`` scores from each end of the sorted ``x``."""
    a = np.sort(np.asarray(x, dtype=np.float64).ravel())
    if a.size == 0:
        raise ValueError("iqm of no scores")
    cut = int(0.25 * a.size)
    return float(a[cut : a.size - cut].mean())


def mean(x: Sequence[float] | np.ndarray) -> float:
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError("mean of no scores")
    return float(a.mean())


def _runs(scores: Sequence[Sequence[float] | np.ndarray]) -> list[np.ndarray]:
    runs = [np.asarray(r, dtype=np.float64).ravel() for r in scores]
    if not runs or any(r.size == 0 for r in runs):
        raise ValueError("scores: one non-empty list of episode returns per run")
    return runs


def bootstrap_ci(
    scores: Sequence[Sequence[float] | np.ndarray],
    statistic: Statistic = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over the pooled scores: runs resampled with
    replacement, then each drawn run's episodes (see the module)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: between 0 and 1")
    runs = _runs(scores)
    rng = np.random.default_rng(seed)
    values = np.empty(reps)
    for k in range(reps):
        drawn = rng.integers(len(runs), size=len(runs)) if len(runs) > 1 else np.zeros(1, dtype=np.int64)
        pooled = [runs[j][rng.integers(runs[j].size, size=runs[j].size)] for j in drawn]
        values[k] = statistic(np.concatenate(pooled))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def summarize(
    scores: Sequence[Sequence[float] | np.ndarray], reps: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Mean and IQM of the pooled scores, each with its 95% bootstrap interval, and the per-run means."""
    runs = _runs(scores)
    pooled = np.concatenate(runs)
    per_run = [float(r.mean()) for r in runs]
    return {
        "mean": mean(pooled),
        "mean_ci": list(bootstrap_ci(runs, mean, reps, seed=seed)),
        "iqm": iqm(pooled),
        "iqm_ci": list(bootstrap_ci(runs, iqm, reps, seed=seed)),
        "run_means": per_run,
        "std_over_runs": float(np.std(per_run, ddof=1)) if len(runs) > 1 else 0.0,
        "runs": len(runs),
        "episodes": int(pooled.size),
    }
