"""The Ray backend on a tiny run: one rollout worker with the learner and sandbox workers as actors
plays exactly the local run (interrupted and resumed on the way), two workers match it within noise, a
rollout worker killed mid-rollout is replaced and its share retried, a sandbox worker killed mid-check
is replaced and the check retried, an unreachable cluster fails fast, and without Ray the CLI says how
to install it. One local Ray instance serves the whole module."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import random
import socket
import threading
import time
from pathlib import Path

import pytest
import torch
from test_trainer import SMALL
from trainer_spy import record_updates

from teamrl.cli import main as cli_main
from teamrl.config import ConfigError, load_config
from teamrl.engine.team import Team
from teamrl.tasks.sandbox.calls import clear_cache
from teamrl.trainer.build import build_sandbox, build_suite, embedded_checkpoint, expert_seats, play_episode
from teamrl.trainer.trainer import Trainer

# Stronger than SMALL alone, so that some turns parse and rewards differ within groups: every trained
# adapter then gets a non-zero advantage and moves.
TINY_RUN = SMALL + [
    "policies.default.embedded.steps=300",
    "policies.default.embedded.batch_size=8",
    "policies.default.embedded.lr=1e-2",
    "recipe.sft.demo_episodes=16",
    "recipe.sft.lr=1e-2",
    "algorithm.group_size=4",
    "algorithm.tasks_per_iteration=3",
    "run.eval_each_phase=false",
]
TRAINED, FROZEN = ("coder", "reviewer"), ("planner", "tester")

torch.set_num_threads(1)  # the base is built before any Trainer sets run.threads


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    # 8 logical CPUs (on however many cores): the one-worker run's actors live as long as the module
    ray.init("local", num_cpus=8, include_dashboard=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One embedded base, built up front, for every run (and every Ray worker) of the module."""
    path = tmp_path_factory.mktemp("base")
    cfg = load_config(overrides=TINY_RUN + [f"policies.default.embedded.cache_dir={path}"])
    embedded_checkpoint(cfg, cfg.policies["default"], progress=False)
    return path


def tiny_trainer(cache: Path, run_dir: Path, *overrides: str) -> Trainer:
    torch.manual_seed(0)  # the same LoRA initialisation for every run of this process
    cfg = load_config(overrides=TINY_RUN + [f"policies.default.embedded.cache_dir={cache}", *overrides])
    return Trainer(cfg, run_dir)


