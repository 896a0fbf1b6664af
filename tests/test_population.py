"""Recipe population: the schedule, results, ratings, sampling and diversity by hand; then tiny debate runs:
the pool grows and evicts, the opponents play the snapshots' weights, latest is self-play, resume."""

import json
import random
from pathlib import Path

import pytest
from tiny_debate import TINY_DEBATE
from trainer_spy import interrupt_update, record_updates

from teamrl.config import ConfigError, load_config
from teamrl.protocol import Episode
from teamrl.recipes import population_blocks
from teamrl.recipes.population import (
    Record,
    diversity_figures,
    elo_update,
    expected_score,
    pairing_score,
    reward_pairing_score,
    snapshot_probabilities,
)
from teamrl.trainer.trainer import Trainer

EXAMPLE = Path(__file__).parent.parent / "examples" / "debate_population.yaml"

TINY = [
    *TINY_DEBATE,
    "workflow.debaters=3",
    "tasks.heldout_size=2",
    "run.eval_samples=1",
    *(f"workflow.roles.debater_{i}.max_new_tokens=12" for i in range(3)),  # a tiny base never stops early
    "algorithm.ppo_epochs=1",
    "recipe.name=population",
    "recipe.iterations=3",
    "recipe.population.snapshot_every=1",
    "recipe.population.pool_size=2",
    "recipe.population.probe_tasks=2",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One embedded base for the module's runs (built by the first)."""
    return f"policies.default.embedded.cache_dir={tmp_path_factory.mktemp('cache')}"


def _debate(correct_final: list[bool], rewards: dict[str, float] | None = None) -> Episode:
    names = [f"debater_{i}" for i in range(len(correct_final))]
    return Episode(
        task_id="t",
        verifier={"debaters": names, "correct": [[False] * len(names), correct_final]},
        rewards=rewards or {},
    )


# -- the pure parts -------------------------------------------------------------------------------
def test_blocks_take_turns_and_the_last_one_is_shorter():
    blocks = population_blocks(["generator", "judge"], iterations=7, snapshot_every=3)
    assert [(b.name, b.roles, b.iterations) for b in blocks] == [
        ("block1/generator", ("generator",), 3),
        ("block2/judge", ("judge",), 3),
        ("block3/generator", ("generator",), 1),
    ]


def test_a_debate_pairing_compares_final_answers_and_the_fallback_compares_rewards():
    cfg = load_config(overrides=["workflow.name=debate"])
    ep = _debate([True, False, True])
    workflow = cfg.workflow_class(cfg.workflow)
    assert pairing_score(workflow, ep, "debater_0", "debater_1") == 1.0  # right vs wrong: a win
    assert pairing_score(workflow, ep, "debater_1", "debater_0") == 0.0
    assert pairing_score(workflow, ep, "debater_0", "debater_2") == 0.5  # both right: a draw
    judged = _debate([True, False], rewards={"debater_0": 0.2, "judge": 1.0})
    assert pairing_score(workflow, judged, "debater_0", "judge") == 0.0  # no answer to compare: rewards
    ep = _debate([False, False], rewards={"generator": 0.4, "judge": 1.0})
    assert reward_pairing_score(ep, "generator", "judge") == 0.0
    assert reward_pairing_score(ep, "judge", "generator") == 1.0
    assert reward_pairing_score(ep, "judge", "solver") is None


def test_elo_updates_by_hand():
    assert elo_update(1000.0, 1000.0, 0.75, 32.0) == (1008.0, 992.0)  # expected 0.5, scored 0.75
    expected = 1 / (1 + 10 ** (-200 / 400))  # 0.7597 for a 200-point favourite
    assert expected_score(1200.0, 1000.0) == pytest.approx(expected)
    up, down = elo_update(1200.0, 1000.0, 0.0, 16.0)
    assert up == pytest.approx(1200 - 16 * expected) and down == pytest.approx(1000 + 16 * expected)


def test_uniform_and_prioritized_sampling_on_a_known_table():
    names = ["a", "b", "c", "d"]
    table = {
        "a": Record(wins=9, draws=0, losses=0),
        "b": Record(wins=1, draws=2, losses=1),
        "c": Record(losses=3),
    }
    assert snapshot_probabilities(names, table, "uniform", 2.0) == [0.25] * 4
    # smoothed win rates (score + 0.5) / (games + 1): a 0.95, b 0.5, c 0.125, d (never met) 0.5
    weights = [0.05**2, 0.5**2, 0.875**2, 0.5**2]
    probs = snapshot_probabilities(names, table, "prioritized", 2.0)
    assert probs == pytest.approx([w / sum(weights) for w in weights])
    assert probs[2] > probs[1] > probs[0] and probs[1] == pytest.approx(probs[3])  # hardest most often
    assert snapshot_probabilities(names, table, "prioritized", 0.0) == pytest.approx([0.25] * 4)
    with pytest.raises(ValueError, match="empty pool"):
        snapshot_probabilities([], table, "uniform", 1.0)


def test_diversity_of_a_collapsed_and_of_a_varied_pool():
    same = diversity_figures([["4", "7"]] * 3, [["ANSWER: 4", "ANSWER: 7"]] * 3)
    assert same["distinct_answers"] == pytest.approx(1 / 3) and same["answers_per_task"] == 1.0
    assert same["distinct_texts"] == pytest.approx(1 / 3) and same["distinct_2"] == pytest.approx(2 / 6)
    varied = diversity_figures(
        [["4", "7"], ["5", "7.0"], [None, "8"]], [["a b", "x y"], ["A  b", "x z"], ["c d", "x w"]]
    )
    assert varied["answers_per_task"] == pytest.approx((3 + 2) / 2)  # "7" and "7.0" are one answer
    assert varied["distinct_texts"] == pytest.approx((2 + 3) / 6)  # case and spacing ignored
    assert varied["distinct_2"] == pytest.approx(5 / 6)


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["recipe.population.learners=[judge]"], "learners names 'judge', not in workflow.order"),
        (
            ["recipe.population.learners=[debater_0]", "workflow.roles.debater_0.trainable=false"],
            "workflow.roles.debater_0.trainable is false",
        ),
        (["recipe.population.learners=[debater_0,debater_0]"], "lists a role twice"),
        (["recipe.population.opponents={debater_3: debater_0}"], "'debater_3' is not a role"),
        (["recipe.population.opponents={debater_0: debater_0}"], "'debater_0' is a learner"),
        (["recipe.population.opponents={debater_1: debater_2}"], "'debater_2' is no learner"),
        (["recipe.population.opponents={}"], "no seat plays from debater_0's pool"),
        (["recipe.population.sampling=pfsp"], "recipe.population.sampling: Input should be"),
        (["recipe.population.pool_size=0"], "recipe.population.pool_size"),
        (["run.backend=ray"], "run.backend ray is not supported"),
    ],
)
def test_bad_population_configs_name_the_key_and_the_fix(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["workflow.name=debate", "recipe.name=population", *overrides])
    assert needle in str(err.value)


