"""Memory written by a seat of the team (issue 19): the archivist, the summariser, their rewards, capacity
and demonstrations; and one run alternating the outer (archivist) and inner (proposer) loops."""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from teamrl.memory.policies import make_policy
from teamrl.memory.seats import (
    apply_keep,
    archivist_prompt,
    archivist_reply,
    net_summary,
    parse_keep,
    parse_summary,
    summary_text,
)
from teamrl.memory.store import Capacity, Note, write

REPO = Path(__file__).resolve().parent.parent
SEATED = ["workflow.order=[proposer,archivist,summariser]", "workflow.memory.policy=archivist"]


def _notes() -> list[Note]:
    return [
        Note("likes music", "music", 1, 0, 3, count=2),
        Note("dislikes long", "long", -1, 1, 1),
        Note("said: coffee helps", None, 0, 2, 2),
        Note("likes calm", "calm", 1, 4, 4),
    ]


def test_keep_replies_parse_strictly() -> None:
    assert parse_keep("KEEP: 3 1 3 9 0", 4) == [2, 0]  # order kept, repeats and out-of-range dropped
    assert parse_keep("<answer>KEEP: none</answer>", 4) == []
    assert parse_keep("keep: 2, 4", 4) == [1, 3]
    assert parse_keep("I keep everything", 4) is None
    assert parse_keep("KEEP: 1\nKEEP: 2", 4) == [1]  # the last one counts


def test_the_archivist_can_never_exceed_the_capacity_nor_lose_memory_on_garbage() -> None:
    memory = _notes()
    new = Note("dislikes art", "art", -1, 5, 5)
    pool = write(memory, new)
    cap = Capacity(entries=3)
    kept, ok = apply_keep(memory, pool, "KEEP: 1 2 3 4 5", cap)
    assert [n.text for n in kept] == [n.text for n in pool[:3]] and not ok
    kept, ok = apply_keep(memory, pool, "KEEP: 5 1", cap)
    assert [n.text for n in kept] == ["dislikes art", "likes music"] and ok
    kept, ok = apply_keep(memory, pool, "no idea", cap)  # unparsable: the memory as it was (within capacity)
    assert kept == memory[:3] and not ok
    words = Capacity(entries=None, tokens=5)  # a capacity in words too
    kept, ok = apply_keep(memory, pool, "KEEP: 3 1 2", words)
    assert sum(n.tokens for n in kept) <= 5 and not ok


@pytest.mark.parametrize("rule", ["recency", "fifo"])
def test_the_archivists_expert_reply_keeps_what_its_rule_keeps(rule: str) -> None:
    cap = Capacity(entries=3)
    policy = make_policy(rule, cap)
    memory = _notes()[:3]
    for r, new in enumerate([Note("likes art", "art", 1, 5, 5), Note("likes music", "music", 1, 6, 6)]):
        pool = write(memory, new)
        want = policy(memory, new, 6 + r)
        kept, ok = apply_keep(memory, pool, archivist_reply(pool, want), cap)
        assert ok and {n.key() for n in kept} == {n.key() for n in want}
        memory = kept


def test_the_archivist_reads_each_note_with_its_count_and_age() -> None:
    new = Note("dislikes art", "art", -1, 5, 5)
    prompt = archivist_prompt(write(_notes(), new), new, 6, Capacity(entries=4))
    assert "Keep at most 4 notes. Reply KEEP: <numbers>." in prompt
    assert "1. likes music (x2, 3 ago)\n" in prompt and "5. dislikes art (new)\n" in prompt