def learning_rows(run_dir: Path) -> list[dict[str, float]]:
    """The metrics of a run except timings and throughputs."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def record_update_fingerprints(trainer: Trainer, seen: list[dict[str, str]]) -> list[dict[str, str]]:
    """``seen``, to which the driver's fingerprints after each of the trainer's updates are appended."""
    update = trainer.update

    def recorded(episodes, roles):
        stats = update(episodes, roles)
        seen.append(trainer.fingerprints())
        return stats

    trainer.update = recorded
    return seen


@pytest.fixture(scope="module")
def local_run(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Trainer:
    trainer = tiny_trainer(cache, tmp_path_factory.mktemp("local") / "run")
    trainer.updates = record_update_fingerprints(trainer, [])
    trainer.fit()
    return trainer


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def one_worker_run(ray_instance, cache: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny run on one rollout worker, the learner actor and sandbox workers, stopped in its second
    RL iteration (after the first one's checkpoint) and resumed by a new trainer with new actors."""
    run_dir = tmp_path_factory.mktemp("ray1") / "run"
    ray_run = ("run.backend=ray", "ray.num_rollout_workers=1")
    first = tiny_trainer(cache, run_dir, *ray_run)
    updates = record_update_fingerprints(first, [])
    rollout, calls = first.rollout, []

    def stops_in_the_second_iteration(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the evaluation after SFT, iteration 1, iteration 2
            raise Interrupted
        return rollout(*args, **kwargs)

    first.rollout = stops_in_the_second_iteration
    with pytest.raises(Interrupted):
        first.fit()
    first.close()
    trainer = Trainer(load_config(run_dir / "config.yaml"), run_dir, resume=True)
    trainer.updates = record_update_fingerprints(trainer, updates)  # the first trainer's, then its own
    trainer.fit()
    yield trainer
    trainer.close()


def test_one_ray_worker_plays_exactly_the_local_run(one_worker_run, local_run):
    trainer = one_worker_run
    assert trainer.remote is not None and trainer.remote.replacements == 0
    # Same seed, same episodes: worker 0 continues the driver's RNG stream with the driver's weights, and
    # the learner actor makes the local learner's updates (from the checkpoint's optimizers once resumed).
    assert learning_rows(trainer.run_dir) == learning_rows(local_run.run_dir)
    assert len(trainer.updates) == 2 and trainer.updates == local_run.updates
    assert trainer.fingerprints() == local_run.fingerprints()
    driver = {f"default/{r}": trainer.policy_of(r).fingerprint(r) for r in TRAINED + FROZEN}
    (worker,) = trainer.remote.adapter_fingerprints()
    assert worker == driver
    learner = trainer.learner.adapter_fingerprints()
    assert {k: learner[k] for k in driver} == driver
    assert all(learner[f"default/ref_{r}"] == trainer.policy_of(r).fingerprint(f"ref_{r}") for r in TRAINED)


def test_a_share_that_loses_its_worker_too_often_stops_the_rollout(one_worker_run, ray_instance, monkeypatch):
    from teamrl.distributed import RolloutWorkerLost

    trainer = one_worker_run
    pool = trainer.remote
    monkeypatch.setattr(trainer.cfg.ray, "max_retries", 0)
    submit = pool._submit

    def submit_and_kill(i, *args):
        ref = submit(i, *args)
        ray_instance.kill(pool.workers[i])
        return ref

    monkeypatch.setattr(pool, "_submit", submit_and_kill)
    with pytest.raises(RolloutWorkerLost, match=r"share of 2 tasks, on all 1 tries \(ray.max_retries=0\)"):
        trainer.rollout(trainer.suite.fixed_set("train", 2), 2)


def kill_later(ray, handle, ref, delay_s: float, killed_in_flight: list[bool]) -> None:
    """Kill the actor ``handle`` in ``delay_s``, noting in ``killed_in_flight`` whether ``ref`` was still
    running then."""

    def kill() -> None:
        ready, _ = ray.wait([ref], timeout=0)
        killed_in_flight.append(not ready)
        ray.kill(handle)

    threading.Timer(delay_s, kill).start()


def test_two_ray_workers_survive_a_worker_killed_mid_rollout(
    ray_instance, local_run, cache, tmp_path, monkeypatch
):
    trainer = tiny_trainer(cache, tmp_path / "run", "run.backend=ray", "ray.num_rollout_workers=2")
    updates = record_updates(trainer, monkeypatch)
    pool = trainer.remote
    assert pool is not None
    calls, killed_in_flight = [], []
    submit = pool._submit

    def submit_and_kill_worker0_on_its_second_call(i, *args):
        ref = submit(i, *args)
        calls.append(i)
        if i == 0 and calls.count(0) == 2:  # the first RL iteration (the first call is the SFT evaluation)
            kill_later(ray_instance, pool.workers[0], ref, 0.1, killed_in_flight)
        return ref

    pool._submit = submit_and_kill_worker0_on_its_second_call
    sizes: list[int] = []
    rollout = trainer.rollout

    def counted(tasks, group_size, share=frozenset(), seed_key=None):
        episodes = rollout(tasks, group_size, share, seed_key)
        sizes.append(len(episodes))
        assert len(episodes) == len(tasks) * group_size
        assert [e.task_id for e in episodes[::group_size]] == [t.task_id for t in tasks]
        return episodes

    trainer.rollout = counted
    try:
        summary = trainer.fit()
        fit_calls = list(calls)
        workers = pool.adapter_fingerprints()
        # the same weights, 48 held-out episodes played by the two workers, then by the local engine
        tasks = trainer.suite.fixed_set("heldout", 24)
        torch.manual_seed(1)
        on_ray = rollout(tasks, 2)
        trainer.remote = None
        torch.manual_seed(1)
        in_process = rollout(tasks, 2)
    finally:
        trainer.remote = pool
        trainer.close()

    assert killed_in_flight == [True] and pool.replacements == 1
    assert fit_calls.count(0) == 5  # 2 evaluations + 2 iterations + the retry
    assert sizes == [6, 12, 12, 6]  # 3 held-out tasks x 2 samples, 3 tasks x 4 teams, ...
    assert [e["label"] for e in summary["evals"]] == ["after_sft", "after_rl"]
    # every trained adapter with a non-zero advantage in some update moved from its SFT snapshot (in a
    # run this small a role's group rewards can all be equal), at least one did, the frozen ones did not
    learned = {r for roles, skipped, _ in updates for r in roles if r not in skipped}
    assert learned
    for role in TRAINED:
        policy = trainer.policy_of(role)
        moved = policy.fingerprint(role) != policy.fingerprint(f"ref_{role}")
        assert moved == (role in learned)
    for role in FROZEN:
        assert trainer.policy_of(role).fingerprint(role) == trainer.policy_of(role).fingerprint(f"ref_{role}")
    # both workers (the replacement too) hold the driver's adapters
    driver = {f"default/{r}": trainer.policy_of(r).fingerprint(r) for r in TRAINED + FROZEN}
    assert workers == [driver, driver]
    # Same seed, other sampling streams (each worker its own): the run's metrics have the local run's keys
    # and magnitude (a loose bound: 36 episodes, 3 to 12 distinct samples per role and iteration) ...
    mine, local = learning_rows(tmp_path / "run"), learning_rows(local_run.run_dir)
    assert [sorted(r) for r in mine] == [sorted(r) for r in local]
    assert abs(mean_role_reward(mine) - mean_role_reward(local)) <= 0.3
    # ... and with the same weights the workers sample what the local engine samples, within noise.
    a, b = torch.tensor(team_rewards(on_ray)), torch.tensor(team_rewards(in_process))
    noise = (a.var() / len(a) + b.var() / len(b)).sqrt()
    assert abs(a.mean() - b.mean()) <= 4 * noise + 1e-6, (a.mean(), b.mean(), noise)


@pytest.fixture
def ray_sandbox(ray_instance):
    sandbox = build_sandbox(load_config(overrides=["run.backend=ray", "ray.num_sandbox_workers=1"]))
    asyncio.run(sandbox.run("print('started')"))  # the pool starts at its first call
    yield sandbox
    sandbox.close()


def test_a_sandbox_worker_killed_mid_check_is_replaced_and_the_check_retried(ray_sandbox, ray_instance):
    handle, killed_in_flight = ray_sandbox.workers[0], []
    submit = ray_sandbox._submit

    def submit_and_kill_after_half_a_second(i, *args):
        ref = submit(i, *args)
        if not killed_in_flight:
            kill_later(ray_instance, handle, ref, 0.5, killed_in_flight)
        return ref

    ray_sandbox._submit = submit_and_kill_after_half_a_second
    start = time.monotonic()
    result = asyncio.run(ray_sandbox.run("import time\ntime.sleep(1.5)\nprint('done')\n"))
    assert killed_in_flight == [True]
    assert (result.stdout, result.returncode, result.error) == ("done\n", 0, None)
    assert time.monotonic() - start >= 2.0  # the whole program ran again, on the replacement
    assert ray_sandbox.replacements == 1 and ray_sandbox.workers[0] is not handle


def test_an_episode_whose_sandbox_worker_dies_completes(ray_sandbox, ray_instance):
    cfg = load_config()
    task = build_suite(cfg).fixed_set("heldout", 1)[0]

    def episode(sandbox):  # scripted experts: the same turns every time
        clear_cache()  # every episode runs its checks (identical ones are judged once)
        return asyncio.run(play_episode(cfg, Team(expert_seats(cfg, random.Random(3))), task, sandbox))

    in_process = episode(build_sandbox(cfg))
    first = in_process.turns[in_process.verifier["code_turns"][0]].message.content
    kills: list[int] = []
    submit = ray_sandbox._submit

    def submit_and_kill(i, source, stdin):
        ref = submit(i, source, stdin)
        # kill the worker running the first code version's check (the other checks go on, or are retried)
        if ast.literal_eval(stdin)["programs"] == [first] and len(kills) < kills_wanted:
            ray_instance.kill(ray_sandbox.workers[i])
            kills.append(i)
        return ref

    ray_sandbox._submit = submit_and_kill
    kills_wanted = 1  # its worker dies: the check is retried on the replacement, with the same verdicts
    retried = episode(ray_sandbox)
    assert kills == [0] and retried.verifier == in_process.verifier and in_process.verifier["code_pass"]
    kills_wanted = 3  # the replacement dies as well: recorded, and the check counts as failed
    lost = episode(ray_sandbox)
    assert kills == [0, 0, 0] and ray_sandbox.lost >= 1
    assert "died twice" in lost.verifier["sandbox_error"]
    assert lost.verifier["code_pass"][0] == 0.0 < in_process.verifier["code_pass"][0]
    for got, wanted in zip(lost.verifier["code_pass"][1:], in_process.verifier["code_pass"][1:], strict=True):
        assert got in (wanted, 0.0)  # a check that was on the killed replacement may be lost too


def test_an_unreachable_ray_address_fails_fast_with_a_clear_message(
    ray_instance, tmp_path, monkeypatch, capsys
):
    from teamrl.distributed.cluster import _probe

    _probe(ray_instance.get_runtime_context().gcs_address, "RAY_ADDRESS", 5.0)  # a live GCS passes
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    monkeypatch.setattr(ray_instance, "is_initialized", lambda: False)  # as in a fresh process
    start = time.monotonic()
    code = cli_main(["train", "--backend", "ray", "--set", f"run.out_dir={tmp_path}", "--set", "run.name=r"])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - start < 10
    assert f"RAY_ADDRESS: cannot reach the Ray cluster at 127.0.0.1:{port}" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="ray.address: 'ray:/x' is not a Ray address"):
        Trainer(load_config(overrides=["run.backend=ray", "ray.address=ray:/x"]), tmp_path / "r2")


