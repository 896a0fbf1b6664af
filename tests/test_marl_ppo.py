"""IPPO / MAPPO: the loss pieces against hand-computed values, masks, sharing, learning on a tiny game,
and the ``teamrl marl`` driver (CLI and Python API)."""

from __future__ import annotations

import json
import math
from typing import Any, cast

import numpy as np
import pytest
import torch
from gymnasium import spaces

from teamrl.marl import ppo
from teamrl.marl.core import VecStep
from teamrl.marl.run import RunContext

torch.set_num_threads(1)


class CueGame:
    """Each agent sees a one-hot cue and earns 1 for playing it; episodes are cut after ``max_steps``.

    ``heterogeneous`` adds an agent ``b`` with a longer observation and 3 actions. With ``masked`` the
    last action is never allowed (and the cue never asks for it); playing it raises.
    """

    def __init__(self, num_envs: int, seed: int, heterogeneous: bool = False, masked: bool = False):
        self.num_envs, self.max_steps, self.masked = num_envs, 4, masked
        self.agents = ["a0", "a1"] + (["b"] if heterogeneous else [])
        self.n = {"a0": 4, "a1": 4, "b": 3}
        self.observation_spaces = {
            a: spaces.Box(-1, 1, (self.n[a] + (2 if a == "b" else 0),), np.float32) for a in self.agents
        }
        self.action_spaces = {a: spaces.Discrete(self.n[a]) for a in self.agents}
        self.state_dim = sum(s.shape[0] for s in self.observation_spaces.values())
        self.rng = np.random.default_rng(seed)
        self.t = np.zeros(num_envs, dtype=np.int64)

    def _observe(self, rewards, terminated, truncated, final=None) -> VecStep:
        obs = {}
        for a in self.agents:
            n_cues = self.n[a] - 1 if self.masked else self.n[a]
            cue = self.rng.integers(0, n_cues, self.num_envs)
            o = np.zeros((self.num_envs, self.observation_spaces[a].shape[0]), np.float32)
            o[np.arange(self.num_envs), cue] = 1.0
            obs[a] = o
        self.cue = {a: obs[a][:, : self.n[a]].argmax(1) for a in self.agents}
        masks = None
        if self.masked:
            masks = {a: np.ones((self.num_envs, self.n[a]), bool) for a in self.agents}
            for m in masks.values():
                m[:, -1] = False
        state = np.concatenate([obs[a] for a in self.agents], axis=1)
        return VecStep(
            obs,
            state,
            rewards,
            terminated,
            truncated,
            masks,
            final_obs=None if final is None else final[0],
            final_state=None if final is None else final[1],
        )

    def reset(self, seed=None) -> VecStep:
        self.t[:] = 0
        zeros = {a: np.zeros(self.num_envs, np.float32) for a in self.agents}
        none = np.zeros(self.num_envs, bool)
        self.last = self._observe(zeros, none, none.copy())
        return self.last

    def step(self, actions) -> VecStep:
        rewards = {}
        for a in self.agents:
            act = np.asarray(actions[a])
            if self.masked and (act == self.n[a] - 1).any():
                raise AssertionError("a masked action was played")
            rewards[a] = (act == self.cue[a]).astype(np.float32)
        self.t += 1
        truncated = self.t >= self.max_steps
        self.t[truncated] = 0
        final = ({a: o.copy() for a, o in self.last.obs.items()}, self.last.state.copy())
        self.last = self._observe(rewards, np.zeros(self.num_envs, bool), truncated, final)
        return self.last

    def close(self) -> None:
        pass


def _run(make_env, total: int) -> RunContext:
    return RunContext(None, make_env, total, show_progress=False, tensorboard=False)


# ------------------------------------------------------------------------------------------- math
def test_gae_hand_computed_with_truncation_bootstrap_and_terminal():
    # t=0 ordinary step, t=1 cut by a time limit (bootstrap from V(final_obs) = 4), t=2 terminal
    rewards = torch.tensor([1.0, 2.0, 3.0])
    values = torch.tensor([0.5, 1.0, 1.5])
    next_values = torch.tensor([1.0, 4.0, 99.0])  # 99: never used, the episode terminated
    terminated = torch.tensor([0.0, 0.0, 1.0])
    done = torch.tensor([0.0, 1.0, 1.0])
    adv, ret = ppo.gae(rewards, values, next_values, terminated, done, gamma=0.9, lam=0.8)
    a2 = 3.0 - 1.5
    a1 = 2.0 + 0.9 * 4.0 - 1.0
    a0 = (1.0 + 0.9 * 1.0 - 0.5) + 0.9 * 0.8 * a1
    assert torch.allclose(adv, torch.tensor([a0, a1, a2]))
    assert torch.allclose(ret, torch.tensor([a0 + 0.5, a1 + 1.0, a2 + 1.5]))