def test_the_example_validates_with_debate_defaults():
    cfg = load_config(EXAMPLE)
    assert cfg.recipe.name == "population" and cfg.population_learners() == ["debater_0"]
    assert cfg.population_opponents() == {"debater_1": "debater_0", "debater_2": "debater_0"}


# -- tiny debate runs -----------------------------------------------------------------------------
def _watch(trainer, monkeypatch):
    """Record, per training rollout, the adapter each debater's requests used and the fingerprint of each
    pool seat's adapter; and each snapshot's fingerprint of the learner, taken when it joined."""
    used: list[dict[str, set]] = []
    slots: list[dict[str, tuple[str, str]]] = []
    joined: dict[str, str] = {}
    rollout = {"on": False}  # between seats() and after_iteration(): the iteration's rollout
    engine, hooks = trainer.engine, trainer.hooks
    generate, seats, after, snapshot = engine.generate, hooks.seats, hooks.after_iteration, hooks.snapshot

    async def spy_generate(policy, request):
        if rollout["on"]:
            role = request.prompt.split(":", 1)[0].removeprefix("### ")
            used[-1].setdefault(role, set()).add(request.adapter)
        return await generate(policy, request)

    def spy_seats(phase):
        out = seats(phase)
        used.append({})
        policy = trainer.policy_of("debater_0")
        slots.append({s: (hooks.drawn[s], policy.fingerprint(seat.adapter)) for s, seat in out.items()})
        rollout["on"] = True
        return out

    def spy_after(phase, episodes):
        rollout["on"] = False
        return after(phase, episodes)

    def spy_snapshot(role):
        joined[f"{role}@iter{trainer.state.step}"] = trainer.policy_of(role).fingerprint(role)
        return snapshot(role)

    monkeypatch.setattr(engine, "generate", spy_generate)
    monkeypatch.setattr(hooks, "seats", spy_seats)
    monkeypatch.setattr(hooks, "after_iteration", spy_after)
    monkeypatch.setattr(hooks, "snapshot", spy_snapshot)
    return used, slots, joined


