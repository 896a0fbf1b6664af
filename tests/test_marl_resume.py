"""``teamrl marl train --resume`` and the evaluation curve during training (issue 23)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from teamrl.config import ConfigError
from teamrl.marl.train import resume_run, train

SMALL = {"num_envs": 8, "rollout_steps": 25, "hidden": [16], "epochs": 1, "checkpoint_every": 400}


def _train(path, total: int, **kw):  # noqa: ANN001, ANN202
    overrides = {**SMALL, "total_env_steps": total}
    return train("mappo", "simple_spread", overrides, path, episodes=8, show_progress=False, **kw)


def _rows(path) -> list[dict]:  # noqa: ANN001
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def _adam_steps(path) -> float:  # noqa: ANN001
    state = torch.load(path / "checkpoint.pt", weights_only=False)["optimizer"]["state"]
    return float(next(iter(state.values()))["step"])


def test_a_run_killed_mid_way_resumes_with_the_same_schedule_and_optimizer(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Killed after its 600th step (checkpoint at 400), then resumed: the same updates, learning rates and
    optimizer step count as an uninterrupted run; the log row written after the checkpoint (and a line cut
    by the kill) move aside, not lost; the curve's steps only go forward."""
    from teamrl.marl.run import RunContext

    whole, part = tmp_path / "whole", tmp_path / "part"
    _train(whole, 800, eval_every=0)
    log = RunContext.log

    def killed_at_600(self, step, metrics):  # noqa: ANN001, ANN202
        log(self, step, metrics)
        if step == 600:
            with (self.run_dir / "metrics.jsonl").open("a") as fh:
                fh.write('{"step": 8')
            raise KeyboardInterrupt

    monkeypatch.setattr(RunContext, "log", killed_at_600)
    with pytest.raises(KeyboardInterrupt):
        _train(part, 800, eval_every=0)
    monkeypatch.setattr(RunContext, "log", log)
    summary = resume_run(part, episodes=8, show_progress=False)
    assert summary["train"]["env_steps"] == 800
    rows, reference = _rows(part), _rows(whole)
    assert [r["step"] for r in rows] == [r["step"] for r in reference] == [200, 400, 600, 800]
    assert [r["lr"] for r in rows] == pytest.approx([r["lr"] for r in reference])
    assert _adam_steps(part) == _adam_steps(whole) == 8.0  # 4 updates x 2 minibatches
    discarded = [json.loads(line) for line in (part / "metrics.discarded.jsonl").read_text().splitlines()]
    assert [r.get("step") for r in discarded] == [600, None] and discarded[1]["unreadable"]
    assert all(r["discarded_on_resume_from"] == 400 for r in discarded)
    with pytest.raises(ConfigError, match="trained its 800 env steps already"):
        resume_run(part, show_progress=False)


def test_a_finished_run_is_trained_further(tmp_path) -> None:  # noqa: ANN001
    run = tmp_path / "r"
    _train(run, 400, eval_every=0)
    summary = resume_run(run, {"total_env_steps": 800}, episodes=8, show_progress=False)
    assert summary["train"]["env_steps"] == 800 and _adam_steps(run) == 8.0
    assert [r["step"] for r in _rows(run)] == [200, 400, 600, 800]
    assert yaml.safe_load((run / "config.yaml").read_text())["config"]["total_env_steps"] == 800


def test_a_resume_restores_the_checkpoint_exactly(tmp_path) -> None:  # noqa: ANN001
    from teamrl.marl import ppo

    _train(tmp_path / "r", 400, eval_every=0)
    checkpoint = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)
    cfg = ppo.Config(**checkpoint["config"])
    from teamrl.marl.envs import make_vec_env

    env = make_vec_env("simple_spread", 8, 0)  # modules built as the trainer builds them, then restored
    groups = ppo.make_groups(env, cfg.parameter_sharing, cfg.agent_id, cfg.entity_actor)
    actors = torch.nn.ModuleList([ppo.Actor(g, cfg.hidden, cfg.activation) for g in groups])
    assert cfg.shared_encoder  # simple_spread's preset: the critic reads the entity actor's features
    critics = torch.nn.ModuleList(
        [ppo.Critic(a.net.feature_dim + env.state_dim, cfg.hidden, cfg.activation) for a in actors]
    )
    optimizer = torch.optim.Adam([*actors.parameters(), *critics.parameters()], lr=cfg.lr, eps=1e-5)
    iteration, steps = ppo.restore(checkpoint, actors, critics, optimizer, list(env.agents))
    assert (iteration, steps) == (2, 400)
    for mine, saved in zip([*actors, *critics], [*checkpoint["actors"], *checkpoint["critics"]], strict=True):
        for key, value in mine.state_dict().items():
            assert torch.equal(value, saved[key]), key  # value normalisers included
    assert torch.equal(torch.get_rng_state(), checkpoint["torch_rng"])
    with pytest.raises(ValueError, match="agents"):
        ppo.restore(checkpoint, actors, critics, optimizer, ["someone"])