def test_clipped_policy_loss_hand_computed():
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1]))
    adv = torch.tensor([1.0, -1.0, 2.0])
    # ratio 1.5, adv +1 -> clipped to 1.2; ratio 0.5, adv -1 -> clipped 0.8 gives -0.8; ratio 1.1 -> 2.2
    expected = -(1.2 - 0.8 + 2.2) / 3
    assert ppo.policy_loss(logp, torch.zeros(3), adv, clip=0.2).item() == pytest.approx(expected)


def test_clipped_value_loss_hand_computed():
    value, old, target = torch.tensor([0.6, 0.0, 3.0]), torch.zeros(3), torch.tensor([0.5, 1.0, 2.0])
    # 0.6 -> clipped to 0.2: max(0.01, 0.09); 0.0: 1.0 either way; 3.0 -> 0.2: max(1.0, 3.24)
    assert ppo.value_loss(value, old, target, clip=0.2).item() == pytest.approx(0.5 * (0.09 + 1.0 + 3.24) / 3)
    assert ppo.value_loss(value, old, target, clip=None).item() == pytest.approx(0.5 * (0.01 + 1.0 + 1.0) / 3)


# ------------------------------------------------------------------------------------ actor pieces
def test_masked_actions_are_never_sampled():
    env = CueGame(2, 0)
    g = ppo.make_groups(env, "shared", agent_id=True)[0]
    actor = ppo.Actor(g, [16])
    torch.nn.init.normal_(actor.net[-1].weight, std=5.0)  # peaked logits
    x = torch.randn(4096, 2, g.obs_dim + g.k)
    mask = torch.rand(4096, 2, g.n_out) < 0.5
    mask[..., 0] |= ~mask.any(-1)
    dist = actor.dist(x, mask)
    a = dist.sample()
    assert mask.gather(-1, a.unsqueeze(-1)).all()
    assert torch.isfinite(dist.entropy()).all() and torch.isfinite(dist.log_prob(a)).all()
    assert mask.gather(-1, actor.mode(x, mask).unsqueeze(-1)).all()


def test_per_group_sharing_builds_separate_nets_for_different_spaces():
    env = CueGame(2, 0, heterogeneous=True)
    groups = ppo.make_groups(env, "per_group", agent_id=True)
    assert [g.agents for g in groups] == [["a0", "a1"], ["b"]]
    assert groups[0].one_hot and not groups[1].one_hot
    assert [g.agents for g in ppo.make_groups(env, "per_agent", agent_id=True)] == [["a0"], ["a1"], ["b"]]
    with pytest.raises(ValueError, match="per_group"):
        ppo.make_groups(env, "shared", agent_id=True)

    cfg = ppo.Config(total_env_steps=64, num_envs=8, rollout_steps=4, centralised_critic=True, hidden=[8])
    out = ppo.train(cfg, _run(lambda n, s: CueGame(n, s, heterogeneous=True), cfg.total_env_steps))
    ckpt = out["checkpoint"]
    assert len(ckpt["actors"]) == len(ckpt["critics"]) == 2
    in_dims = [a["net.0.weight"].shape[1] for a in ckpt["actors"]]
    assert in_dims == [4 + 2, 5]  # cue + agent id; b's longer observation, no id
    acts = ppo.make_actor(ckpt)(CueGame(3, 1, heterogeneous=True).reset())
    assert set(acts) == {"a0", "a1", "b"} and acts["b"].shape == (3,)


