"""KD-MARL (issue 21): students learn the teacher's policy from its labels on their own states; FLOPs
counted by a documented formula, checked on a small net; the student is a checkpoint `teamrl marl eval`
reads."""

from __future__ import annotations

import pytest
import torch

from teamrl.marl import ppo
from teamrl.marl.distill import Config, distill, flops_per_action, mlp_flops, return_kept
from teamrl.marl.envs import make_vec_env
from teamrl.marl.evaluate import evaluate

torch.set_num_threads(1)


def _train_teacher(tmp_path, **settings) -> dict:  # noqa: ANN001, ANN003
    """A MAPPO run of 400 steps on simple_spread in ``tmp_path / "t"``; its checkpoint."""
    from teamrl.marl.train import train

    overrides = {"total_env_steps": 400, "num_envs": 8, "hidden": [32, 32], "epochs": 1, **settings}
    train("mappo", "simple_spread", overrides, tmp_path / "t", episodes=2, show_progress=False, eval_every=0)
    return torch.load(tmp_path / "t" / "checkpoint.pt", weights_only=False)


def _teacher(tmp_path, entity: bool) -> dict:  # noqa: ANN001
    """A small trained teacher whose last layer is sharpened, so that its policy is nearly deterministic
    (a clear target to imitate)."""
    checkpoint = _train_teacher(tmp_path, entity_actor=entity)
    for state in checkpoint["actors"]:
        last = max(k for k in state if k.endswith("weight"))
        state[last] = state[last] * 400.0
    return checkpoint


def test_flops_follow_the_formula_on_an_mlp() -> None:
    assert mlp_flops([18, 64, 64, 5]) == 2 * (18 * 64 + 64 * 64 + 64 * 5)
    env = make_vec_env("simple_spread", 2, 0)
    groups = ppo.make_groups(env, "shared", agent_id=False)
    actor = ppo.Actor(groups[0], [16], "relu")
    checkpoint = {"config": {"hidden": [16]}, "groups": [vars(groups[0])], "actors": [actor.state_dict()]}
    assert flops_per_action(checkpoint) == mlp_flops([groups[0].in_dim, 16, groups[0].n_out])


def test_students_learn_the_teacher_s_policy(tmp_path) -> None:  # noqa: ANN001
    teacher = _teacher(tmp_path, entity=True)
    make = lambda n, s: make_vec_env("simple_spread", n, s)  # noqa: E731
    cfg = Config(hidden=[32], rounds=4, num_envs=32, steps_per_round=25, epochs=6, lr=1e-2)
    rows: list[dict] = []
    student = distill(teacher, make, cfg, progress=rows.append)
    assert [r["round"] for r in rows] == [0, 1, 2, 3] and rows[-1]["states"] > rows[0]["states"]
    assert rows[-1]["agreement"] > 0.8 and rows[-1]["kl"] < rows[0]["kl"]
    # the student acts like the teacher on fresh states: deterministic actions agree mostly
    env = make_vec_env("simple_spread", 64, 777)
    step = env.reset(seed=777)
    t_act, s_act = ppo.make_actor(teacher)(step), ppo.make_actor(student)(step)
    same = sum((t_act[a] == s_act[a]).mean() for a in env.agents) / len(env.agents)
    assert same > 0.7
    assert flops_per_action(student) < flops_per_action(teacher)  # the entity teacher costs more
    assert student["config"]["entity_actor"] is False and student["config"]["hidden"] == [32]
    result = evaluate(ppo.make_actor(student), make_vec_env("simple_spread", 8, 1), 8, seed=1)
    assert result["episodes"] == 8


def test_return_kept() -> None:
    from teamrl.marl.distill import _kept

    assert return_kept(-30.0, -25.0, -75.0) == pytest.approx(45 / 50)
    for teacher in (-75.0, -90.0):  # level with random, or worse: no gain to share
        with pytest.raises(ValueError, match="no better than random"):
            return_kept(-30.0, teacher, -75.0)
        assert _kept(-30.0, teacher, -75.0) is None
    assert _kept(-30.0, -25.0, -75.0) == pytest.approx(0.9)