def test_an_old_checkpoint_is_refused_before_anything_changes(tmp_path) -> None:  # noqa: ANN001
    run = tmp_path / "r"
    _train(run, 400, eval_every=0)
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=False)
    del checkpoint["optimizer"]
    torch.save(checkpoint, run / "checkpoint.pt")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(ConfigError, match="can be evaluated, not resumed"):
        resume_run(run, {"total_env_steps": 800}, show_progress=False)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    with pytest.raises(ConfigError, match="only total_env_steps may be set"):
        resume_run(run, {"lr": 0.1}, show_progress=False)
    with pytest.raises(ConfigError, match="not found"):
        resume_run(tmp_path / "nothing", show_progress=False)


def test_the_evaluation_curve_changes_nothing_in_training(tmp_path) -> None:  # noqa: ANN001
    """Evaluations every 200 steps on the same fixed episodes: logged as eval/ rows, the last on the final
    policy (equal to the final evaluation on as many episodes), and training identical to a run without."""
    with_eval = _train(tmp_path / "e", 800, eval_every=200, eval_episodes=8)
    without = _train(tmp_path / "n", 800, eval_every=0)
    evals = [r for r in _rows(tmp_path / "e") if "eval/return/mean" in r]
    assert [r["step"] for r in evals] == [200, 400, 600, 800]
    assert not any("eval/return/mean" in r for r in _rows(tmp_path / "n"))
    assert evals[-1]["eval/return/mean"] == pytest.approx(with_eval["eval"]["return/mean"])
    a = torch.load(tmp_path / "e" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "n" / "checkpoint.pt", weights_only=False)
    for x, y in zip(a["actors"], b["actors"], strict=True):
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert with_eval["eval"]["return/mean"] == pytest.approx(without["eval"]["return/mean"])