def test_the_summariser_expert_nets_likes_and_dislikes() -> None:
    cap = Capacity(entries=2)
    memory = net_summary([], Note("likes music", "music", 1, 0, 0), cap)
    memory = net_summary(memory, Note("likes music", "music", 1, 1, 1), cap)
    memory = net_summary(memory, Note("said: coffee helps", None, 0, 2, 2), cap)  # small talk: not kept
    assert summary_text(memory) == "likes music x2"
    memory = net_summary(memory, Note("dislikes music", "music", -1, 3, 3), cap)
    assert summary_text(memory) == "likes music"
    memory = net_summary(memory, Note("dislikes music", "music", -1, 4, 4), cap)
    assert memory == []  # as many dislikes as likes: nothing left to say
    memory = net_summary(memory, Note("dislikes long", "long", -1, 5, 5), cap)
    memory = net_summary(memory, Note("likes calm", "calm", 1, 6, 6), cap)
    memory = net_summary(memory, Note("likes calm", "calm", 1, 7, 7), cap)
    memory = net_summary(memory, Note("likes art", "art", 1, 8, 8), cap)
    assert summary_text(memory) == "likes calm x2\nlikes art"  # the strongest, then the most recent


def test_the_summariser_lines_parse_into_notes_within_the_capacity() -> None:
    memory = [Note("likes music", "music", 1, 0, 3, count=2)]
    new = Note("dislikes long", "long", -1, 5, 5)
    cap = Capacity(entries=2)
    notes, ok = parse_summary("likes music x3\ndislikes long", memory, new, 5, cap)
    assert ok and [(n.text, n.count, n.first, n.last) for n in notes] == [
        ("likes music", 3, 0, 3),
        ("dislikes long", 1, 5, 5),
    ]
    adversarial = "\n".join(["likes music x999", "likes music", "hates everything", "likes unicorns"] * 50)
    notes, ok = parse_summary(adversarial + "\nlikes art\nlikes calm\nlikes tech", memory, new, 5, cap)
    assert not ok and len(notes) == 2 and notes[0].count == 99  # capped, deduplicated, bounded
    assert parse_summary("(nothing)", memory, new, 5, cap) == ([], True)


def _seated_workflow(*sets: str) -> Any:
    from teamrl.config import load_config
    from teamrl.trainer.build import build_workflow

    cfg = load_config(None, ["workflow.name=collaborate", *SEATED, *sets])
    return cfg, build_workflow(cfg, None)


def _play(workflow: Any, cfg: Any, scripts: dict[str, Any], policy: str | None = None) -> tuple[Any, Any]:
    from teamrl.engine.team import Seat, Team
    from teamrl.memory.workflow import CollaboratorSuite

    [task] = CollaboratorSuite(cfg.tasks).sample("heldout", 1, random.Random(3))  # type: ignore[arg-type]
    team = Team({r: Seat(script=s) for r, s in scripts.items()})
    run = workflow._session(team, task, 0, policy) if policy else workflow.play(team, task)
    return asyncio.run(run), task


def test_a_seats_turn_is_rewarded_with_the_acceptance_of_the_next_episodes() -> None:
    """The outer loop's reward comes from the inner episodes: the archivist's turn after episode r gets the
    mean acceptance of episodes r+1 .. r+horizon (fewer at the end), grouped by r across sessions."""
    cfg, workflow = _seated_workflow("workflow.rounds=8", "workflow.memory.horizon=3")
    episode, _ = _play(workflow, cfg, workflow.experts(random.Random(0)))
    accepted = episode.verifier["accepted"]
    seat_turns = [j for j, t in enumerate(episode.turns) if t.role == "archivist"]
    assert len(seat_turns) == 7  # none after the last episode: that memory is never read
    for r, j in enumerate(seat_turns):
        assert episode.attempt_rewards[j] == pytest.approx(np.mean(accepted[r + 1 : r + 4]))
        assert episode.attempt_groups[j] == f"memory after episode {r}"
    assert episode.verifier["memory_invalid"] == 0 and workflow.process_scores(episode)["archivist"] == 1.0


