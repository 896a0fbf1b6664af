"""Environments of teamrl.marl: the batched MPE agrees with mpe2 step by step, the PettingZoo views pass
PettingZoo's own API and seed tests, the adaptors follow the VecMultiAgentEnv contract."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

pytest.importorskip("mpe2")
pytest.importorskip("pettingzoo")

from pettingzoo.classic import connect_four_v3  # noqa: E402
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402
from pettingzoo.utils.conversions import turn_based_aec_to_parallel  # noqa: E402

from teamrl.marl.envs import (  # noqa: E402
    SCENARIOS,
    PettingZooVecEnv,
    TurnBasedVecEnv,
    list_envs,
    make_vec_env,
    parallel_env,
)
from teamrl.marl.evaluate import evaluate, random_actor  # noqa: E402

MPE2_MODULE = {
    "simple_spread": "mpe2.simple_spread_v3",
    "simple_tag": "mpe2.simple_tag_v3",
    "simple_adversary": "mpe2.simple_adversary_v3",
}
# (scenario, kwargs): the mpe2 defaults and one non-default configuration each
CONFIGS = [
    ("simple_spread", {}),
    ("simple_spread", {"N": 5, "local_ratio": 0.2, "max_cycles": 40}),
    ("simple_tag", {}),
    ("simple_tag", {"num_good": 2, "num_adversaries": 4, "num_obstacles": 3, "max_cycles": 50}),
    ("simple_adversary", {}),
    ("simple_adversary", {"N": 3, "max_cycles": 30}),
    ("simple_spread", {"continuous_actions": True}),
    ("simple_tag", {"continuous_actions": True}),
]
TOL = 1e-5


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _mpe2_env(scenario: str, **kwargs):
    return importlib.import_module(MPE2_MODULE[scenario]).parallel_env(**kwargs)


def _crowd(mpe2_env, rng: np.random.Generator) -> None:
    """Put every agent (and landmark) of an mpe2 world near the origin: contacts from the first step."""
    world = mpe2_env.unwrapped.world
    for entity in world.agents + world.landmarks:
        entity.state.p_pos = rng.uniform(-0.15, 0.15, 2)
    for agent in world.agents:
        agent.state.p_vel = rng.uniform(-0.5, 0.5, 2)


def _run_agreement(scenario: str, kwargs: dict, seed: int, crowd: bool) -> tuple[float, float]:
    """B=3 copies loaded from 3 mpe2 envs, one full episode of random actions; returns the worst
    observation/state and reward differences."""
    B = 3
    refs = [_mpe2_env(scenario, **kwargs) for _ in range(B)]
    env = SCENARIOS[scenario](num_envs=B, **kwargs)
    env.reset(seed=0)
    rng = np.random.default_rng(seed)
    obs_err = rew_err = 0.0
    for i, ref in enumerate(refs):
        ref.reset(seed=1000 * seed + i)
        if crowd:
            _crowd(ref, rng)
        env.set_state_from_mpe2(i, ref)
        first = {a: ref.unwrapped.observe(a) for a in env.agents}
        mine = env.observe_copy(i)
        obs_err = max(obs_err, *(float(np.abs(mine[a] - first[a]).max()) for a in env.agents))
    for t in range(env.max_steps):
        if kwargs.get("continuous_actions"):  # slightly out of [0, 1]: our env clips
            actions = {a: rng.uniform(-0.1, 1.1, (B, 5)).astype(np.float32) for a in env.agents}
        else:
            actions = {a: rng.integers(0, 5, B) for a in env.agents}
        step = env.step(actions)
        last = t == env.max_steps - 1
        assert step.truncated.all() == last and not step.terminated.any()
        obs = step.final_obs if last else step.obs
        state = step.final_state if last else step.state
        for i, ref in enumerate(refs):
            # mpe2 clips too, but warns on every call: hand it the clipped actions
            ref_actions = {
                a: np.clip(actions[a][i], 0, 1) if actions[a].ndim == 2 else actions[a][i] for a in env.agents
            }
            o, r, term, trunc, _ = ref.step(ref_actions)
            assert all(trunc.values()) == last and not any(term.values())
            for a in env.agents:
                assert obs[a].dtype == np.float32 and obs[a][i].shape == o[a].shape
                obs_err = max(obs_err, float(np.abs(obs[a][i] - o[a]).max()))
                rew_err = max(rew_err, abs(float(step.rewards[a][i]) - r[a]))
            obs_err = max(obs_err, float(np.abs(state[i] - ref.state()).max()))
    return obs_err, rew_err


@pytest.mark.parametrize("scenario,kwargs", CONFIGS)
def test_batched_mpe_agrees_with_mpe2(scenario, kwargs):
    for seed in range(4):
        for crowd in (False, True):
            obs_err, rew_err = _run_agreement(scenario, kwargs, seed, crowd)
            assert obs_err < TOL and rew_err < TOL, (seed, crowd, obs_err, rew_err)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_seeded_reset_draws_mpe2_world(scenario):
    """With one copy, reset(seed) draws the very world of mpe2's reset(seed); spaces and state agree."""
    ref = _mpe2_env(scenario)
    env = SCENARIOS[scenario](num_envs=1)
    for seed in (0, 7):
        obs, _ = ref.reset(seed=seed)
        step = env.reset(seed=seed)
        for a in env.agents:
            np.testing.assert_array_equal(step.obs[a][0], obs[a])
            assert env.observation_spaces[a].shape == ref.observation_space(a).shape
            assert env.action_spaces[a] == ref.action_space(a)
        np.testing.assert_array_equal(step.state[0], ref.state())
    assert env.state_dim == ref.state_space.shape[0]
    assert env.agents == ref.possible_agents


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("continuous", [False, True])
def test_parallel_view_passes_pettingzoo_tests(scenario, continuous):
    parallel_api_test(parallel_env(scenario, continuous_actions=continuous), num_cycles=100)
    parallel_seed_test(lambda: parallel_env(scenario, continuous_actions=continuous))
    view = parallel_env(scenario, continuous_actions=continuous)
    assert view.action_space(view.possible_agents[0]) == _mpe2_env(
        scenario, continuous_actions=continuous
    ).action_space(view.possible_agents[0])
    obs, _ = view.reset(seed=3)
    for a in view.agents:
        assert view.observation_space(a).contains(obs[a])
    assert view.state_space.contains(view.state())


