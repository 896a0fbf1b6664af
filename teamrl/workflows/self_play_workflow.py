"""Workflow ``self_play`` on the :class:`~teamrl.workflows.base.Workflow` protocol: the two games of
``teamrl.workflows.self_play`` with their rewards, figures and the proposer_solver's own evaluations."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from teamrl.engine.team import ScriptedRole, Team
from teamrl.protocol import Episode
from teamrl.rewards.settings import RewardConfig
from teamrl.tasks.reasoning import ReasoningTask, load_jsonl_tasks
from teamrl.workflows.base import EpisodeFactory, Rollouts, Workflow
from teamrl.workflows.debate import with_answers
from teamrl.workflows.self_play import (
    HELD_OUT_FIGURES,
    apply_repetition_penalty,
    assign_self_play_rewards,
    generator_judge,
    proposals,
    proposer_solver,
    self_play_metrics,
    solve_alone,
)
from teamrl.workflows.self_play_settings import SOLVER, SelfPlayConfig


class SelfPlay(Workflow[SelfPlayConfig]):
    """``self_play``: generator vs judge, or proposer vs solver (``workflow.game``)."""

    Settings = SelfPlayConfig
    task_suite = "reasoning"
    task_type = ReasoningTask
    own_rewards = True

    @property
    def headline(self) -> list[tuple[str, str]]:  # type: ignore[override]  # per game; a class attribute in the base
        return HELD_OUT_FIGURES[self.settings.game]

    @property
    def _proposes(self) -> bool:
        return self.settings.game == "proposer_solver"

    @classmethod
    def check_config(cls, settings: SelfPlayConfig, config: Any) -> None:
        names = [f.name for f in config.reward.function_list()]
        if names != ["hybrid"]:
            raise ValueError(
                f"reward functions {names}: workflow self_play rewards each role by the rules of its game "
                "(see teamrl/workflows/self_play.py); remove reward.credit / reward.functions (hybrid)"
            )
        path = getattr(config.tasks, "path", None)
        if settings.game == "generator_judge" and path is not None:
            from pathlib import Path

            unlabelled = [t.task_id for t in load_jsonl_tasks(Path(path).expanduser()) if t.answer is None]
            if unlabelled:
                raise ValueError(
                    f"tasks.path: game generator_judge rewards the judge against the label, but "
                    f"{len(unlabelled)} task(s) of {path} have no answer (first: {unlabelled[0]!r}); give "
                    "every task an answer, or play game proposer_solver"
                )

    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        game = proposer_solver if self._proposes else generator_judge
        return await game(team, task, self.settings, group=group)

    def assign_rewards(self, episode: Episode, reward: RewardConfig) -> None:
        assign_self_play_rewards(episode, self.settings, reward.format_penalty)

    def batch_rewards(self, episodes: list[Episode], reward: RewardConfig) -> None:
        if self._proposes and self.settings.repetition_penalty > 0:
            apply_repetition_penalty(episodes, self.settings)

    def metrics(self, episodes: list[Episode], prefix: str) -> dict[str, float]:
        return self_play_metrics(episodes, prefix)

    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        from teamrl.workflows.experts import self_play_experts  # it imports the games' module

        experts = self_play_experts(rng)
        return {r: experts[r] for r in self.settings.order}

    def demonstration_tasks(self, tasks: list[Any]) -> list[Any]:
        return tasks if self._proposes else with_answers(tasks)

    async def demonstrate(self, team: Team, tasks: Sequence[Any]) -> list[Episode]:
        # the examples' own solutions are demonstrated below (solve_alone) whether or not the solver
        # practises them in RL: the base and SFT data stay those of the same game without anchors
        plain = type(self)(self.settings.model_copy(update={"anchor_samples": 0}), self.sandbox)
        episodes = [await plain.play(team, task) for task in tasks]
        if self._proposes:  # the solver also learns the suite's own problems, which evaluations ask it
            known = [t for t in tasks if isinstance(t, ReasoningTask) and t.answer is not None]
            episodes += [await solve_alone(team, t, self.settings) for t in known]
        return episodes

    def evaluate(
        self, rollouts: Rollouts, tasks: list[Any], episodes: list[Episode], samples: int
    ) -> tuple[dict[str, float], dict[str, list[Episode]]]:
        """proposer_solver: the solver alone on the held-out problems themselves, ``samples`` times each (its
        accuracy on a fixed set, whatever the proposer writes: ``eval/selfplay/solver_heldout_accuracy``),
        and, with ``reference_samples`` and a snapshot, the solver as it started on each valid proposal of
        ``episodes`` (``eval/selfplay/reference_solver_rate``: the proposals' difficulty for a solver that
        does not learn)."""
        if not self._proposes:
            return {}, {}
        known = [t for t in tasks if isinstance(t, ReasoningTask) and t.answer is not None]
        solo = rollouts.run(self._alone(rollouts, known, samples, "eval-solver"))
        metrics = self_play_metrics(solo, prefix="eval/")
        metrics.update(self.reference_rate(rollouts, episodes))
        return metrics, {"solver": solo}

    def _alone(
        self, rollouts: Rollouts, tasks: list[ReasoningTask], samples: int, seed_key: str
    ) -> list[EpisodeFactory]:
        def factory(task: ReasoningTask, g: int) -> EpisodeFactory:
            from teamrl.engine.team import seeded

            seeds = rollouts.seeds(seed_key, task.question, g)
            return lambda: seeded(solve_alone(rollouts.team, task, self.settings, group=g), seeds)

        return [factory(t, g) for t in tasks for g in range(samples)]

    def reference_rate(self, rollouts: Rollouts, episodes: list[Episode]) -> dict[str, float]:
        """The solver as it started, on every valid proposal of ``episodes``
        (``eval/selfplay/reference_solver_rate``); nothing without a snapshot or a valid proposal."""
        if not self.settings.reference_samples:
            return {}
        ref = rollouts.reference_adapter(SOLVER)
        if ref is None:  # no solver adapter, or no snapshot yet (a run stopped before it was made)
            return {}
        tasks = proposals(episodes, self.settings)
        if not tasks:
            return {}
        seat = dataclasses.replace(rollouts.team.seats[SOLVER], adapter=ref)
        with rollouts.team.seated({SOLVER: seat}):
            solved = rollouts.run(
                self._alone(rollouts, tasks, self.settings.reference_samples, "eval-reference")
            )
        flags = [bool(e.verifier["correct"]) for e in solved]
        return {"eval/selfplay/reference_solver_rate": sum(flags) / len(flags)}
