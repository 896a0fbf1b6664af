"""QMIX / VDN and MADDPG: the pieces against hand-computed values, and a few updates on a tiny env."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from teamrl.marl import maddpg, qmix
from teamrl.marl.core import VecStep
from teamrl.marl.evaluate import evaluate
from teamrl.marl.run import RunContext

torch.set_num_threads(1)


class TinyTeamEnv:
    """Two agents see a goal in {0, 1, 2} (one-hot) that changes every step; each scores 0.5 for every
    agent that picks it (a shared reward). Episodes terminate after 2-5 steps, or are cut at 4.
    ``masked``: agent ``b`` may never take action 0. ``continuous``: actions in [-1, 1]^2, reward
    -|a - goal point|^2 per agent, shared."""

    agents = ["a", "b"]

    def __init__(
        self, num_envs: int = 4, seed: int = 0, masked: bool = False, continuous: bool = False
    ) -> None:
        self.num_envs, self.masked, self.continuous = num_envs, masked, continuous
        self.max_steps = 4
        self.state_dim = 4
        self.observation_spaces = {a: spaces.Box(-1, 1, (3,), np.float32) for a in self.agents}
        act = spaces.Box(-1, 1, (2,), np.float32) if continuous else spaces.Discrete(3)
        self.action_spaces = {a: act for a in self.agents}
        self.rng = np.random.default_rng(seed)
        self.points = np.array([[1.0, 0.0], [-0.5, 0.8], [-0.5, -0.8]], np.float32)

    def _new(self, rows: np.ndarray) -> None:
        self.t[rows] = 0
        self.length[rows] = self.rng.integers(2, 6, len(rows))
        self.goal[rows] = self.rng.integers(0, 3, len(rows))

    def _step(
        self, rewards: dict[str, np.ndarray], term: np.ndarray, trunc: np.ndarray, final=None
    ) -> VecStep:
        obs = np.eye(3, dtype=np.float32)[self.goal]
        state = np.concatenate([obs, (self.t / 4.0)[:, None].astype(np.float32)], 1)
        masks = None
        if self.masked and not self.continuous:
            allowed_b = np.ones((self.num_envs, 3), bool)
            allowed_b[:, 0] = False
            masks = {"a": np.ones((self.num_envs, 3), bool), "b": allowed_b}
        fo, fs = final if final is not None else (None, None)
        return VecStep(
            obs={a: obs.copy() for a in self.agents},
            state=state,
            rewards=rewards,
            terminated=term,
            truncated=trunc,
            action_masks=masks,
            final_obs=fo,
            final_state=fs,
        )

    def reset(self, seed: int | None = None) -> VecStep:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = np.zeros(self.num_envs, np.int64)
        self.length = np.zeros(self.num_envs, np.int64)
        self.goal = np.zeros(self.num_envs, np.int64)
        self._new(np.arange(self.num_envs))
        zero = np.zeros(self.num_envs, np.float32)
        no = np.zeros(self.num_envs, bool)
        return self._step({a: zero.copy() for a in self.agents}, no, no.copy())

    def step(self, actions: dict[str, np.ndarray]) -> VecStep:
        if self.continuous:
            target = self.points[self.goal]
            r = -sum(np.square(actions[a] - target).sum(1) for a in self.agents) / 2
        else:
            if self.masked:
                assert (actions["b"] != 0).all(), "a masked action was taken"
            r = sum((actions[a] == self.goal).astype(np.float32) for a in self.agents) * 0.5
        self.t += 1
        self.goal = self.rng.integers(0, 3, self.num_envs)
        term = self.t >= self.length
        trunc = (self.t >= self.max_steps) & ~term
        done = term | trunc
        final = None
        if done.any():
            last = self._step({}, term, trunc)
            final = (last.obs, last.state)
            self._new(np.flatnonzero(done))
        rewards = {a: np.asarray(r, np.float32).copy() for a in self.agents}
        return self._step(rewards, term, trunc, final)

    def close(self) -> None:
        pass


def tiny_run(**env_kwargs) -> RunContext:
    return RunContext(None, lambda n, s: TinyTeamEnv(n, s, **env_kwargs), 0, show_progress=False)


def params(state_dicts: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    return torch.cat([v.flatten().float() for sd in state_dicts for v in sd.values()])


# --- QMIX / VDN -----------------------------------------------------------------------------------


def test_qmix_mixer_is_monotonic_in_every_agent_q():
    torch.manual_seed(0)
    mixer = qmix.QMixer(n_agents=4, state_dim=6, embed=8, hypernet_embed=16)
    for p in mixer.parameters():  # random weights of both signs, well away from the initialisation
        p.data.normal_(0.0, 1.0)
    q = torch.randn(256, 4, requires_grad=True)
    state = torch.randn(256, 6) * 3
    q_tot = mixer(q, state)
    assert q_tot.shape == (256,)
    (grad,) = torch.autograd.grad(q_tot.sum(), q)
    assert (grad >= 0).all()
    assert (grad > 0).float().mean() > 0.5  # not trivially flat


def test_vdn_is_the_sum_and_mixers_keep_leading_dims():
    q = torch.randn(5, 7, 3)
    torch.testing.assert_close(qmix.VDNMixer()(q, torch.randn(5, 7, 2)), q.sum(-1))
    assert qmix.QMixer(3, 2, 4, 8)(q, torch.randn(5, 7, 2)).shape == (5, 7)


def test_double_q_target_hand_computed():
    online = torch.tensor([[1.0, 5.0, 3.0]])
    target = torch.tensor([[10.0, 2.0, 7.0]])
    mask = torch.tensor([[True, False, True]])
    # double Q: the online argmax over the allowed actions is 2 (3 > 1; 5 is masked) -> target's 7
    torch.testing.assert_close(
        qmix.masked_max_target(online, target, mask, double_q=True), torch.tensor([7.0])
    )
    # plain Q-learning: the target's max over allowed actions (10); masking removes nothing bigger here
    torch.testing.assert_close(
        qmix.masked_max_target(online, target, mask, double_q=False), torch.tensor([10.0])
    )
    torch.testing.assert_close(
        qmix.masked_max_target(online, target, torch.tensor([[False, True, True]]), double_q=False),
        torch.tensor([7.0]),
    )
    # one-step targets r + gamma (1 - term) Q'(next): 1 + 0.9 * 7 = 7.3; terminal: just r
    r, term = torch.tensor([[1.0, 1.0]]), torch.tensor([[False, True]])
    nxt, filled = torch.tensor([[7.0, 7.0]]), torch.tensor([[True, True]])
    torch.testing.assert_close(qmix.td_targets(r, term, filled, nxt, 0.9, 0.0), torch.tensor([[7.3, 1.0]]))


def test_td_lambda_targets_hand_computed():
    # one episode of 2 valid steps, padded to 3; not terminated (cut): bootstraps from Q' after step 1
    r = torch.tensor([[1.0, 2.0, 0.0]])
    term = torch.tensor([[False, False, False]])
    filled = torch.tensor([[True, True, False]])
    nxt = torch.tensor([[4.0, 6.0, 99.0]])  # Q' after steps 0, 1, (2: padding)
    g, lam = 0.5, 0.5
    g1 = 2.0 + g * 6.0  # last valid step: full bootstrap = 5
    g0 = 1.0 + g * ((1 - lam) * 4.0 + lam * g1)  # 1 + 0.5 * (2 + 2.5) = 3.25
    out = qmix.td_targets(r, term, filled, nxt, g, lam)
    torch.testing.assert_close(out[:, :2], torch.tensor([[g0, g1]]))
    # lambda = 0 is the one-step target; a terminal last step does not bootstrap
    torch.testing.assert_close(
        qmix.td_targets(r, term, filled, nxt, g, 0.0)[:, :2], torch.tensor([[3.0, 5.0]])
    )
    term_last = torch.tensor([[False, True, False]])
    # G1 = 2 (terminal), G0 = 1 + 0.5 * (0.5 * 4 + 0.5 * 2) = 2.5
    torch.testing.assert_close(
        qmix.td_targets(r, term_last, filled, nxt, g, lam)[:, :2], torch.tensor([[2.5, 2.0]])
    )


def test_target_network_hard_and_soft_updates_hand_computed():
    src, tgt = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        src.weight.copy_(torch.tensor([[1.0, 2.0]]))
        src.bias.fill_(3.0)
        tgt.weight.copy_(torch.tensor([[11.0, -8.0]]))
        tgt.bias.fill_(-7.0)
    qmix.soft_update(tgt, src, 0.1)  # 0.9 * target + 0.1 * source
    torch.testing.assert_close(tgt.weight, torch.tensor([[10.0, -7.0]]))
    torch.testing.assert_close(tgt.bias, torch.tensor([-6.0]))
    maddpg.soft_update(tgt, src, 0.5)
    torch.testing.assert_close(tgt.weight, torch.tensor([[5.5, -2.5]]))
    qmix.hard_update(tgt, src)
    torch.testing.assert_close(tgt.weight, src.weight)
    torch.testing.assert_close(tgt.bias, src.bias)


def test_epsilon_greedy_never_takes_masked_actions():
    gen = torch.Generator().manual_seed(0)
    q = torch.tensor([[9.0, 1.0, 2.0, 3.0]]).expand(2000, 4)
    mask = torch.tensor([[False, True, False, True]]).expand(2000, 4)
    for eps in (0.0, 0.5, 1.0):
        a = qmix.epsilon_greedy(q, mask, eps, gen)
        assert set(a.tolist()) <= {1, 3}
    assert (qmix.epsilon_greedy(q, mask, 0.0, gen) == 3).all()
    assert set(qmix.epsilon_greedy(q, mask, 1.0, gen).tolist()) == {1, 3}
    cfg = qmix.Config()
    assert qmix.epsilon_at(cfg, 0) == 1.0 and qmix.epsilon_at(cfg, 10**9) == cfg.epsilon_finish
    assert qmix.epsilon_at(cfg, cfg.epsilon_anneal_steps // 2) == pytest.approx(
        (1.0 + cfg.epsilon_finish) / 2
    )


def test_recurrent_actor_resets_the_rows_of_new_episodes():
    cfg = qmix.Config(rnn_hidden=8)
    env = TinyTeamEnv(2)
    groups = qmix.make_groups(env)
    torch.manual_seed(0)
    nets = torch.nn.ModuleList(qmix.RNNAgent(qmix.input_dim(g, cfg), 8, g.n_actions) for g in groups)
    actor, fresh = qmix.RecurrentActor(groups, nets, cfg), qmix.RecurrentActor(groups, nets, cfg)
    first = env.reset(seed=0)
    actor(first)
    step = env.step({"a": np.zeros(2, np.int64), "b": np.zeros(2, np.int64)})
    step.terminated = np.array([True, False])  # copy 0 starts a new episode
    actor(step)
    fresh(step)
    torch.testing.assert_close(actor.h[0][0], fresh.h[0][0])  # reset row: as from scratch
    assert not torch.allclose(actor.h[0][1], fresh.h[0][1])  # continuing row: keeps its memory


@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
def test_qmix_trains_on_a_tiny_env_and_respects_masks(mixer):
    base = dict(mixer=mixer, num_envs=4, batch_size=4, seed=3, log_every=40, rnn_hidden=16, td_lambda=0.5)
    untrained = qmix.train(qmix.Config(total_env_steps=4, **base), tiny_run(masked=True))["checkpoint"]
    run = tiny_run(masked=True)  # the env asserts that agent b never takes its masked action 0
    out = qmix.train(qmix.Config(total_env_steps=100, target_update_interval=5, **base), run)
    ckpt = out["checkpoint"]
    before, after = params(untrained["agent_nets"]), params(ckpt["agent_nets"])
    assert torch.isfinite(after).all() and not torch.allclose(before, after)
    if mixer == "qmix":
        assert not torch.allclose(params([untrained["mixer"]]), params([ckpt["mixer"]]))
    rows = [r for r in run.history if "loss" in r]
    assert rows and all(np.isfinite(r["loss"]) for r in rows)
    assert {
        "return/mean",
        "return/a",
        "episode_length",
        "epsilon",
        "q_taken_mean",
        "agent_steps_per_s",
    } <= set(run.history[-1])
    result = evaluate(qmix.make_actor(ckpt), TinyTeamEnv(4, 1, masked=True), episodes=8)
    assert np.isfinite(result["return/mean"])
    evaluate(qmix.make_actor(ckpt, deterministic=False), TinyTeamEnv(4, 1, masked=True), episodes=8)


# --- MADDPG ---------------------------------------------------------------------------------------


def test_gumbel_softmax_straight_through():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0]] * 512, requires_grad=True)
    hard = maddpg.gumbel_softmax(logits, 1.0, hard=True, generator=torch.Generator().manual_seed(1))
    soft = maddpg.gumbel_softmax(logits, 1.0, hard=False, generator=torch.Generator().manual_seed(1))
    # forward: exactly one-hot, at the argmax of the soft sample drawn with the same noise
    assert set(hard.detach().unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(hard.detach().sum(-1), torch.ones(512))
    assert (hard.detach().argmax(-1) == soft.detach().argmax(-1)).all()
    torch.testing.assert_close(soft.detach().sum(-1), torch.ones(512))
    # backward: the gradient is the soft sample's (straight-through)
    w = torch.randn(4)
    (g_hard,) = torch.autograd.grad((hard * w).sum(), logits)
    (g_soft,) = torch.autograd.grad((soft * w).sum(), logits)
    torch.testing.assert_close(g_hard, g_soft)
    assert g_hard.abs().sum() > 0
    # samples follow softmax(logits): action 0 is the most frequent
    freq = hard.detach().mean(0)
    assert freq.argmax() == 0 and abs(freq[0].item() - torch.softmax(logits[0], -1)[0].item()) < 0.08


def test_gumbel_softmax_temperature():
    logits = torch.zeros(4000, 5)
    peak = {
        t: maddpg.gumbel_softmax(logits, t, hard=False, generator=torch.Generator().manual_seed(0))
        .max(-1)
        .values
        for t in (0.1, 1.0, 10.0)
    }
    # cold: nearly one-hot; hot: nearly uniform (1/5)
    assert peak[0.1].mean() > 0.9 > peak[1.0].mean() > peak[10.0].mean()
    assert peak[10.0].mean() < 0.3


def test_maddpg_trains_on_a_tiny_discrete_env_and_respects_masks():
    base = dict(
        num_envs=4, batch_size=32, seed=2, learning_starts=40, train_every=8, log_every=40, hidden=[16]
    )
    untrained = maddpg.train(maddpg.Config(total_env_steps=4, **base), tiny_run(masked=True))["checkpoint"]
    run = tiny_run(masked=True)  # the env asserts that agent b never takes its masked action 0
    ckpt = maddpg.train(maddpg.Config(total_env_steps=120, **base), run)["checkpoint"]
    for key in ("actors", "critics"):
        before, after = params(untrained[key]), params(ckpt[key])
        assert torch.isfinite(after).all() and not torch.allclose(before, after)
    rows = [r for r in run.history if "critic_loss" in r]
    assert rows and all(np.isfinite(r["critic_loss"]) and np.isfinite(r["actor_loss"]) for r in rows)
    assert {"return/mean", "return/b", "episode_length", "agent_steps_per_s"} <= set(run.history[-1])
    for deterministic in (True, False):
        result = evaluate(maddpg.make_actor(ckpt, deterministic), TinyTeamEnv(4, 1, masked=True), episodes=8)
        assert np.isfinite(result["return/mean"])


@pytest.mark.parametrize("exploration", ["gaussian", "ou"])
def test_maddpg_continuous_actions_stay_in_bounds(exploration):
    cfg = maddpg.Config(
        total_env_steps=120,
        num_envs=4,
        batch_size=32,
        learning_starts=40,
        train_every=8,
        hidden=[16],
        exploration=exploration,
        noise_std=2.0,
        critic_input="state",
    )
    seen = []

    class Recording(TinyTeamEnv):
        def step(self, actions):
            seen.append(np.stack([actions[a] for a in self.agents]))
            return super().step(actions)

    out = maddpg.train(
        cfg, RunContext(None, lambda n, s: Recording(n, s, continuous=True), 0, show_progress=False)
    )
    acts = np.concatenate(seen)
    assert acts.shape[-1] == 2 and (acts >= -1).all() and (acts <= 1).all()
    assert np.abs(acts).max() == pytest.approx(1.0)  # big noise is clipped, not wrapped
    act = maddpg.make_actor(out["checkpoint"])(TinyTeamEnv(3, 0, continuous=True).reset(seed=0))
    assert act["a"].shape == (3, 2) and np.abs(act["a"]).max() <= 1.0