def test_auto_reset_and_final_obs():
    env = make_vec_env("simple_spread", 4, seed=1, max_cycles=5)
    step = env.reset()
    assert not step.done.any() and all((r == 0).all() for r in step.rewards.values())
    for t in range(5):
        assert step.final_obs is None or t == 0
        step = env.step({a: np.full(4, 2) for a in env.agents})  # everyone pushes right
    assert step.truncated.all() and not step.terminated.any()
    assert step.final_obs is not None and step.final_state is not None
    np.testing.assert_array_equal(
        step.final_state, np.concatenate([step.final_obs[a] for a in env.agents], 1)
    )
    np.testing.assert_array_equal(step.state, np.concatenate([step.obs[a] for a in env.agents], 1))
    for a in env.agents:
        assert (step.final_obs[a][:, 0] > 0).all()  # moving right before the reset
        assert (step.obs[a][:, :2] == 0).all()  # zero velocity after it
        assert (step.rewards[a] < 0).all()
    step = env.step({a: np.zeros(4, np.int64) for a in env.agents})
    assert not step.done.any() and step.final_obs is None
    ret = evaluate(random_actor(env, 0), env, episodes=6)
    assert ret["episode_length"] == 5 and ret["episodes"] == 6


@pytest.mark.parametrize("name", ["simple_spread", "simple_tag", "simple_adversary", "connect_four"])
def test_seeding_is_deterministic(name):
    def rollout(env, seed):
        step, out = env.reset(seed=seed), []
        actor = random_actor(env, 0)
        for _ in range(30):
            step = env.step(actor(step))
            out.append(np.concatenate([step.state.ravel(), *(step.rewards[a] for a in env.agents)]))
        return np.concatenate(out)

    a, b = make_vec_env(name, 3), make_vec_env(name, 3)
    np.testing.assert_array_equal(rollout(a, 5), rollout(b, 5))
    np.testing.assert_array_equal(rollout(a, 5), rollout(a, 5))
    if name != "connect_four":  # the empty board is the same whatever the seed
        assert not np.array_equal(rollout(a, 5), rollout(a, 6))
    # the constructor seed fixes the first reset
    c, d = make_vec_env(name, 3, seed=11), make_vec_env(name, 3, seed=11)
    np.testing.assert_array_equal(c.reset().state, d.reset().state)