def mean_role_reward(rows: list[dict[str, float]]) -> float:
    values = [v for r in rows for k, v in r.items() if k.startswith(("rollout/reward/", "eval/reward/"))]
    return sum(values) / len(values)


def team_rewards(episodes) -> list[float]:
    return [sum(e.rewards.values()) / len(e.rewards) for e in episodes]


def test_without_ray_the_cli_names_the_extra_to_install(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a)
    )
    code = cli_main(["train", "--backend", "ray", "--set", f"run.out_dir={tmp_path}", "--set", "run.name=r"])
    err = capsys.readouterr().err
    assert code == 2
    assert "pip install 'teamrl[ray]'" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # stopped before the run directory or any model was made


def test_the_backend_and_ray_settings_are_checked_at_load_time(tmp_path):
    cfg = load_config(overrides=["run.backend=ray", "ray.num_rollout_workers=3", "ray.address=auto"])
    assert (cfg.run.backend, cfg.ray.num_rollout_workers, cfg.ray.address) == ("ray", 3, "auto")
    assert load_config().run.backend == "local"
    for bad, key in (
        ("run.backend=spark", "run.backend"),
        ("ray.num_rollout_workers=0", "ray.num_rollout_workers"),
    ):
        with pytest.raises(ConfigError, match=key):
            load_config(overrides=[bad])