def test_entity_actor_is_invariant_to_the_order_of_landmarks():
    """simple_spread declares its landmark slots; permuting them in the input leaves the logits unchanged,
    while moving a landmark changes them (the slots are read, not ignored)."""
    from teamrl.marl.envs.mpe import SimpleSpread

    env = SimpleSpread(num_envs=4, N=3, seed=0)
    step = env.reset(seed=0)
    g = ppo.make_groups(env, "per_agent", agent_id=True, entity_actor=True)[0]
    assert g.entities == (4, 3, 2)
    start, count, width = g.entities
    obs = step.obs["agent_0"]
    # the declared slots are the landmarks' positions relative to the agent
    np.testing.assert_allclose(
        obs[:, start : start + count * width].reshape(-1, count, width),
        env.landmark_pos - env.agent_pos[:, :1],
        atol=1e-6,
    )
    torch.manual_seed(0)
    actor = ppo.Actor(g, [32, 32])
    for p in actor.parameters():  # a non-trivial network (the last layer starts near zero)
        torch.nn.init.normal_(p, std=0.5)
    x = ppo.group_obs(g, step.obs)
    slots = x[..., start : start + count * width].unflatten(-1, (count, width))
    permuted = x.clone()
    permuted[..., start : start + count * width] = slots[..., [2, 0, 1], :].flatten(-2)
    moved = x.clone()
    moved[..., start] += 0.5
    with torch.no_grad():
        logits = actor.dist(x).logits
        torch.testing.assert_close(actor.dist(permuted).logits, logits, atol=1e-5, rtol=1e-5)
        assert (actor.dist(moved).logits - logits).abs().max() > 1e-3
    with pytest.raises(ValueError, match="entity_slots"):
        ppo.make_groups(CueGame(2, 0), "per_agent", agent_id=True, entity_actor=True)
    # mpe2's own simple_spread, through the generic adaptor, declares the same slots
    from teamrl.marl.envs import make_vec_env

    assert make_vec_env("mpe2:simple_spread_v3", 2, seed=0).entity_slots == env.entity_slots


def test_entity_critic_reads_the_landmarks_as_a_set_and_the_state_beside_them():
    """MAPPO's entity critic: its input is [global state, own observation]; permuting the own observation's
    landmark slots leaves the value unchanged, moving a landmark or changing the state does not."""
    from teamrl.marl.envs.mpe import SimpleSpread

    env = SimpleSpread(num_envs=4, N=3, seed=0)
    step = env.reset(seed=0)
    g = ppo.make_groups(env, "shared", agent_id=False)[0]
    state_dim = env.state_dim
    slots = ppo.entity_slots(env, g, state_dim)
    assert slots == (state_dim + 4, 3, 2)
    torch.manual_seed(0)
    critic = ppo.Critic(g.own_dim + state_dim, [32, 32], entities=slots, head_only=state_dim)
    for p in critic.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = ppo.critic_input(ppo.group_obs(g, step.obs), step.state)
    start, count, width = slots
    permuted = x.clone()
    landmarks = x[..., start : start + count * width].unflatten(-1, (count, width))
    permuted[..., start : start + count * width] = landmarks[..., [1, 2, 0], :].flatten(-2)
    moved, restated = x.clone(), x.clone()
    moved[..., start] += 0.5
    restated[..., 0] += 0.5
    with torch.no_grad():
        v = critic(x)
        assert v.shape == x.shape[:-1]
        torch.testing.assert_close(critic(permuted), v, atol=1e-5, rtol=1e-5)
        assert (critic(moved) - v).abs().max() > 1e-3
        assert (critic(restated) - v).abs().max() > 1e-3
    with pytest.raises(ValueError, match="entity_critic and shared_encoder need"):
        ppo.entity_slots(CueGame(2, 0), ppo.make_groups(CueGame(2, 0), "shared", agent_id=True)[0])
    with pytest.raises(ValueError, match="entity_critic"):
        ppo.Config(recurrent=True, entity_critic=True)
    from teamrl.config import ConfigError
    from teamrl.marl.train import resolve

    with pytest.raises(
        ConfigError, match="entity_critic and shared_encoder need"
    ):  # a clear error before training starts
        resolve("mappo", "mpe2:simple_reference_v3", {"entity_critic": True})


