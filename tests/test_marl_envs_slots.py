"""The entity actor's landmark slots come from the env's own layout (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mpe2")

from teamrl.marl.envs import make_vec_env  # noqa: E402
from teamrl.marl.ppo import make_groups  # noqa: E402


@pytest.mark.parametrize(
    ("kwargs", "slots", "dim"),
    [
        ({}, (4, 3, 2), 18),
        ({"num_landmark_neighbors": 1}, (4, 1, 2), 14),
        ({"N": 4, "num_landmark_neighbors": 2, "num_agent_neighbors": 1}, (4, 2, 2), 12),
    ],
)
def test_mpe2_simple_spread_slots_follow_its_arguments(kwargs, slots, dim) -> None:  # noqa: ANN001
    env = make_vec_env("mpe2:simple_spread_v3", 2, seed=0, **kwargs)
    try:
        assert {env.observation_spaces[a].shape for a in env.agents} == {(dim,)}
        assert set(env.entity_slots.values()) == {slots}  # type: ignore[attr-defined]
        obs = env.reset(seed=0)
        agent = env.agents[0]
        start, count, width = slots
        # the slots hold the landmarks relative to the agent: with full view, each is a landmark's position
        # minus the agent's (slot values are bounded by the arena; the agent's own position sits at 2..4)
        block = np.asarray(obs.obs[agent])[:, start : start + count * width]
        assert block.shape == (2, count * width) and np.abs(block).max() < 4
        make_groups(env, "shared", True, entity_actor=True)  # the entity actor accepts it
    finally:
        env.close()