def test_a_sampled_evaluation_curve_is_seeded_and_kept_on_resume(tmp_path) -> None:  # noqa: ANN001
    """``eval_sampled``: the curve's evaluations sample the policy's actions (seeded: a rerun logs the same
    curve), training is the same as without it, the final policy is evaluated both ways (its last point is
    the sampled evaluation), and a resumed run keeps sampling."""
    sampled = _train(tmp_path / "s", 800, eval_every=400, eval_episodes=8, eval_sampled=True)
    _train(tmp_path / "a", 800, eval_every=400, eval_episodes=8, eval_sampled=True)
    plain = _train(tmp_path / "p", 800, eval_every=400, eval_episodes=8)
    curve = [r["eval/return/mean"] for r in _rows(tmp_path / "s") if "eval/return/mean" in r]
    assert curve == [r["eval/return/mean"] for r in _rows(tmp_path / "a") if "eval/return/mean" in r]
    assert curve != [r["eval/return/mean"] for r in _rows(tmp_path / "p") if "eval/return/mean" in r]
    assert sampled["eval"]["return/mean"] == pytest.approx(plain["eval"]["return/mean"])  # same training
    assert sampled["eval"]["policy"] == "deterministic" and "eval_sampled" not in plain
    assert sampled["eval_sampled"]["policy"] == "sampled"
    assert curve[-1] == pytest.approx(sampled["eval_sampled"]["return/mean"])
    assert json.loads((tmp_path / "s" / "eval_sampled.json").read_text())["policy"] == "sampled"
    assert yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())["eval_sampled"] is True
    resumed = resume_run(tmp_path / "s", {"total_env_steps": 1200}, episodes=8, show_progress=False)
    assert resumed["eval_sampled"]["policy"] == "sampled"
    assert len([r for r in _rows(tmp_path / "s") if "eval/return/mean" in r]) == 3


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--resume", "R", "--algo", "ippo"], "--resume continues a run with its own config: drop --algo"),
        (["--algo", "ippo"], "needs --env (or --resume RUN_DIR)"),
        (
            ["--resume", "R", "--eval-sampled"],
            "--resume continues a run with its own config: drop --eval-sampled",
        ),
        (["--resume", "QMIX"], "--resume is not supported for qmix yet (it is for ippo, maddpg, mappo)"),
    ],
)
def test_cli_resume_errors_are_one_clean_line(tmp_path, capsys, monkeypatch, args, expected) -> None:  # noqa: ANN001
    from teamrl.cli import main
    from teamrl.marl import qmix as qmix_module

    # every built-in algorithm resumes; one that cannot (a plugin's, say) is refused plainly
    if "QMIX" in args:
        monkeypatch.setattr(qmix_module, "RESUMABLE", False)
    qmix = tmp_path / "qmix"
    qmix.mkdir()
    (qmix / "config.yaml").write_text(yaml.safe_dump({"algorithm": "qmix", "env": "simple_spread"}))
    (qmix / "checkpoint.pt").write_bytes(b"")
    args = [{"R": str(tmp_path / "r"), "QMIX": str(qmix)}.get(a, a) for a in args]
    assert main(["marl", "train", *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and err.count("\n") == 1


def test_cli_resume(tmp_path, capsys) -> None:  # noqa: ANN001
    from teamrl.cli import main

    base = [
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
    sets = ["--set", "total_env_steps=200", "--set", "num_envs=8", "--set", "hidden=[8]", "--episodes", "4"]
    assert main([*base, *sets]) == 0
    capsys.readouterr()
    run = str(tmp_path / "r")
    assert main(["marl", "train", "--resume", run, "--set", "total_env_steps=400", "--episodes", "4"]) == 0
    assert "ippo on simple_spread" in capsys.readouterr().out
    assert [r["step"] for r in _rows(tmp_path / "r") if "lr" in r] == [200, 400]


OFF_POLICY = {
    "qmix": {"num_envs": 8, "batch_size": 4, "rnn_hidden": 8, "mixing_embed_dim": 8, "hypernet_embed": 8},
    "maddpg": {"num_envs": 8, "batch_size": 32, "hidden": [8], "learning_starts": 100, "train_every": 50},
}


@pytest.mark.parametrize("algo", sorted(OFF_POLICY))
def test_an_off_policy_run_resumes_with_its_replay_targets_and_optimizer(tmp_path, algo: str) -> None:  # noqa: ANN001
    """QMIX and MADDPG: a run trained further continues its replay (the rows it had, unchanged, then new
    ones), its optimizer's step count and its log; the evaluation maps the checkpoint's replay."""
    run = tmp_path / "r"
    sets = {**OFF_POLICY[algo], "log_every": 200, "checkpoint_every": 200}
    train(algo, "simple_spread", {**sets, "total_env_steps": 400}, run, episodes=4, show_progress=False)
    first = torch.load(run / "checkpoint.pt", weights_only=False)
    summary = resume_run(run, {"total_env_steps": 800}, episodes=4, show_progress=False)
    last = torch.load(run / "checkpoint.pt", weights_only=False)
    trained = [r["step"] for r in _rows(run) if "agent_steps_per_s" in r]
    assert summary["train"]["env_steps"] == 800 and trained == [200, 400, 600, 800]
    n = first["replay"]["size"]
    assert 0 < n < last["replay"]["size"]
    for key, saved in first["replay"]["arrays"].items():
        for a, b in zip(_as_list(saved), _as_list(last["replay"]["arrays"][key]), strict=True):
            assert torch.equal(a, b[:n]), key
    opt = "optimizer" if algo == "qmix" else "optimizers"

    def adam_steps(ckpt: dict) -> float:
        state = ckpt[opt] if algo == "qmix" else ckpt[opt]["critics"][0]
        return float(next(iter(state["state"].values()))["step"])

    assert adam_steps(last) > adam_steps(first) > 0


def _as_list(x):  # noqa: ANN001, ANN202
    return x if isinstance(x, list) else [x]


@pytest.mark.parametrize("algo", sorted(OFF_POLICY))
def test_an_off_policy_checkpoint_without_its_replay_is_refused(tmp_path, algo: str) -> None:  # noqa: ANN001
    run = tmp_path / "r"
    sets = {**OFF_POLICY[algo], "log_every": 200, "checkpoint_every": 200, "total_env_steps": 200}
    train(algo, "simple_spread", sets, run, episodes=4, show_progress=False)
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=False)
    del checkpoint["replay"]
    torch.save(checkpoint, run / "checkpoint.pt")
    with pytest.raises(ConfigError, match="has no replay .*can be evaluated, not resumed"):
        resume_run(run, {"total_env_steps": 400}, show_progress=False)