def spread_by_group(episodes, ctx):  # noqa: ANN001, ANN201 - a reward function, named by import path below
    """Rewards that differ within every group, so each update moves the learner (a tiny base often earns
    equal rewards, and an update then skips it)."""
    return [{"debater_0": float(e.group)} if e.turns_of("debater_0") else {} for e in episodes]


LEARNER_ALWAYS_LEARNS = "reward.functions=[{name: hybrid}, {name: 'test_population:spread_by_group'}]"


def test_a_population_run_plays_the_learner_against_its_pool(cache, tmp_path, monkeypatch):
    run = tmp_path / "run"
    trainer = Trainer(load_config(overrides=[*TINY, cache, LEARNER_ALWAYS_LEARNS]), run)
    updates = record_updates(trainer, monkeypatch)
    used, slots, joined = _watch(trainer, monkeypatch)
    trainer.fit()

    # only the learner trains; the frozen check of every block passed
    for roles, skipped, changed in updates:
        assert roles == ("debater_0",) and changed == {"debater_0"} - skipped
    # the pool: iter0 (after SFT), then one snapshot per block, at most 2 kept, evicted ones deleted
    assert list(joined) == ["debater_0@iter0", "debater_0@iter1", "debater_0@iter2", "debater_0@iter3"]
    table = json.loads((run / "population" / "table.json").read_text())
    assert [s["name"] for s in table["pools"]["debater_0"]] == ["debater_0@iter2", "debater_0@iter3"]
    assert sorted(p.name for p in (run / "population" / "debater_0").iterdir()) == ["iter2", "iter3"]
    # the opponents played their slots, loaded with the drawn snapshot's weights; the learner its own
    for iteration, (adapters, drawn) in enumerate(zip(used, slots, strict=True)):
        assert adapters["debater_0"] == {"debater_0"}
        for seat in ("debater_1", "debater_2"):
            name, fingerprint = drawn[seat]
            assert adapters[seat] == {f"pool-{seat}"}
            assert int(name.rsplit("iter", 1)[1]) <= iteration  # a snapshot of the past, not the future
            assert fingerprint == joined[name]
    assert len(set(joined.values())) == 4  # every snapshot differs: the comparisons above can fail
    # every pairing scored once: 3 iterations x 4 debates x 2 opponent seats
    results = table["results"]["debater_0"]
    assert sum(r["games"] for r in results.values()) == 24
    assert set(results) <= set(joined)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "population/debater_0/elo" in r]
    assert len(rl) == 3 and rl[-1]["population/debater_0/elo"] == pytest.approx(table["elo"]["debater_0"])
    assert all(r["population/diversity/debater_0/snapshots"] == 2.0 for r in rl)
    assert all(0.5 <= r["population/diversity/debater_0/distinct_answers"] <= 1.0 for r in rl)
    # outside the iterations every debater seat plays the learner's current adapter
    assert {s.adapter for s in trainer.team.seats.values()} == {"debater_0"}