def test_shared_encoder_critic_reads_the_actors_features_and_its_loss_trains_the_encoder():
    """``shared_encoder``: the entity actor's distribution is its head on its features; the critic reads
    [global state, those features]; the value loss's gradient reaches the actor's slot encoder; refused
    without an entity actor, beside an entity critic or a centralised actor."""
    from teamrl.marl.envs.mpe import SimpleSpread

    env = SimpleSpread(num_envs=4, N=3, seed=0)
    step = env.reset(seed=0)
    g = ppo.make_groups(env, "shared", agent_id=False, entity_actor=True)[0]
    torch.manual_seed(0)
    actor = ppo.Actor(g, [16, 16])
    x = ppo.group_obs(g, step.obs)
    f = actor.features(x)
    assert f.shape == (*x.shape[:-1], actor.net.feature_dim)
    torch.testing.assert_close(actor.dist_of(f).logits, actor.dist(x).logits)
    critic = ppo.Critic(env.state_dim + actor.net.feature_dim, [16, 16])
    state = torch.from_numpy(step.state).float().unsqueeze(1).expand(-1, g.k, -1)
    critic(torch.cat([state, f], -1)).square().mean().backward()
    assert actor.net.encode[0].weight.grad is not None and actor.net.encode[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="only an entity actor"):
        ppo.Actor(ppo.make_groups(env, "shared", agent_id=False)[0], [16]).features(x)
    for bad in (
        {},
        {"entity_actor": True, "entity_critic": True},
        {"entity_actor": True, "centralised_actor": True},
    ):
        with pytest.raises(ValueError, match="shared_encoder"):
            ppo.Config(shared_encoder=True, **bad)
    from teamrl.config import ConfigError
    from teamrl.marl.train import resolve

    with pytest.raises(ConfigError, match="entity_slots"):  # a clear error before training starts
        resolve("mappo", "mpe2:simple_reference_v3", {"entity_actor": True, "shared_encoder": True})

    def partial(n: int, seed: int) -> SimpleSpread:  # slots declared for the first agent only
        e = SimpleSpread(num_envs=n, N=3, seed=seed)
        e.entity_slots = {e.agents[0]: e.entity_slots[e.agents[0]]}
        return e

    cfg = ppo.Config(
        total_env_steps=8, num_envs=2, entity_actor=True, shared_encoder=True, parameter_sharing="per_agent"
    )
    with pytest.raises(ValueError, match="shared_encoder need"):
        ppo.train(cfg, _run(partial, 8))


def test_the_simple_spread_preset_gives_way_where_the_users_settings_rule_a_key_out(capsys):
    """The preset reads the landmarks with the entity actor and trains the critic on its encoder; a user who
    turns the entity actor off (or asks for an entity critic, or a GRU) gets that, the preset's keys that
    need the entity actor left out with a note; a conflict in the user's own settings is still refused."""
    from teamrl.config import ConfigError
    from teamrl.marl.train import resolve

    _, cfg, _ = resolve("mappo", "simple_spread", {})
    c = cast(Any, cfg)
    preset = (c.entity_actor, c.shared_encoder, c.num_envs, c.epochs, c.lr, c.gamma, c.total_env_steps)
    assert preset == (True, True, 32, 3, 0.002, 0.85, 2_200_000)
    assert "note" not in capsys.readouterr().err
    for sets, left_out in (
        ({"entity_actor": False}, ["shared_encoder"]),
        ({"entity_critic": True}, ["shared_encoder"]),
        ({"recurrent": True}, ["shared_encoder", "entity_actor"]),
    ):
        _, cfg, _ = resolve("ippo", "simple_spread", sets)
        assert cfg.shared_encoder is False and all(  # type: ignore[attr-defined]
            getattr(cfg, k) == v for k, v in sets.items()
        )
        err = capsys.readouterr().err
        assert "simple_spread's preset" in err and all(f"{k}=True" in err for k in left_out)
        assert cfg.ent_coef == 0.03 and cfg.num_envs == 32  # type: ignore[attr-defined]  # the rest kept
    with pytest.raises(ConfigError, match="shared_encoder shares"):  # both keys the user's own
        resolve("mappo", "simple_spread", {"entity_actor": False, "shared_encoder": True})


def test_preset_config_leaves_out_the_fewest_preset_keys_and_never_the_users():
    from pydantic import BaseModel, ValidationError, model_validator

    from teamrl.marl.registry import preset_config

    class Cfg(BaseModel):
        a: bool = False
        b: bool = False
        c: int = 0

        @model_validator(mode="after")
        def _b_needs_a(self) -> Cfg:
            if self.b and not self.a:
                raise ValueError("b needs a")
            return self

    assert preset_config(Cfg, {}, {"a": True, "b": True, "c": 3}, {})[1] == []
    cfg, left = preset_config(Cfg, {}, {"a": True, "b": True, "c": 3}, {"a": False})
    assert left == ["b"] and (cfg.a, cfg.b, cfg.c) == (False, False, 3)  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="b needs a"):  # the user's own b: nothing to leave out
        preset_config(Cfg, {}, {"a": True, "c": 3}, {"a": False, "b": True})
    cfg, _ = preset_config(Cfg, {"c": 1}, {}, {"c": 5})
    assert cfg.c == 5  # type: ignore[attr-defined]