def test_continuous_teachers_are_refused(tmp_path) -> None:  # noqa: ANN001
    from teamrl.marl.train import train

    overrides = {"total_env_steps": 200, "num_envs": 4, "hidden": [8], "epochs": 1, "entity_actor": False}
    train(
        "ippo",
        "simple_spread",
        {**overrides, "env.continuous_actions": True},
        tmp_path / "c",
        episodes=2,
        show_progress=False,
        eval_every=0,
    )
    checkpoint = torch.load(tmp_path / "c" / "checkpoint.pt", weights_only=False)
    with pytest.raises(ValueError, match="continuous actions"):
        distill(
            checkpoint,
            lambda n, s: make_vec_env("simple_spread", n, s, continuous_actions=True),
            Config(rounds=1),
        )


def test_cli_distill_writes_a_student_run(tmp_path, capsys) -> None:  # noqa: ANN001
    import json

    from teamrl.cli import main

    _teacher(tmp_path, entity=False)
    args = ["marl", "distill", str(tmp_path / "t"), "--out", str(tmp_path / "s"), "--episodes", "8"]
    args += [
        "--set",
        "rounds=2",
        "--set",
        "hidden=[8]",
        "--set",
        "num_envs=16",
        "--set",
        "steps_per_round=10",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "of the teacher's gain over random" in out and "fewer FLOPs" in out
    summary = json.loads((tmp_path / "s" / "distill.json").read_text())
    assert summary["flops_ratio"] == pytest.approx(
        summary["flops_per_action"]["teacher"] / summary["flops_per_action"]["student"]
    )
    assert main(["marl", "eval", str(tmp_path / "s"), "--episodes", "8"]) == 0
    assert main([*args[:3], "--out", str(tmp_path / "s")]) == 2  # not empty: refused
    assert (
        main(["marl", "distill", str(tmp_path / "t"), "--out", str(tmp_path / "x"), "--set", "roundz=2"]) == 2
    )
    err = capsys.readouterr().err
    assert "unknown key 'roundz'" in err and "Traceback" not in err


def test_a_centralised_teacher_is_distilled_into_decentralised_students(tmp_path) -> None:  # noqa: ANN001
    """The KD-MARL setting: the teacher's actor sees the global state, the students only their own
    observation; FLOPs are counted on each one's own input."""
    teacher = _train_teacher(tmp_path, entity_actor=False, centralised_actor=True)
    env = make_vec_env("simple_spread", 4, 3)
    [g] = teacher["groups"]
    assert g["state_dim"] == env.state_dim == 3 * g["obs_dim"]
    in_dim = g["obs_dim"] + env.state_dim  # no agent id in the preset
    assert flops_per_action(teacher) == mlp_flops([in_dim, 32, 32, g["n_out"]])
    step = env.reset(seed=3)
    actions = ppo.make_actor(teacher)(step)  # it acts on the global state, which it is given
    assert set(actions) == set(env.agents)
    # the state matters to it: another state, same own observations, other logits
    groups, [actor] = ppo.load_actors(teacher)
    x = ppo.actor_input(groups[0], step.obs, step.state)
    other = ppo.actor_input(groups[0], step.obs, step.state[::-1].copy())
    assert not torch.allclose(actor.net(x), actor.net(other))
    cfg = Config(hidden=[16], rounds=2, num_envs=8, steps_per_round=10)
    student = distill(teacher, lambda n, s: make_vec_env("simple_spread", n, s), cfg)
    assert student["groups"][0]["state_dim"] == 0 and student["config"]["centralised_actor"] is False
    assert flops_per_action(student) == mlp_flops([g["obs_dim"], 16, g["n_out"]])
    result = evaluate(ppo.make_actor(student), make_vec_env("simple_spread", 4, 1), 4, seed=1)
    assert result["episodes"] == 4


def test_load_weights_fits_actors_and_keeps_critics_only_where_they_fit() -> None:
    from torch import nn

    from teamrl.marl.ppo_nets import load_weights

    env = make_vec_env("simple_spread", 2, 0)
    [g] = ppo.make_groups(env, "shared", agent_id=False)
    actors = nn.ModuleList([ppo.Actor(g, [16])])
    critics = nn.ModuleList([ppo.Critic(g.in_dim + env.state_dim, [16, 16])])
    source_actor, source_critic = ppo.Actor(g, [16]), ppo.Critic(g.in_dim + env.state_dim, [16, 16])
    weights = {"actors": [source_actor.state_dict()], "critics": [source_critic.state_dict()]}
    assert load_weights(weights, actors, critics) is True
    assert torch.equal(critics[0].state_dict()["net.0.weight"], source_critic.state_dict()["net.0.weight"])
    narrow = {"actors": [source_actor.state_dict()], "critics": [ppo.Critic(g.in_dim, [8]).state_dict()]}
    fresh = ppo.Critic(g.in_dim + env.state_dim, [16, 16])
    critics = nn.ModuleList([fresh])
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    assert load_weights(narrow, actors, critics) is False  # the critic does not fit: it starts fresh
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())
    with pytest.raises(ValueError, match="actor 0 does not fit"):
        load_weights({"actors": [ppo.Actor(g, [8]).state_dict()]}, actors, critics)
    with pytest.raises(ValueError, match="have 0 actor"):
        load_weights({}, actors, critics)