def test_pettingzoo_adaptor_matches_batched_env_on_mpe2():
    """One copy of mpe2 simple_spread through the generic adaptor = the batched env with the same seed."""
    generic = make_vec_env("mpe2:simple_spread_v3", 1)
    batched = make_vec_env("simple_spread", 1)
    assert generic.state_dim == batched.state_dim and generic.max_steps == batched.max_steps == 25
    g, b = generic.reset(seed=4), batched.reset(seed=4)
    rng = np.random.default_rng(0)
    for _ in range(30):  # crosses an auto-reset
        actions = {a: rng.integers(0, 5, 1) for a in batched.agents}
        g, b = generic.step(actions), batched.step(actions)
        assert (g.truncated == b.truncated).all() and (g.terminated == b.terminated).all()
        np.testing.assert_allclose(g.state, b.state, atol=TOL)
        for a in batched.agents:
            np.testing.assert_allclose(g.obs[a], b.obs[a], atol=TOL)
            np.testing.assert_allclose(g.rewards[a], b.rewards[a], atol=TOL)
        if b.final_obs is not None:
            np.testing.assert_allclose(g.final_state, b.final_state, atol=TOL)
    assert g.action_masks is None


def test_pettingzoo_adaptor_splits_action_masks():
    env = PettingZooVecEnv(lambda: turn_based_aec_to_parallel(connect_four_v3.env()), 2, seed=0)
    step = env.reset()
    assert env.observation_spaces["player_0"].shape == (84,) and step.obs["player_0"].shape == (2, 84)
    assert step.action_masks["player_0"].all()
    # the agent off turn has an all-zero mask in PettingZoo; it becomes "action 0 only"
    assert step.action_masks["player_1"].tolist() == [[True] + [False] * 6] * 2
    out = evaluate(random_actor(env, 1), env, episodes=4)
    assert out["return/player_0"] == -out["return/player_1"]


def test_connect_four_masks_and_outcome():
    env = make_vec_env("connect_four", 4, seed=0)
    assert isinstance(env, TurnBasedVecEnv)
    pass_ = {a: env.action_spaces[a].n - 1 for a in env.agents}
    assert pass_ == {"player_0": 7, "player_1": 7}
    step = env.reset()
    rng = np.random.default_rng(0)
    results: list[tuple[float, float]] = []
    totals = np.zeros((4, 2))
    while len(results) < 12:
        on_turn = env.on_turn()
        actions = {}
        for a in env.agents:
            mask = step.action_masks[a]
            for i in range(4):
                if on_turn[i] == a:
                    assert not mask[i, pass_[a]] and mask[i, :7].any()
                else:  # the agent off turn may only pass
                    assert mask[i].tolist() == [False] * 7 + [True]
            actions[a] = np.array([rng.choice(np.flatnonzero(m)) for m in mask])
        step = env.step(actions)
        totals += np.stack([step.rewards[a] for a in env.agents], 1)
        for i in np.flatnonzero(step.done):
            assert step.terminated[i] and not step.truncated[i]
            results.append(tuple(totals[i]))
            totals[i] = 0
    for r0, r1 in results:
        assert (r0, r1) in {(1.0, -1.0), (-1.0, 1.0), (0.0, 0.0)}
    # an illegal move cannot be played
    step = env.reset(seed=1)
    with pytest.raises(ValueError, match="illegal"):
        env.step({"player_0": np.full(4, 7), "player_1": np.full(4, 7)})  # player_0 is on turn
    with pytest.raises(ValueError, match="illegal"):
        env.step({"player_0": np.zeros(4, np.int64), "player_1": np.zeros(4, np.int64)})


def test_make_vec_env_names_and_errors():
    names = list_envs()
    for name in ["simple_spread", "simple_tag", "simple_adversary", "connect_four", "mpe2:simple_spread_v3"]:
        assert name in names
    with pytest.raises(ValueError, match="simple_spread"):
        make_vec_env("no_such_env", 2)
    with pytest.raises(ValueError, match="valid names"):
        make_vec_env("mpe2:no_such_env_v1", 2)
    with pytest.raises(TypeError):
        make_vec_env("simple_spread", 2, no_such_argument=1)
    with pytest.raises(ValueError):
        make_vec_env("simple_spread", 0)
    env = make_vec_env("simple_spread", 2, N=4, local_ratio=0.0)
    assert len(env.agents) == 4 and env.observation_spaces["agent_0"].shape == (4 + 8 + 6 + 6,)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="actions"):
        env.step({a: np.full(2, 5) for a in env.agents})
    other = make_vec_env("mpe2:simple_adversary_v3", 2, N=3)
    assert other.agents == ["adversary_0", "agent_0", "agent_1", "agent_2"]