def test_two_learners_take_turns_and_the_idle_one_plays_from_its_own_pool(cache, tmp_path, monkeypatch):
    cfg = load_config(
        overrides=[
            *TINY,
            cache,
            "workflow.aggregation=judge",
            "workflow.roles.judge.max_new_tokens=12",
            "recipe.population.learners=[debater_0, judge]",
            "recipe.iterations=2",
        ]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    updates = record_updates(trainer, monkeypatch)
    used, slots, joined = _watch(trainer, monkeypatch)
    trainer.fit()
    assert [roles for roles, _, _ in updates] == [("debater_0",), ("judge",)]
    assert used[0]["debater_0"] == {"debater_0"} and used[0]["judge"] == {"pool-judge"}
    assert used[1]["judge"] == {"judge"} and used[1]["debater_0"] == {"pool-debater_0"}
    assert used[1]["debater_1"] == {"pool-debater_1"}  # mirrors debater_0's pool in both blocks
    assert slots[0]["judge"] == ("judge@iter0", joined["judge@iter0"])
    assert slots[1]["debater_0"][0] in {"debater_0@iter0", "debater_0@iter1"}


def test_latest_sampling_is_plain_self_play(cache, tmp_path, monkeypatch):
    cfg = load_config(overrides=[*TINY, cache, "recipe.population.sampling=latest", "recipe.iterations=1"])
    trainer = Trainer(cfg, tmp_path / "run")
    used, slots, _ = _watch(trainer, monkeypatch)
    trainer.fit()
    assert used[0] == {role: {"debater_0"} for role in ("debater_0", "debater_1", "debater_2")}
    assert slots == [{}]
    table = json.loads((tmp_path / "run" / "population" / "table.json").read_text())
    assert list(table["results"]["debater_0"]) == ["debater_0"] and table["elo"]["debater_0"] == 1000.0
    assert not any(a.startswith("pool-debater") for a in trainer.policy_of("debater_0").adapter_names)


def test_prioritized_draws_follow_the_win_table(cache, tmp_path):
    cfg = load_config(overrides=[*TINY, cache, "recipe.population.sampling=prioritized"])
    hooks = Trainer(cfg, tmp_path / "run").hooks
    for step in range(3):
        hooks.trainer.state.step = step
        hooks.snapshot("debater_0")
    names = [s.name for s in hooks.pools["debater_0"]]
    assert names == ["debater_0@iter1", "debater_0@iter2"]  # pool_size 2: iter0 left
    hooks.results["debater_0"] = {names[0]: Record(wins=9), names[1]: Record(losses=9)}
    rng = random.Random(0)
    draws = [hooks.draw("debater_0", "debater_0", rng).name for _ in range(2000)]
    expected = snapshot_probabilities(names, hooks.results["debater_0"], "prioritized", 2.0)
    assert draws.count(names[1]) / 2000 == pytest.approx(expected[1], abs=0.03)
    assert expected[1] > 0.95  # beaten every time by the older one, the learner meets it most


def test_a_killed_population_run_resumes_its_pool_and_tables(cache, tmp_path, monkeypatch):
    run = tmp_path / "run"
    cfg = load_config(overrides=[*TINY, cache])
    trainer = Trainer(cfg, run)
    interrupt_update(trainer, monkeypatch, call=3)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert (run / "population" / "debater_0" / "iter2").exists()  # iteration 3 began: its pool is kept
    stray = run / "population" / "debater_0" / "iter3"  # as if saved after the last checkpoint
    stray.mkdir()
    resumed = Trainer(load_config(run / "config.yaml"), run, resume=True)
    assert not stray.exists()
    assert resumed.state.step == 2
    hooks = resumed.hooks
    assert [s.name for s in hooks.pools["debater_0"]] == ["debater_0@iter1", "debater_0@iter2"]
    assert sum(r.games for r in hooks.results["debater_0"].values()) == 16  # two iterations' pairings
    assert hooks.elo["debater_0"] == pytest.approx(
        json.loads((run / "checkpoint" / "recipe" / "state.json").read_text())["elo"]["debater_0"]
    )
    resumed.fit()
    table = json.loads((run / "population" / "table.json").read_text())
    assert sum(r["games"] for r in table["results"]["debater_0"].values()) == 24  # no pairing twice
    assert [s["name"] for s in table["pools"]["debater_0"]] == ["debater_0@iter2", "debater_0@iter3"]
