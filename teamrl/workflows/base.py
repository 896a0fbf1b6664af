"""The :class:`Workflow` protocol: how a team plays, is verified and is rewarded on one task.

A workflow is a class with a settings model (the ``workflow:`` section of a config) and a few methods; the
trainer, ``teamrl eval``, ``teamrl report``, the Ray workers and resume use nothing else of it. The
built-in ``pipeline``, ``debate`` and ``self_play`` are workflows of this kind, written on this public API
only. A config selects one by name, or user code by import path::

    workflow:
      name: mypkg.flows:SolverVerifier   # or flows.py:SolverVerifier, relative to the working directory
      roles: {solver: {max_new_tokens: 48}, verifier: {}}

Write one (docs: "Write your own workflow")::

    class SolverVerifier(Workflow[MySettings]):
        Settings = MySettings            # its pydantic settings (roles, order and its own fields)
        task_suite = "reasoning"         # the default ``tasks.suite``

        async def play(self, team, task, group=0) -> Episode:
            ...   # ``await team.act(role, prompt, kind)`` per turn; verify; set episode.outcome

        def process_scores(self, episode) -> dict[str, float]:
            ...   # optional: each role's own score in [0, 1] (the hybrid reward mixes it with the outcome)

``teamrl.testing.check_workflow`` runs a workflow through the checks the trainer relies on.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from teamrl.engine.team import EpisodeSeeds, ScriptedRole, Team
from teamrl.protocol import Episode, Turn
from teamrl.protocol.settings import ConfigError, SeatConfig, WorkflowSettings
from teamrl.rewards.credit import hybrid_mix

if TYPE_CHECKING:
    from teamrl.rewards.credit import ScoredTurn
    from teamrl.rewards.settings import RewardConfig
    from teamrl.tasks.sandbox import Sandbox

S = TypeVar("S", bound=WorkflowSettings)
EpisodeFactory = Callable[[], Awaitable[Episode]]


@dataclass
class Rollouts:
    """What a workflow's own evaluation (:meth:`Workflow.evaluate`) may use besides its episodes: the team,
    the engine's ``run`` (episode factories -> episodes, played concurrently), sampling seeds, and the
    frozen snapshot of a role (its adapter before RL)."""

    team: Team
    run: Callable[[list[EpisodeFactory]], list[Episode]]
    seeds: Callable[..., EpisodeSeeds | None]  # (seed_key, *parts) -> one episode's seeds, or None (unseeded)
    reference_adapter: Callable[[str], str | None]  # role -> its snapshot's adapter name, None: none loaded


class Workflow(ABC, Generic[S]):
    """One way for a team to work on a task. Subclass it, set :attr:`Settings`, write :meth:`play`.

    The trainer calls, per episode: :meth:`play` (the episode, verified), :meth:`assign_rewards` (per-role
    rewards, by default the hybrid ``alpha * outcome + (1 - alpha) * process - penalty``); per batch:
    :meth:`batch_rewards`, :meth:`metrics`; before RL: :meth:`experts` and :meth:`demonstrate` (SFT and
    the embedded base's pre-training); at evaluation: :meth:`evaluate`.
    """

    Settings: ClassVar[type[WorkflowSettings]]
    task_suite: ClassVar[str] = "reasoning"  # the default ``tasks.suite``
    task_type: ClassVar[type | None] = None  # the task class play() takes; a suite of another is refused
    uses_sandbox: ClassVar[bool] = False  # needs a code sandbox (``sandbox:``) to verify
    # the experts' episodes run code too; that code is the experts' own (no model writes it), so it runs
    # forked from warm interpreters rather than contained, unless ``sandbox.trust_demonstrations: false``
    demonstrations_need_sandbox: ClassVar[bool] = False
    own_rewards: ClassVar[bool] = False  # the rules of the game are the reward: only reward ``hybrid``
    # the held-out table's leading rows (label, metric) that ``teamrl train`` / ``teamrl eval`` print
    headline: ClassVar[list[tuple[str, str]]] = [("success", "eval/solved"), ("outcome", "eval/outcome")]

    def __init__(self, settings: S, sandbox: Sandbox | None = None) -> None:
        self.settings = settings
        self.sandbox = sandbox

    # -- identity -------------------------------------------------------------------------------
    @property
    def order(self) -> list[str]:
        """Every role, in speaking order."""
        return list(getattr(self.settings, "order", None) or self.roles)

    @property
    def roles(self) -> dict[str, SeatConfig]:
        return dict(getattr(self.settings, "roles", {}))

    @classmethod
    def check_config(cls, settings: S, config: Any) -> None:
        """Raise ValueError when the rest of the run's ``config`` cannot work with these settings (called
        when the config is validated)."""

    # -- one episode ------------------------------------------------------------------------------
    @abstractmethod
    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        """Play one episode on ``task`` (``group``: its index in the task's group) and verify it: fill
        ``episode.outcome`` (the team's result in [0, 1]) and ``episode.verifier`` (with ``"solved"``, the
        team's success). Its only awaits should be ``team.act`` calls (and the sandbox's checks)."""

    def process_scores(self, episode: Episode) -> dict[str, float]:
        """Each role's own score in [0, 1] (what it contributed), read from the verified episode. Default:
        none (the hybrid reward is then the outcome)."""
        return {}

    def role_outcomes(self, episode: Episode) -> dict[str, float]:
        """The outcome each role that spoke is rewarded for (default: the team's, ``episode.outcome``)."""
        return {turn.role: episode.outcome for turn in episode.turns}

    def scored_turns(self, episode: Episode) -> list[ScoredTurn]:
        """Every turn's own verifier score, for the per-turn credit functions (``maporl``, ``marti``)."""
        raise NotImplementedError(
            f"workflow {type(self).__name__} scores no single turns (scored_turns): reward functions "
            "maporl and marti need them; use hybrid, shared or counterfactual"
        )

    def assign_rewards(self, episode: Episode, reward: RewardConfig) -> None:
        """Fill ``episode.process`` and ``episode.rewards`` of every role that spoke. Default: the hybrid
        reward ``alpha * outcome_i + (1 - alpha) * p_i - format_penalty * (malformed turns / turns)`` with
        ``reward.role_alpha`` overriding ``alpha`` per role."""
        process, outcomes = self.process_scores(episode), self.role_outcomes(episode)
        hybrid_mix(episode, outcomes, process, reward.alpha, reward.format_penalty, reward.role_alpha)

    def batch_rewards(self, episodes: list[Episode], reward: RewardConfig) -> None:
        """Rewards that need the whole batch, after :meth:`assign_rewards` of each episode."""

    # -- figures ----------------------------------------------------------------------------------
    def metrics(self, episodes: list[Episode], prefix: str) -> dict[str, float]:
        """The workflow's own figures over a batch, keyed ``{prefix}...`` (logged and in the report)."""
        return {}

    def evaluate(
        self, rollouts: Rollouts, tasks: list[Any], episodes: list[Episode], samples: int
    ) -> tuple[dict[str, float], dict[str, list[Episode]]]:
        """More held-out figures, after the evaluation's ``episodes`` on ``tasks``: (metrics, episodes to
        save by file suffix). Default: none."""
        return {}, {}

    def pairing_score(self, episode: Episode, role: str, opponent: str) -> float | None:
        """Recipe population: ``role``'s result against ``opponent`` in one episode (1 win, 0.5 draw, 0
        loss); None: compare their rewards."""
        return None

    def answer_of(self, turn: Turn) -> str | None:
        """The answer a turn commits to, where the workflow has one (recipe population's diversity)."""
        return None

    # -- demonstrations -----------------------------------------------------------------------------
    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        """A scripted expert per role (``rng`` draws their slips), whose episodes are the SFT data and the
        embedded base's pre-training. Without them: ``recipe.sft.enabled: false`` and a ``kind: hf`` model.
        Code they write is trusted (``demonstrations_need_sandbox``): an expert that asks a model for its
        code wants ``sandbox.trust_demonstrations: false``."""
        raise ConfigError(
            f"workflow {type(self).__name__} has no scripted experts, so nothing can demonstrate it: set "
            "recipe.sft.enabled: false and use a policy of kind hf (the embedded base is pre-trained on "
            "demonstrations)"
        )

    def demonstration_tasks(self, tasks: list[Any]) -> list[Any]:
        """The tasks an expert can demonstrate (default: all)."""
        return tasks

    async def demonstrate(self, team: Team, tasks: Sequence[Any]) -> list[Episode]:
        """The experts' episodes on ``tasks`` (``team`` seats the experts); default: :meth:`play` each."""
        return [await self.play(team, task) for task in tasks]


class WorkflowError(ValueError):
    """A workflow returned what the trainer cannot use (an episode of another task, an outcome outside
    [0, 1], no ``verifier["solved"]``, ...); :func:`teamrl.testing.check_workflow` lists every problem."""


def episode_problems(episode: object, task: Any, group: int) -> list[str]:
    """What is wrong with ``episode`` as :meth:`Workflow.play`'s result on ``task`` (``group``: its index
    in the task's group), for the trainer (which refuses it) and ``check_workflow``; [] when nothing is."""
    if not isinstance(episode, Episode):
        return [f"play returned a {type(episode).__name__}, not an Episode"]
    out = []
    task_id = getattr(task, "task_id", episode.task_id)
    if episode.task_id != task_id:
        out.append(f"episode.task_id {episode.task_id!r} is not the task's {task_id!r}")
    if episode.group != group:
        out.append(f"episode.group {episode.group} is not the group asked ({group})")
    outcome = episode.outcome
    if not (isinstance(outcome, int | float) and 0.0 <= outcome <= 1.0):  # a bool is 0 or 1
        out.append(f"outcome {outcome!r} is not a number in [0, 1]")
    if "solved" not in episode.verifier:
        out.append("verifier has no 'solved' (the team's success, read by every report)")
    return out


def checked_episode(workflow: Workflow[Any], episode: object, task: Any, group: int) -> Episode:
    """``episode`` if it is a usable result of ``workflow.play(team, task, group=group)``, else
    :class:`WorkflowError` naming the workflow, the task and every problem."""
    problems = episode_problems(episode, task, group)
    if problems:
        raise WorkflowError(
            f"workflow {type(workflow).__name__}.play on task {getattr(task, 'task_id', task)!r} (group "
            f"{group}): " + "; ".join(problems) + " (teamrl.testing.check_workflow lists every problem)"
        )
    return episode  # type: ignore[return-value]