@pytest.mark.parametrize("seat", ["archivist", "summariser"])
def test_an_adversarial_seat_never_exceeds_the_capacity_and_is_penalised(seat: str) -> None:
    from teamrl.protocol import Message, render_message

    cfg, workflow = _seated_workflow(
        "workflow.rounds=12", "workflow.memory.entries=3", f"workflow.memory.policy={seat}"
    )
    replies = iter(
        ["KEEP: 1 2 3 4 5 6 7 8 9", "garbage", "likes music x5\n" * 20 + "likes art\nlikes calm\nlikes tech"]
        * 20
    )
    scripts = workflow.experts(random.Random(0))
    scripts[seat] = lambda call: render_message(Message(role=seat, kind="answer", content=next(replies)))
    sizes: list[int] = []
    original = workflow._seat_turn

    async def spy(*args: Any) -> Any:
        out = await original(*args)
        sizes.append(len(out[0]))
        return out

    workflow._seat_turn = spy
    episode, _ = _play(workflow, cfg, scripts)
    assert sizes and max(sizes) <= 3
    accepted = episode.verifier["accepted"]
    turns = [j for j, t in enumerate(episode.turns) if t.role == seat]
    for r, j in enumerate(turns):  # a malformed reply costs memory.invalid_penalty on top of its future
        future = float(np.mean(accepted[r + 1 : r + 4]))
        assert episode.attempt_rewards[j] in (pytest.approx(future), pytest.approx(future - 0.1))
    assert (
        sum(episode.attempt_rewards[j] < np.mean(accepted[r + 1 : r + 4]) - 0.05 for r, j in enumerate(turns))
        >= 7
    )
    assert episode.verifier["memory_invalid"] >= 7  # 7 of the 11 replies cannot parse for either seat
    assert workflow.process_scores(episode)[seat] < 0.5


def test_demonstrations_take_turns_at_the_seats() -> None:
    from teamrl.engine.team import Seat, Team
    from teamrl.memory.workflow import CollaboratorSuite

    cfg, workflow = _seated_workflow("workflow.rounds=4")
    tasks = CollaboratorSuite(cfg.tasks).sample("train", 4, random.Random(0))  # type: ignore[arg-type]
    team = Team({r: Seat(script=s) for r, s in workflow.experts(random.Random(0)).items()})
    episodes = asyncio.run(workflow.demonstrate(team, tasks))
    assert [e.verifier["memory_policy"] for e in episodes] == ["archivist", "summariser"] * 2
    for e in episodes:
        roles = {t.role for t in e.turns}
        assert roles == {"proposer", e.verifier["memory_policy"]}
        assert e.verifier["memory_invalid"] == 0  # the experts' replies parse


def test_seat_configs_are_checked() -> None:
    from teamrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="add it to workflow.roles and to workflow.order"):
        load_config(None, ["workflow.name=collaborate", "workflow.memory.policy=archivist"])
    with pytest.raises(ConfigError, match="the first role proposes"):
        load_config(None, ["workflow.name=collaborate", "workflow.order=[archivist,proposer]"])
    with pytest.raises(ConfigError, match="memory.expert learned needs workflow.memory.scorer"):
        load_config(None, ["workflow.name=collaborate", *SEATED, "workflow.memory.expert=learned"])
    with pytest.raises(ConfigError, match="cannot demonstrate the archivist"):
        load_config(None, ["workflow.name=collaborate", *SEATED, "workflow.memory.expert=keep_all"])


def _tiny_archivist(tmp_path: Path) -> Any:
    import sys

    from teamrl.config import load_config

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_base import TINY_BASE

    sets = [*TINY_BASE, "workflow.rounds=4", "tasks.drift_at=2", "recipe.sft.epochs=1"]
    sets += ["recipe.iterations_per_role={proposer: 1, archivist: 1}"]
    sets += [f"policies.default.embedded.cache_dir={tmp_path / 'cache'}"]
    return load_config(REPO / "examples/collaborate_archivist.yaml", sets)


