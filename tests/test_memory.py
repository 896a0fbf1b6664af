"""Memory that learns what to keep, on a collaborator whose taste drifts (issue 19)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from teamrl.memory.collaborator import ATTRIBUTES, Topic, candidates_for, make_collaborator, population
from teamrl.memory.learn import (
    decision_returns,
    evaluate_policy,
    pl_gradient,
    reader_choice,
    run_session,
    train_scorer,
)
from teamrl.memory.policies import FEATURES, POLICIES, Decision, NoteScorer, features, make_policy
from teamrl.memory.store import Capacity, CapacityExceeded, Note, check_capacity, distil, merge, render


def test_the_collaborator_accepts_only_what_appeals_most_and_its_taste_drifts_on_schedule() -> None:
    c = make_collaborator(0, 3, drift="sudden", drift_at=5)
    liked = max(ATTRIBUTES["genre"], key=lambda g: c.taste_before[g])
    disliked = min(ATTRIBUTES["genre"], key=lambda g: c.taste_before[g])
    fmt, mood = ATTRIBUTES["format"][0], ATTRIBUTES["mood"][0]
    cands = [Topic(disliked, fmt, mood), Topic(liked, fmt, mood)]
    # by hand: same format and mood, so the genre decides; before the drift the liked one wins
    assert c.best(cands, 4) == [1]
    assert c.react(cands, 1, 4).accepted and not c.react(cands, 0, 4).accepted
    assert not c.react(cands, None, 4).accepted  # nothing valid proposed: never accepted
    # sudden: at round 5 the genres turn over; format and mood stay
    assert c.best(cands, 5) == [0]
    assert c.taste(5)[liked] == -c.taste(4)[liked]
    assert all(c.taste(5)[v] == c.taste(0)[v] for v in (*ATTRIBUTES["format"], *ATTRIBUTES["mood"]))
    g = make_collaborator(0, 3, drift="gradual", drift_at=5, drift_span=4)
    path = [g.taste(r)[liked] for r in range(3, 11)]
    assert path[0] == path[1] == g.taste_before[liked] and path[-1] == -g.taste_before[liked]
    assert all(a > b for a, b in zip(path[1:6], path[2:7], strict=True))  # strictly blending in between


def test_reactions_state_true_facts_or_small_talk_and_distil_into_notes() -> None:
    c = make_collaborator(1, 0, drift="sudden", drift_at=10, small_talk=0.5)
    facts = 0
    for r in range(40):
        cands = candidates_for(1, 0, r)
        reaction = c.react(cands, r % 4, r)
        note = distil(reaction.text, r)
        if reaction.fact is None:
            assert note.value is None and note.text.startswith("said: ")
            continue
        facts += 1
        value, sign = reaction.fact
        assert sign * c.taste(r)[value] > 0  # true at that round
        assert (note.value, note.sign) == (value, sign)
        assert reaction.text not in note.text  # a note is distilled, not the transcript
    assert 5 < facts < 35


def test_train_and_heldout_collaborators_never_overlap() -> None:
    train = {c.index for c in population(0, "train", 50)}
    held = {c.index for c in population(0, "heldout", 50)}
    assert not train & held
    with pytest.raises(ValueError, match="split"):
        population(0, "test", 1)


def test_notes_merge_and_render() -> None:
    a = Note("likes music", "music", 1, 0, 0)
    merged, did = merge([a], Note("likes music", "music", 1, 3, 3))
    assert did and merged[0].count == 2 and merged[0].last == 3 and merged[0].first == 0
    _, did = merge([a], Note("dislikes music", "music", -1, 4, 4))
    assert not did  # a contradiction is a different note
    assert render([]) == "(nothing remembered)"
    assert render(merged) == "- likes music (x2)"


@pytest.mark.parametrize("capacity", [Capacity(3), Capacity(None, 7), Capacity(4, 9)])
@pytest.mark.parametrize("name", [p for p in POLICIES if p != "keep_all"])
def test_no_policy_ever_exceeds_its_capacity(name: str, capacity: Capacity) -> None:
    scorer = NoteScorer(np.array([0.5, -0.3, 1.0, 2.0, -2.0, 0.5, 0.0]), stop=5.0)  # a STOP-happy scorer too
    for i in range(6):
        c = make_collaborator(7, i, small_talk=0.3)
        memory: list[Note] = []
        policy = make_policy(name, capacity, scorer, rng=random.Random(i) if i % 2 else None)
        for r in range(30):
            cands = candidates_for(7, i, r)
            memory = policy(memory, distil(c.react(cands, i % 4, r).text, r), r + 1)
            assert capacity.fits(memory)
    with pytest.raises(CapacityExceeded, match="over its capacity"):
        check_capacity([Note("a b c", None, 0, 0, 0)] * 2, Capacity(1), "mine")
    with pytest.raises(ValueError, match="unknown memory policy"):
        make_policy("lru", Capacity())
    with pytest.raises(ValueError, match="needs a trained NoteScorer"):
        make_policy("learned", Capacity())


def test_fifo_forgets_the_oldest_written_and_recency_the_least_recently_confirmed() -> None:
    notes = [Note("likes music", "music", 1, 0, 0), Note("likes tech", "tech", 1, 1, 1)]
    confirm = Note("likes music", "music", 1, 2, 2)  # music confirmed at round 2
    new = Note("dislikes art", "art", -1, 3, 3)
    fifo, recency = make_policy("fifo", Capacity(2)), make_policy("recency", Capacity(2))
    kept_f = fifo(fifo(notes, confirm, 3), new, 4)
    kept_r = recency(recency(notes, confirm, 3), new, 4)
    assert {n.value for n in kept_f} == {"tech", "art"}
    assert {n.value for n in kept_r} == {"music", "art"}


def test_learned_features_flag_contradicted_and_small_talk_notes() -> None:
    old = Note("likes games", "games", 1, 0, 2, count=3)
    newer = Note("dislikes games", "games", -1, 5, 5)
    chat = Note("said: my cat says hi", None, 0, 4, 4)
    x = features([old, newer, chat], newer, 6)
    col = {name: i for i, name in enumerate(FEATURES)}
    assert x[0, col["contradicted"]] == 1 and x[1, col["contradicted"]] == 0
    assert x[1, col["contradicts_older"]] == 1 and x[1, col["is_new"]] == 1
    assert x[2, col["is_fact"]] == 0 and x[2, col["contradicted"]] == 0
    assert x[0, col["age"]] == pytest.approx(0.4)


def test_plackett_luce_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 7))
    scorer = NoteScorer(rng.normal(size=7), stop=0.3)
    d = Decision(x, [2, 0, -1], 1)

    def logp(w: np.ndarray, stop: float) -> float:
        s = np.append(x @ w, stop)
        remaining, out = list(range(5)), 0.0
        for pick in (2, 0, 4):
            out += s[pick] - np.log(np.exp(s[remaining]).sum())
            remaining.remove(pick)
        return out

    gw, gs = pl_gradient(scorer, d)
    eps = 1e-6
    for k in range(7):
        e = np.zeros(7)
        e[k] = eps
        num = (logp(scorer.weights + e, scorer.stop) - logp(scorer.weights - e, scorer.stop)) / (2 * eps)
        assert gw[k] == pytest.approx(num, abs=1e-5)
    num = (logp(scorer.weights, scorer.stop + eps) - logp(scorer.weights, scorer.stop - eps)) / (2 * eps)
    assert gs == pytest.approx(num, abs=1e-5)


def test_the_outer_loop_rewards_a_decision_with_the_next_k_episodes() -> None:
    acc = np.array([[1, 0, 0, 1, 1], [0, 1, 1, 1, 0]], dtype=float)
    out = decision_returns(acc, 2)
    # the decision after episode 0 is paid episodes 1-2, ..., after episode 3 only episode 4
    assert out.tolist() == [[0.0, 0.5, 1.0, 1.0], [1.0, 1.0, 0.5, 0.0]]


def test_the_reader_follows_the_notes() -> None:
    cands = [Topic("music", "short", "calm"), Topic("games", "short", "calm")]
    notes = [Note("likes games", "games", 1, 0, 0), Note("likes music", "music", 1, 0, 0, count=2)]
    assert reader_choice(notes, cands, random.Random(0)) == 0
    notes.append(Note("dislikes music", "music", -1, 1, 1, count=3))
    assert reader_choice(notes, cands, random.Random(0)) == 1


def test_a_learned_memory_beats_fifo_on_heldout_collaborators() -> None:
    """A small outer loop (about 10 s) already learns to keep facts over small talk: it beats FIFO at the
    same capacity on held-out streamers (the full comparison is benchmarks/memory_benchmark.py)."""
    cap = Capacity(4)
    scorer, log = train_scorer(5, cap, iterations=25, batch=16, rounds=30, drift_at=15)
    assert len(log) == 25
    learned = evaluate_policy("learned", 5, cap, 60, 30, scorer, drift_at=15).mean()
    fifo = evaluate_policy("fifo", 5, cap, 60, 30, drift_at=15).mean()
    none = evaluate_policy("none", 5, cap, 60, 30, drift_at=15).mean()
    assert learned > fifo + 0.01 and fifo > none + 0.1
    w = dict(zip(FEATURES, scorer.weights, strict=True))
    assert w["is_fact"] > 0  # facts outrank small talk


def test_sessions_are_deterministic() -> None:
    c1, c2 = make_collaborator(2, 1), make_collaborator(2, 1)
    policy = lambda: make_policy("recency", Capacity(3))  # noqa: E731
    assert run_session(c1, policy(), 20).accepted == run_session(c2, policy(), 20).accepted


# -- the workflow: a session with one streamer, on the public API -------------------------------------


def test_collaborate_passes_the_conformance_checks() -> None:
    from teamrl.testing import check_workflow

    check_workflow("collaborate")


def _session(policy: str, proposer: Any, rounds: int = 12, **memory: Any) -> Any:
    import asyncio

    from teamrl.config import load_config
    from teamrl.engine.team import Seat, Team
    from teamrl.memory.workflow import CollaboratorSuite
    from teamrl.trainer.build import build_workflow

    sets = ["workflow.name=collaborate", f"workflow.rounds={rounds}", f"workflow.memory.policy={policy}"]
    sets += [f"workflow.memory.{k}={v}" for k, v in memory.items()]
    cfg = load_config(None, sets)
    workflow = build_workflow(cfg, None)
    [task] = CollaboratorSuite(cfg.tasks).sample("heldout", 1, random.Random(1))  # type: ignore[arg-type]
    return asyncio.run(workflow.play(Team({"proposer": Seat(script=proposer)}), task)), task


def test_a_session_is_rewarded_by_the_collaborator_per_proposal() -> None:
    from teamrl.protocol import Message, render_message

    def always_first(call: Any) -> str:
        return render_message(Message(role="proposer", kind="answer", content="ANSWER: 1"))

    episode, task = _session("fifo", always_first)
    c = task.collaborator()
    # by hand: every proposal is accepted exactly when candidate 1 appeals most at that round
    want = [float(0 in c.best(candidates_for(task.seed, task.index, r), r)) for r in range(12)]
    assert episode.verifier["accepted"] == want
    assert episode.outcome == pytest.approx(np.mean(want))
    assert sorted(episode.attempt_rewards) == list(range(12))
    assert [episode.attempt_groups[j] for j in range(12)] == [f"episode {r}" for r in range(12)]
    assert len(episode.verifier["memory_final"]) <= 4  # the capacity


def test_a_forged_or_out_of_range_answer_is_never_accepted() -> None:
    """The policy is an adversary: text that claims acceptance, a number out of range or several numbers
    cannot make the collaborator accept; only the named candidate counts."""
    from teamrl.protocol import Message, render_message

    texts = iter(["ACCEPTED! yes", "ANSWER: 9", "ANSWER: 0", "ANSWER: -1", "the streamer accepts"] * 3)

    def forger(call: Any) -> str:
        return render_message(Message(role="proposer", kind="answer", content=next(texts)))

    episode, _ = _session("recency", forger, rounds=15)
    assert episode.outcome == 0.0 and episode.verifier["invalid_proposals"] == 15


def test_the_expert_reads_the_memory_and_beats_chance() -> None:
    """The experts propose what the notes favour: with memory they are accepted well above chance, with
    none of it at chance (0.25 with 4 candidates)."""
    from teamrl.config import load_config
    from teamrl.trainer.build import build_workflow

    def mean_acceptance(policy: str) -> float:
        wf = build_workflow(
            load_config(None, ["workflow.name=collaborate", f"workflow.memory.policy={policy}"]), None
        )
        expert = wf.experts(random.Random(0))["proposer"]
        return float(_session(policy, expert, rounds=30)[0].outcome)

    assert mean_acceptance("keep_all") > mean_acceptance("none") + 0.1


def test_a_learned_memory_loads_its_scorer_or_says_why_not(tmp_path) -> None:  # noqa: ANN001
    import json

    from teamrl.config import ConfigError

    good = tmp_path / "scorer.json"
    good.write_text(json.dumps(dict.fromkeys(FEATURES, 0.5) | {"stop": -1.0}))
    from teamrl.protocol import Message, render_message

    def first(call: Any) -> str:
        return render_message(Message(role="proposer", kind="answer", content="ANSWER: 1"))

    episode, _ = _session("learned", first, scorer=str(good))
    assert len(episode.verifier["memory_final"]) <= 4
    bad = tmp_path / "bad.json"
    bad.write_text('{"bias": 1}')
    with pytest.raises((ValueError, ConfigError), match="each of bias"):
        _session("learned", first, scorer=str(bad))
    with pytest.raises((ValueError, ConfigError), match="needs workflow.memory.scorer: a JSON file"):
        _session("learned", first)
    with pytest.raises(ConfigError, match="unknown memory policy"):
        _session("lru", first)


def test_the_example_trains_end_to_end_on_a_tiny_base(tmp_path) -> None:  # noqa: ANN001
    """examples/collaborate.yaml (the shipped learned scorer) through base, SFT and RL, tiny."""
    import sys
    from pathlib import Path

    from teamrl.config import load_config
    from teamrl.trainer.trainer import Trainer

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_base import TINY_BASE

    repo = Path(__file__).resolve().parent.parent
    sets = [*TINY_BASE, "workflow.rounds=4", "tasks.drift_at=2", "recipe.iterations=1"]
    sets += [f"workflow.memory.scorer={repo / 'examples/memory_scorer.json'}"]
    sets += [f"policies.default.embedded.cache_dir={tmp_path / 'cache'}"]
    cfg = load_config(repo / "examples/collaborate.yaml", sets)
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        summary = trainer.fit()
    finally:
        trainer.close()
    last = summary["evals"][-1]
    assert last["label"] == "after_rl" and 0.0 <= last["eval/outcome"] <= 1.0
    assert "eval/acceptance_after_drift" in last and "eval/invalid_per_session" in last


def test_per_candidate_shows_each_candidate_with_the_notes_on_its_values() -> None:
    from teamrl.memory.workflow import proposal_prompt

    cands = [Topic("music", "long", "hype"), Topic("art", "short", "calm")]
    notes = [
        Note("likes music", "music", 1, 0, 0, count=2),
        Note("dislikes calm", "calm", -1, 1, 1),
        Note("said: coffee helps", None, 0, 2, 2),
    ]
    prompt = proposal_prompt(notes, cands, "per_candidate")
    assert "1. hype long music stream: +music +music\n" in prompt
    assert "2. calm short art stream: -calm\n" in prompt
    assert "coffee" not in prompt  # only notes on a candidate's values are shown
    assert "- likes music (x2)\ncandidates:" in proposal_prompt(notes, cands, "list")  # newest first
