"""marl.evaluate counts a fixed set of episodes, not the first to finish (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from teamrl.marl.core import VecStep
from teamrl.marl.evaluate import evaluate


class CoinLengths:
    """One agent; each copy's k-th episode lasts 1 or 9 steps (a coin drawn from (copy, k)), reward 1 per
    step, so an episode's return is its length. The expected mean of a fixed set of episodes is 5."""

    agents = ["a"]
    state_dim = 1
    max_steps = 9

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.observation_spaces = {"a": spaces.Box(-1, 1, (1,))}
        self.action_spaces: dict[str, spaces.Space] = {"a": spaces.Discrete(2)}

    @staticmethod
    def length(copy: int, k: int) -> int:
        return 1 if np.random.default_rng([copy, k]).random() < 0.5 else 9

    def _step(self, rewards: float, done: np.ndarray) -> VecStep:
        B = self.num_envs
        obs = {"a": np.zeros((B, 1), np.float32)}
        return VecStep(
            obs, np.zeros((B, 1), np.float32), {"a": np.full(B, rewards, np.float32)}, done, done * 0 > 0
        )

    def reset(self, seed: int | None = None) -> VecStep:
        self.k = np.zeros(self.num_envs, dtype=np.int64)
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        return self._step(0.0, np.zeros(self.num_envs, dtype=bool))

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        self.t += 1
        done = np.array([self.t[i] >= self.length(i, int(self.k[i])) for i in range(self.num_envs)])
        self.k[done] += 1
        self.t[done] = 0
        return self._step(1.0, done)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("copies", "episodes"), [(16, 64), (16, 10), (3, 7)])
def test_evaluation_counts_a_fixed_set_of_episodes(copies: int, episodes: int) -> None:
    env = CoinLengths(copies)
    out = evaluate(lambda step: {"a": np.zeros(copies, dtype=np.int64)}, env, episodes)
    # the first episodes // B of each copy, one more for the first episodes % B copies
    share = [episodes // copies + (i < episodes % copies) for i in range(copies)]
    want = [CoinLengths.length(i, k) for i in range(copies) for k in range(share[i])]
    assert out["episodes"] == episodes
    assert out["episode_length"] == pytest.approx(np.mean(want))
    assert out["return/mean"] == pytest.approx(np.mean(want)) == pytest.approx(out["return/a"])
    assert out["returns"] == want  # every counted episode, copy by copy, in order


def test_first_to_finish_would_have_been_biased() -> None:
    """The set the old rule counted (the first 64 episodes to end across 16 copies) is much shorter on
    average than the fixed set: the bias the fixed set removes is real on this env."""
    copies, episodes = 16, 64
    ends = sorted(
        (sum(CoinLengths.length(i, j) for j in range(k + 1)), i, CoinLengths.length(i, k))
        for i in range(copies)
        for k in range(40)
    )
    first_to_finish = np.mean([length for _, _, length in ends[:episodes]])
    out = evaluate(lambda step: {"a": np.zeros(copies, dtype=np.int64)}, CoinLengths(copies), episodes)
    assert first_to_finish < out["episode_length"] - 1.0


def test_evaluate_refuses_zero_episodes() -> None:
    with pytest.raises(ValueError, match="at least one"):
        evaluate(lambda step: {}, CoinLengths(2), 0)


def test_the_final_table_gives_the_means_interval_so_a_short_evaluation_shows_its_imprecision(
    capsys, monkeypatch, tmp_path
):
    """50 episodes with std 10 pin a mean to about +-2.8: the table's note says so under the mean and std."""
    from teamrl.marl.train import result_table

    monkeypatch.setenv("COLUMNS", "200")
    base = {"algorithm": "mappo", "env": "simple_spread", "episode_length": 25.0, "env_steps": 100}
    result_table({**base, "episodes": 50, "return/mean": -23.0, "return/std": 10.0}, tmp_path)
    out = capsys.readouterr().out
    assert "-23.00 +- 10.00" in out and "95% interval over these 50 episodes: [-25.77, -20.23]" in out
    result_table({**base, "episodes": 5000, "return/mean": -23.0, "return/std": 10.0}, tmp_path)
    assert "[-23.28, -22.72]" in capsys.readouterr().out