@pytest.mark.parametrize("critic", ["mlp", "entity_critic", "shared_encoder"])
def test_entity_actor_trains_and_reloads(tmp_path, critic):
    from teamrl.marl.train import evaluate_run, resume_run, train

    overrides = {
        "total_env_steps": 400,
        "num_envs": 8,
        "hidden": [16],
        "epochs": 1,
        "entity_actor": True,
        "entity_critic": critic == "entity_critic",
        "shared_encoder": critic == "shared_encoder",
    }
    summary = train("mappo", "simple_spread", overrides, tmp_path / "run", episodes=4, show_progress=False)
    again = evaluate_run(tmp_path / "run", episodes=4)
    assert again["return/mean"] == pytest.approx(summary["eval"]["return/mean"])
    checkpoint = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    first = next(w for k, w in checkpoint["critics"][0].items() if k.endswith("weight") and w.dim() == 2)
    state_dim = 54  # simple_spread, N = 3: three observations of 18
    if (
        critic != "entity_critic"
    ):  # the shared encoder's critic: the state, 2 x 16 pooled encodings, 12 others
        assert first.shape[1] == state_dim + (2 * 16 + 12 if critic == "shared_encoder" else 18)
    # the critics' shapes come from the config: a resumed run loads them back
    resumed = resume_run(tmp_path / "run", {"total_env_steps": 800}, episodes=4, show_progress=False)
    assert resumed["train"]["env_steps"] >= 800


def _quick_config(updates: int, **overrides) -> ppo.Config:
    """A small fast learner for the 4-step games: 32 copies, ``updates`` updates, a fixed learning rate."""
    return ppo.Config(
        total_env_steps=32 * 4 * updates,
        num_envs=32,
        rollout_steps=4,
        hidden=[32],
        lr=3e-3,
        epochs=4,
        minibatches=2,
        anneal_lr=False,
        **overrides,
    )


@pytest.mark.parametrize("centralised", [False, True])
def test_few_iterations_learn_the_cue_game(centralised):
    """Random play earns 1/3 per agent-step (masked game); a few updates move the weights toward 1."""
    cfg = _quick_config(25, centralised_critic=centralised)
    run = _run(lambda n, s: CueGame(n, s, masked=True), cfg.total_env_steps)
    out = ppo.train(cfg, run)
    returns = [r["return/mean"] for r in run.history if "return/mean" in r]
    assert returns[0] < 4.0  # 2 agents x 4 steps x 1/3
    assert returns[-1] > 6.5
    assert all(math.isfinite(r["loss/value"]) and r["approx_kl"] >= 0 for r in run.history)
    from teamrl.marl.evaluate import evaluate

    ev = evaluate(ppo.make_actor(out["checkpoint"]), CueGame(16, 7, masked=True), episodes=16)
    assert ev["return/mean"] > 7.0


class HelperGame(CueGame):
    """Agent a1 earns nothing itself; a0 earns 1 when a1 plays a1's cue (a0's own action does not count)."""

    def step(self, actions) -> VecStep:
        helped = (np.asarray(actions["a1"]) == self.cue["a1"]).astype(np.float32)
        step = super().step(actions)
        step.rewards["a0"], step.rewards["a1"] = helped, np.zeros_like(helped)
        return step


def test_learned_rewards_are_the_agents_own_or_the_team_sum():
    r = torch.tensor([[1.0, 2.0, 4.0], [0.0, -1.0, 0.5]])
    assert ppo.learned_rewards(r, False) is r
    assert ppo.learned_rewards(r, True).tolist() == [[7.0] * 3, [-0.5] * 3]


