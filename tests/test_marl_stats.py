"""IQM and hierarchical bootstrap intervals over seeds (teamrl.marl.stats, the rliable protocol; issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

from teamrl.marl.stats import bootstrap_ci, iqm, mean, summarize


def test_iqm_is_the_mean_of_the_middle_half() -> None:
    assert iqm([8, 1, 2, 7, 3, 6, 4, 5]) == pytest.approx(4.5)  # cut 2 from each end: 3, 4, 5, 6
    assert iqm([0, 0, 0, 100]) == 0.0  # one outlier of four is cut
    assert iqm([1, 2, 3]) == pytest.approx(2.0)  # int(0.75) = 0 cut: the mean
    assert iqm([[1, 2], [3, 100], [4, 5], [6, 7]]) == pytest.approx(4.5)  # pooled: cut 1, 2 and 7, 100
    with pytest.raises(ValueError, match="no scores"):
        iqm([])


def test_bootstrap_intervals_cover_the_estimate_and_widen_with_seed_variance() -> None:
    rng = np.random.default_rng(0)
    same = [rng.normal(0, 1, 50) for _ in range(3)]
    apart = [r + shift for r, shift in zip(same, (-5, 0, 5), strict=True)]
    for scores in (same, apart):
        for stat in (mean, iqm):
            low, high = bootstrap_ci(scores, stat, reps=500)
            assert low <= stat(np.concatenate(scores)) <= high
    narrow = np.diff(bootstrap_ci(same, mean, reps=500))[0]
    wide = np.diff(bootstrap_ci(apart, mean, reps=500))[0]
    assert wide > 5 * narrow  # the seeds' spread counts, not only the episodes'
    assert bootstrap_ci([[3.0, 3.0, 3.0]], reps=50) == (3.0, 3.0)  # nothing varies
    assert bootstrap_ci(same, reps=200, seed=1) == bootstrap_ci(same, reps=200, seed=1)  # seeded
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([[1.0], []])


def test_the_95_interval_of_the_mean_covers_the_truth_most_of_the_time() -> None:
    """Over 60 draws of 5 seeds x 20 episodes (seed effect sd 1, episode sd 2), the 95% interval of the
    mean contains the true mean 0 in most draws (a percentile bootstrap over few seeds undercovers
    somewhat; it must not be far off)."""
    rng = np.random.default_rng(3)
    hits = 0
    for k in range(60):
        scores = [rng.normal(rng.normal(0, 1), 2, 20) for _ in range(5)]
        low, high = bootstrap_ci(scores, mean, reps=300, seed=k)
        hits += low <= 0 <= high
    assert hits >= 45


def test_summarize() -> None:
    out = summarize([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], reps=200)
    assert out["mean"] == pytest.approx(3.5) and out["iqm"] == pytest.approx(3.5)
    assert out["run_means"] == [2.0, 5.0] and out["runs"] == 2 and out["episodes"] == 6
    assert out["std_over_runs"] == pytest.approx(np.std([2.0, 5.0], ddof=1))
    assert out["mean_ci"][0] <= 3.5 <= out["mean_ci"][1]