def test_distill_then_finetune_starts_from_the_student(tmp_path) -> None:  # noqa: ANN001
    """`teamrl marl distill --set finetune_env_steps=N`: a PPO run in the student's directory that starts
    from the distilled actors and the teacher's critics, counts its own env steps, and is reported."""
    import json

    from teamrl.marl.distill import distill_run

    _train_teacher(tmp_path, entity_actor=False)
    settings = {"hidden": [16], "rounds": 2, "num_envs": 8, "steps_per_round": 10}
    settings.update(finetune_env_steps=256, finetune_lr=1e-12)  # a step too small to move the weights
    summary = distill_run(tmp_path / "t", tmp_path / "s", settings, episodes=4, show_progress=False)
    assert summary["finetune"]["env_steps"] == 256 and "finetuned" in summary["returns"]
    distilled = torch.load(tmp_path / "s" / "distilled.pt", weights_only=False)
    tuned = torch.load(tmp_path / "s" / "checkpoint.pt", weights_only=False)
    assert tuned["env_steps"] >= 256 and distilled["env_steps"] == 0
    for key, value in distilled["actors"][0].items():  # it started from the distilled student
        assert torch.allclose(tuned["actors"][0][key], value, atol=1e-6), key
    rows = [json.loads(line) for line in (tmp_path / "s" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["init/critics_loaded"] == 1.0  # the teacher's critics fit the student's run
    kept = json.loads((tmp_path / "s" / "distill.json").read_text())["finetune"]["return_kept"]
    assert kept is None or isinstance(kept, float)  # None: a teacher of 400 steps no better than random


def test_a_teacher_whose_critic_reads_its_actor_encoder_distils_and_finetunes(tmp_path, capsys) -> None:  # noqa: ANN001
    """simple_spread's preset trains the critic on the entity actor's encoder (shared_encoder): the MLP
    student has no such encoder, so its config drops the option (it loads and acts) and fine-tuning starts
    its critics fresh instead of loading ones that read features it does not compute."""
    import json

    from teamrl.cli import main

    teacher = _train_teacher(tmp_path)
    assert teacher["config"]["shared_encoder"] is True and teacher["config"]["entity_actor"] is True
    args = ["marl", "distill", str(tmp_path / "t"), "--out", str(tmp_path / "s"), "--episodes", "4"]
    for setting in ("rounds=1", "hidden=[8]", "num_envs=8", "steps_per_round=5", "finetune_env_steps=200"):
        args += ["--set", setting]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "of the teacher's gain over random" in out and "fine-tuned by PPO" in out
    student = torch.load(tmp_path / "s" / "distilled.pt", weights_only=False)
    assert student["config"]["shared_encoder"] is False and student["config"]["entity_actor"] is False
    step = make_vec_env("simple_spread", 4, 3).reset(seed=3)
    assert set(ppo.make_actor(student)(step)) == set(teacher["agents"])
    rows = [json.loads(line) for line in (tmp_path / "s" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["init/critics_loaded"] == 0.0
