"""M-GRPO for a main agent and sub-agents: trajectory alignment and the two advantages, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from teamrl.algorithms import align_subagent_calls, hierarchical_advantages, subagent_relative_advantages


def test_alignment_keeps_exact_counts_pads_by_duplicating_and_trims_at_random():
    g = torch.Generator().manual_seed(0)
    exact, short, long, none = align_subagent_calls([3, 2, 6, 0], max_calls=3, generator=g)
    assert exact == [0, 1, 2]
    assert short[:2] == [0, 1] and len(short) == 3 and short[2] in (0, 1)  # one duplicate of its own calls
    assert len(long) == 3 and len(set(long)) == 3 and long == sorted(long) and set(long) <= set(range(6))
    assert none == []  # nothing to duplicate
    again = align_subagent_calls([3, 2, 6, 0], max_calls=3, generator=torch.Generator().manual_seed(0))
    assert again == [exact, short, long, none]  # a seeded generator reproduces the choice
    assert align_subagent_calls([1], max_calls=4) == [[0, 0, 0, 0]]


def test_alignment_validation():
    with pytest.raises(ValueError, match="max_calls=0 must be >= 1"):
        align_subagent_calls([1], max_calls=0)
    with pytest.raises(ValueError, match=r"num_calls\[1\]=-1 is negative"):
        align_subagent_calls([1, -1], max_calls=2)


def test_hierarchical_advantages_by_hand():
    # one query, K = 2 rollouts. Main rewards 1, 0: mean 0.5, unbiased std sqrt(0.5) -> +-0.5/0.7071.
    # Sub-agents, D_max = 2: rollout 0 called twice (1.0, 0.0) and keeps both; rollout 1 once (0.5),
    # padded with a copy of it. The 4 aligned rewards 1, 0, 0.5, 0.5: mean 0.5, centred 0.5, -0.5, 0, 0,
    # unbiased std sqrt(0.5 / 3).
    main, chosen, sub = hierarchical_advantages(
        torch.tensor([1.0, 0.0]), [torch.tensor([1.0, 0.0]), torch.tensor([0.5])], ["q", "q"], max_calls=2
    )
    assert main.tolist() == pytest.approx([0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)], rel=1e-5)
    assert chosen == [[0, 1], [0, 0]]
    s = math.sqrt(0.5 / 3)
    assert [a.tolist() for a in sub] == [pytest.approx([0.5 / s, -0.5 / s], rel=1e-5), [0.0, 0.0]]


def test_subagent_advantages_are_relative_within_each_query():
    aligned = [
        torch.tensor([1.0, 3.0]),
        torch.tensor([2.0, 2.0]),
        torch.tensor([10.0, 20.0]),
        torch.tensor([]),
    ]
    got = subagent_relative_advantages(aligned, ["a", "a", "b", "b"], scale="none")
    # query a: mean of 1, 3, 2, 2 = 2; query b: mean of 10, 20 = 15 (the rollout without calls adds none)
    assert [t.tolist() for t in got] == [[-1.0, 1.0], [0.0, 0.0], [-5.0, 5.0], []]
    with pytest.raises(ValueError, match="3 group ids for 4 rollouts"):
        subagent_relative_advantages(aligned, ["a", "a", "b"])
    with pytest.raises(ValueError, match="one main-agent reward per rollout"):
        hierarchical_advantages(torch.tensor([1.0]), aligned, ["a"] * 4, max_calls=2)


def test_hierarchical_advantages_of_equal_rewards_are_exactly_zero():
    # float32 rounding in the group mean used to give every member the same small nonzero advantage
    main, _, sub = hierarchical_advantages(
        torch.full((8,), 0.7), [torch.full((3,), 0.2)] * 8, ["q"] * 8, max_calls=2
    )
    assert main.tolist() == [0.0] * 8
    assert [a.tolist() for a in sub] == [[0.0, 0.0]] * 8
