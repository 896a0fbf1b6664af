"""The team episode as a PettingZoo AEC environment: text observations, text actions.

Each agent is a role; the agent to act is whoever the workflow asks next (the reviewer may hand
the turn back to the coder). An observation is the role's prompt; an action is its raw text,
which is parsed exactly as a model's completion would be (malformed text costs the format
penalty). When the conversation ends the episode is verified in the sandbox and every role
receives its hybrid reward.
"""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import Coroutine, Generator
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from pettingzoo import AECEnv
from pydantic import ValidationError

from teamrl.config import Config, PipelineConfig, TasksConfig
from teamrl.engine.team import Team, parsed_turn
from teamrl.protocol import MessageKind, Turn
from teamrl.rewards.credit import assign_hybrid_rewards
from teamrl.tasks.programming import ProgrammingTask, ProgrammingTaskSuite
from teamrl.tasks.sandbox import Sandbox, SandboxLimits
from teamrl.workflows.pipeline import play_pipeline, verify

CHARSET = string.printable
MAX_OBSERVATION = 4096
MAX_ACTION = 512


class TextObservation(np.str_):  # type: ignore[misc]  # numpy marks it final in its stubs only
    """A prompt: a ``str`` (so ``Text.contains`` holds) that reports the Text space's numpy dtype,
    which PettingZoo's ``api_test`` compares with the observation's."""

    dtype = np.dtype("<U")  # type: ignore[assignment]


class _ActionRequest:
    """Awaited by a role's turn; the environment's ``step`` supplies the text."""

    def __init__(self, role: str, prompt: str) -> None:
        self.role, self.prompt = role, prompt

    def __await__(self) -> Generator[_ActionRequest, str, str]:
        return (yield self)


class _SteppedTeam(Team):
    def __init__(self, roles: list[str]) -> None:
        self.seats = dict.fromkeys(roles)  # type: ignore[arg-type,assignment]
        self.engine = None

    async def act(
        self,
        role: str,
        prompt: str,
        kind: MessageKind,
        *,
        round: int = 0,
        context: dict[str, Any] | None = None,
    ) -> Turn:
        text = await _ActionRequest(role, prompt)
        return parsed_turn(Turn(role=role, round=round, prompt=prompt, text=text), kind)


class TeamAECEnv(AECEnv):
    metadata = {"render_modes": ["human"], "name": "teamrl_pipeline_v0", "is_parallelizable": False}

    def __init__(
        self, cfg: Config | None = None, sandbox: Sandbox | None = None, render_mode: str | None = None
    ) -> None:
        super().__init__()
        self.cfg = cfg or Config()
        try:  # this view plays the pipeline on programming tasks
            self.settings = PipelineConfig.model_validate(self.cfg.workflow.model_dump())
            tasks = TasksConfig.model_validate(self.cfg.tasks.model_dump())
        except ValidationError:
            raise ValueError(
                f"TeamAECEnv plays workflow pipeline on programming tasks, not {self.cfg.workflow.name!r} "
                f"on {self.cfg.tasks.suite!r}"
            ) from None
        self.suite = ProgrammingTaskSuite(
            seed=tasks.seed, difficulty=(tasks.difficulty[0], tasks.difficulty[1]), kinds=tuple(tasks.kinds)
        )
        self.sandbox = sandbox or Sandbox(SandboxLimits(timeout_s=self.cfg.sandbox.timeout_s))
        self.render_mode = render_mode
        self.possible_agents = list(dict.fromkeys(self.settings.order))
        self._obs_space = Text(max_length=MAX_OBSERVATION, charset=CHARSET)
        self._act_space = Text(max_length=MAX_ACTION, charset=CHARSET)
        self._coro: Coroutine[Any, Any, Any] | None = None
        self.task: ProgrammingTask | None = None
        self.episode = None

    def observation_space(self, agent: str) -> Text:
        return self._obs_space

    def action_space(self, agent: str) -> Text:
        return self._act_space

    def observe(self, agent: str) -> TextObservation:
        return TextObservation(self._observations[agent])

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if self._coro is not None:
            self._coro.close()
        rng = random.Random(seed)
        self.task = self.suite.sample("train", 1, rng)[0]
        self.agents = self.possible_agents[:]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        self._observations = dict.fromkeys(self.agents, "")
        self.episode = None
        self._coro = play_pipeline(_SteppedTeam(self.agents), self.task, self.settings)
        self._advance(None)

    def _advance(self, text: str | None) -> None:
        assert self._coro is not None
        try:
            request = self._coro.send(text)
        except StopIteration as done:
            self._finish(*done.value)
            return
        self.agent_selection = request.role
        self._observations[request.role] = request.prompt[-MAX_OBSERVATION:]

    def _finish(self, episode: Any, state: Any) -> None:
        assert self.task is not None
        self._coro = None
        asyncio.run(verify(episode, self.task, state, self.sandbox))
        assign_hybrid_rewards(
            episode,
            self.settings.roles,
            self.cfg.reward.alpha,
            self.cfg.reward.format_penalty,
            self.cfg.reward.role_alpha,
        )
        self.episode = episode
        for agent in self.agents:
            self.rewards[agent] = float(episode.rewards.get(agent, 0.0))
            self.terminations[agent] = True
            self.infos[agent] = {"outcome": episode.outcome, "process": episode.process.get(agent, 0.0)}
        self._accumulate_rewards()
        self.agent_selection = self.agents[0]

    def step(self, action: str | None) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._advance("" if action is None else str(action))
        if self.render_mode == "human":
            self.render()

    def render(self) -> None:
        if self.render_mode == "human" and self.agents:
            print(f"[{self.agent_selection}] {self._observations.get(self.agent_selection, '')[:200]}")

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()
            self._coro = None