@pytest.mark.parametrize("team_reward", [False, True])
def test_team_reward_teaches_an_agent_whose_own_reward_is_zero(team_reward):
    """a1's help is worth 1/4 per step at random; only the team's reward tells a1 that helping pays.
    The logged returns stay per agent (a1's stays 0)."""
    cfg = _quick_config(30, centralised_critic=True, team_reward=team_reward)
    run = _run(lambda n, s: HelperGame(n, s), cfg.total_env_steps)
    ppo.train(cfg, run)
    last = [r for r in run.history if "return/a0" in r][-1]
    assert last["return/a1"] == 0.0
    if team_reward:
        assert last["return/a0"] > 2.0  # 4 steps: helped in more than half of them
    else:
        assert last["return/a0"] < 1.6  # no signal reaches a1: near chance (1.0)


def test_config_rejects_unknown_fields():
    with pytest.raises(Exception, match="extra"):
        ppo.Config(learning_rate=1.0)
    assert json.loads(ppo.Config().model_dump_json())["parameter_sharing"] == "per_group"


# --------------------------------------------------------------------------------- driver (CLI, API)
def test_python_api_writes_a_run_dir_and_eval_reads_it_back(tmp_path):
    from teamrl.marl.train import evaluate_run, train

    overrides = {"total_env_steps": 400, "num_envs": 8, "rollout_steps": 25, "hidden": [16], "epochs": 1}
    summary = train("mappo", "simple_spread", overrides, tmp_path / "run", episodes=8, show_progress=False)
    run_dir = tmp_path / "run"
    for name in ("config.yaml", "metrics.jsonl", "checkpoint.pt", "learning_curve.png", "eval.json"):
        assert (run_dir / name).is_file(), name
    assert any((run_dir / "tb").iterdir())
    import yaml

    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["algorithm"] == "mappo" and resolved["config"]["centralised_critic"] is True
    assert summary["eval"]["episodes"] == 8 and summary["train"]["env_steps"] == 400
    again = evaluate_run(run_dir, episodes=8)
    assert again["return/mean"] == pytest.approx(summary["eval"]["return/mean"])  # deterministic, same seed
    assert json.loads((run_dir / "eval.json").read_text())["policy"] == "deterministic"
    # the sampled policy (EPyMARL's protocol): its own file, seeded, the deterministic record kept
    sampled = evaluate_run(run_dir, episodes=8, sampled=True)
    assert sampled["policy"] == "sampled" and sampled["returns"] != again["returns"]
    assert evaluate_run(run_dir, episodes=8, sampled=True)["returns"] == sampled["returns"]
    assert json.loads((run_dir / "eval_sampled.json").read_text())["policy"] == "sampled"
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == again["returns"]


def test_cli_train_and_eval(tmp_path, capsys):
    from teamrl.cli import main

    args = [
        "marl",
        "train",
        "--algo",
        "ippo",
        "--env",
        "simple_spread",
        "--out",
        str(tmp_path),
        "--name",
        "r",
    ]
    args += ["--set", "total_env_steps=200", "--set", "num_envs=8", "--set", "hidden=[8]", "--episodes", "4"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "summed over all agents" in out and "4 episodes" in out
    assert main(["marl", "eval", str(tmp_path / "r"), "--episodes", "4"]) == 0
    assert "ippo on simple_spread" in capsys.readouterr().out
    assert main(["marl", "eval", str(tmp_path / "r"), "--episodes", "4", "--sampled"]) == 0
    assert "sampled policy" in capsys.readouterr().out and (tmp_path / "r" / "eval_sampled.json").is_file()
    # a checkpoint whose settings this version does not know: one clear line, no trace
    ckpt = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)
    ckpt["config"]["entropy_schedule"] = "cosine"
    torch.save(ckpt, tmp_path / "r" / "checkpoint.pt")
    assert main(["marl", "eval", str(tmp_path / "r"), "--episodes", "4"]) == 2
    err = capsys.readouterr().err
    assert (
        "settings do not fit this teamrl: unknown key 'entropy_schedule' for ippo" in err
        and "Traceback" not in err
    )


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["lrr=0.1"], "unknown key 'lrr' for mappo; did you mean 'lr'? valid keys: "),
        (
            ["parameter_sharing=everyone"],
            "parameter_sharing: Input should be 'shared', 'per_agent' or 'per_group'",
        ),
        (["centralised_critic=false"], "centralised_critic is fixed to True by the algorithm 'mappo'"),
        (["lr"], "--set expects key=value"),
    ],
)
def test_cli_bad_set_is_one_clean_line(tmp_path, capsys, sets, expected):
    from teamrl.cli import main

    args = ["marl", "train", "--algo", "mappo", "--env", "simple_spread", "--out", str(tmp_path)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing written