def _phases(run: Path) -> list[tuple[int, str, float]]:
    import json

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [
        (r["step"], r["phase"], r["rollout/outcome"]) for r in rows if "phase" in r and "rollout/outcome" in r
    ]


def test_the_two_loops_alternate_in_one_run_and_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/collaborate_archivist.yaml on the tiny base: SFT of the three roles, then freeze-rotate
    proposer (inner loop), archivist (outer loop), proposer, archivist; cut after its first RL checkpoint
    and resumed, the run plays the same phases with the same outcomes as the run never cut."""
    from teamrl.trainer import faults
    from teamrl.trainer.trainer import Trainer

    cfg = _tiny_archivist(tmp_path)
    trainer = Trainer(cfg, tmp_path / "whole")
    try:
        summary = trainer.fit()
    finally:
        trainer.close()
    whole = _phases(tmp_path / "whole")
    assert [p.split("/")[-1].split("#")[0] for _, p, _ in whole] == ["proposer", "archivist"] * 2
    assert "eval/memory_invalid_share" in summary["evals"][-1]

    monkeypatch.setenv(faults.ENV, "checkpoint_renamed:2:INT")  # after SFT's checkpoint and one RL step's
    monkeypatch.setattr(faults, "_hits", {})
    # Ctrl-C as in a terminal: a suite started in the background (nohup, `&`) inherits SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    trainer = Trainer(cfg, tmp_path / "cut")
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                trainer.fit()
            finally:
                trainer.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.delenv(faults.ENV)
    assert len(_phases(tmp_path / "cut")) < len(whole)
    trainer = Trainer(cfg, tmp_path / "cut", resume=True)
    try:
        trainer.fit()
    finally:
        trainer.close()
    assert _phases(tmp_path / "cut") == whole


@pytest.mark.parametrize("seat", ["archivist", "summariser"])
def test_a_seated_memory_passes_the_conformance_checks(seat: str) -> None:
    from teamrl.memory.workflow import CollaborateConfig
    from teamrl.testing import check_workflow

    settings = CollaborateConfig.model_validate(
        {"order": ["proposer", "archivist", "summariser"], "rounds": 4, "memory": {"policy": seat}}
    )
    check_workflow("collaborate", settings)


def test_a_seat_samples_and_is_learned_at_its_own_temperature() -> None:
    from teamrl.config import load_config
    from teamrl.engine.engine import Engine
    from teamrl.trainer.build import build_team
    from teamrl.trainer.learner import Learner

    cfg = load_config(REPO / "examples/collaborate_archivist.yaml", [])
    team = build_team(cfg, Engine({}), cfg.algorithm.temperature)
    assert team.seats["archivist"].temperature == 1.5
    assert team.seats["proposer"].temperature == team.seats["summariser"].temperature == 0.7
    learner = Learner.__new__(Learner)
    learner.cfg = cfg
    assert learner.temperature("archivist") == 1.5 and learner.temperature("proposer") == 0.7


def test_the_learner_scores_a_role_at_its_temperature_without_a_graph() -> None:
    """Reference and behaviour log-probs are scored at the role's own temperature, under no_grad."""
    import torch

    from teamrl.config import load_config
    from teamrl.protocol import Turn
    from teamrl.trainer.learner import score_turns

    calls: list[tuple[str, float, bool]] = []

    class Policy:
        def token_logprobs(self, adapter, prompts, completions, temperature):  # noqa: ANN001, ANN202
            calls.append((adapter, temperature, torch.is_grad_enabled()))
            return torch.zeros(len(completions), max(map(len, completions))), None

    cfg = load_config(REPO / "examples/collaborate_archivist.yaml", [])
    turn = Turn(role="archivist", round=0, prompt="p", text="t", prompt_ids=[1, 2], completion_ids=[3, 4])
    scores = score_turns(cfg, Policy(), "archivist", [turn], "ref_archivist")  # type: ignore[arg-type]
    assert scores == [[0.0, 0.0]] and calls == [("ref_archivist", 1.5, False)]
