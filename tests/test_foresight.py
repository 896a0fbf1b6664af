"""A role's teammate model on the LLM side (issue 21, teamrl/workflows/foresight.py): a probe on the role's
hidden state predicts what comes back; with ``imagine`` the coder writes another first version while it
expects failure, and keeps the one it expects most of, the others' tokens counted."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch
from test_trainer import SMALL

from teamrl.config import load_config
from teamrl.engine.team import RoleCall, Seat, Team
from teamrl.protocol import Message, Turn, render_message
from teamrl.tasks.programming import ProgrammingTaskSuite
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.trainer.build import build_workflow
from teamrl.workflows.foresight import HiddenStateProbe, foresight, imagine, turn_features


def test_the_probe_learns_a_separable_outcome_and_round_trips(tmp_path) -> None:  # noqa: ANN001
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 16, generator=gen) * 3 + 5
    y = (x[:, 3] - 5 + 0.5 * (x[:, 7] - 5) > 0).tolist()
    probe = HiddenStateProbe.fit(x[:150], y[:150])
    held = probe.predict(x[150:]) > 0.5
    assert (held == torch.tensor(y[150:])).float().mean() > 0.9
    probe.save(tmp_path / "probe.json")
    again = HiddenStateProbe.load(tmp_path / "probe.json")
    assert torch.allclose(again.predict(x), probe.predict(x))
    with pytest.raises(ValueError, match="both outcomes"):
        HiddenStateProbe.fit(x[:10], [True] * 10)


def test_imagine_writes_again_only_while_it_expects_failure() -> None:
    def turn(text: str) -> Turn:
        return Turn(role="coder", prompt="p", text=text)

    chance = {"a": 0.2, "b": 0.4, "c": 0.9, "d": 0.95}

    async def predict(t: Turn) -> float:
        return chance[t.text]

    def run(first: str, rest: list[str], tries: int, threshold: float) -> tuple[int, list[str], list[float]]:
        async def another(k: int) -> Turn:
            return turn(rest[k - 1])

        kept, versions, chances = asyncio.run(imagine(turn(first), predict, another, tries, threshold))
        return kept, [v.text for v in versions], chances

    assert run("c", ["d"], 3, 0.5) == (0, ["c"], [0.9])  # expected to pass: handed over as it is
    assert run("a", ["b", "c", "d"], 3, 0.5) == (2, ["a", "b", "c"], [0.2, 0.4, 0.9])  # stops at c
    assert run("b", ["a", "a"], 3, 0.5) == (0, ["b", "a", "a"], [0.4, 0.2, 0.2])  # keeps the best of 3
    assert run("a", ["b"], 1, 0.5)[1] == ["a"]  # one try: imagine changes nothing


def test_the_test_driven_coder_imagines_before_handing_over() -> None:
    sandbox = Sandbox(SandboxLimits())
    task = next(
        t for t in ProgrammingTaskSuite(seed=0).sample("train", 40, random.Random(3)) if t.kind == "fix"
    )

    def coder(call: RoleCall) -> str:  # the first sample is the buggy version, a second the right one
        code = (
            task.buggy_solution
            if call.context.get("sample", 0) == 0 and call.round == 0
            else task.reference_solution
        )
        return render_message(Message(role=call.role, kind="code", content=code.strip("\n")))

    async def expects(t: Turn) -> float:
        return 0.9 if task.reference_solution.strip("\n") in t.text else 0.1

    sets = ["workflow.name=test_driven", "workflow.order=[coder]"]
    with_imagine = build_workflow(load_config(None, [*sets, "workflow.imagine=true"]), sandbox)
    team = Team({"coder": Seat(script=coder)})
    with pytest.raises(ValueError, match="needs a teammate model for 'coder'"):
        asyncio.run(with_imagine.play(team, task))
    team.foresight["coder"] = expects
    episode = asyncio.run(with_imagine.play(team, task))
    assert episode.verifier["foresight"] == {"predicted": [0.1, 0.9], "kept": 1, "extra_tokens": 0}
    assert len(episode.verifier["code_pass"]) == 1 and episode.verifier["solved"]  # no revision needed
    assert len(episode.turns_of("coder")) == 1  # the version not kept is no turn of the episode
    [aside] = episode.discarded  # kept apart: the buggy first version the coder expected to fail
    assert task.buggy_solution.strip("\n") in aside.text
    plain = asyncio.run(build_workflow(load_config(None, sets), sandbox).play(team, task))
    assert "foresight" not in plain.verifier and len(plain.verifier["code_pass"]) == 2  # buggy, then fixed


def test_a_probe_on_the_policy_s_hidden_states_drives_imagine_beside_the_engine(tmp_path) -> None:  # noqa: ANN001
    """Real turns of the embedded model: features are read under the coder's adapter, one row per turn, the
    same whether read alone or in a batch; imagining episodes run concurrently with the engine's generation
    (the adapter switch is locked) and count the tokens of the versions not kept."""
    from teamrl.trainer.trainer import Trainer

    cfg = load_config(
        overrides=[
            *SMALL,
            f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
            "workflow.name=test_driven",
            "workflow.order=[tester, coder]",
            "recipe.roles=[coder]",
            "tasks.heldout_size=6",
        ]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        tasks = trainer.suite.fixed_set("train", 6)
        episodes = trainer.rollout(tasks, 2)
        turns = [e.turns_of("coder")[0] for e in episodes]
        policy = trainer.policies["default"]
        adapter = trainer.team.seats["coder"].adapter
        x = turn_features(policy, adapter, turns)
        assert x.shape[0] == len(turns) and torch.isfinite(x).all()
        assert torch.allclose(turn_features(policy, adapter, turns[:1])[0], x[0], atol=1e-4)
        labels = [i % 2 == 0 for i in range(len(turns))]  # any two outcomes: the wiring is what is tested
        probe = HiddenStateProbe.fit(x, labels)
        trainer.team.foresight["coder"] = foresight(policy, adapter, probe)
        trainer.workflow.settings = trainer.workflow.settings.model_copy(
            update={"imagine": True, "imagine_threshold": 1.0, "imagine_tries": 2}  # always a second version
        )
        imagined = trainer.rollout(tasks, 2)
        for e in imagined:
            info = e.verifier["foresight"]
            assert len(info["predicted"]) == 2 and info["extra_tokens"] > 0
            # the version set aside is no turn, but its tokens count as generated (budgets, tokens per solve)
            [aside] = e.discarded
            assert aside.role == "coder" and len(aside.completion_ids) == info["extra_tokens"]
            spent = sum(
                len(t.completion_ids) for t in [*e.turns, *(c.turn for c in e.candidates)] if not t.reused
            )
            assert e.num_generated_tokens == spent + info["extra_tokens"]
    finally:
        trainer.close()
