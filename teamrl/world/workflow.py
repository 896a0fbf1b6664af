"""Workflow ``town`` and task suite ``towns``: LLM agents live a day in the town (issue 20), written on the
public workflow and task-suite API only.

One teamrl episode is one day of one town (its task: a seed). Every agent is played by the workflow's role
(``order[0]``, ``resident`` by default: one policy, parameter sharing, for any number of agents). The
Generative Agents loop, in text:

* a **memory stream** per agent: what it did, saw and was told, each with an importance; the prompt shows the
  ``memory_entries`` most worth recalling (importance x ``recall_decay`` ^ age: recency and importance, as in
  Generative Agents' retrieval), in the order they happened;
* a **reflection that writes the plan** at tick 0 and every ``reflect_every`` ticks: the agent reads its goals
  and memory and answers ``PLAN: cafe library park`` (the places it means to act at, in order); the plan goes
  into its memory stream and is shown in every later prompt;
* an **action** every tick, a structured message: ``move <place>``, ``use <object>``, ``talk <agent> <topic>``
  or ``wait`` (a reply that does not parse waits and is malformed).

Rewards (each agent, each tick; ``weights`` over the town's objectives): ``goal`` and ``social`` read from
the world state (:meth:`teamrl.world.town.Town.step`); ``coherence`` is 1 when the action follows the agent's
**stated** plan (:func:`follows_plan`: moving to the plan's next place, or acting there); at the day's end,
``plausibility`` (a fixed judge's score of the day's transcript, ``teamrl.world.judge``) and ``diversity``
(the entropy of whom it talked to about what). Each turn is rewarded with its agent's return from that tick
on (minus ``invalid_penalty`` for a malformed reply), ranked against the same agent's turn at the same tick in
the other episodes of the town's group (``Episode.attempt_groups``). The episode's outcome is the share of
goals achieved; it is solved when the gathering happened.

At every evaluation the judge is calibrated on the shipped anchors (:class:`teamrl.world.judge.JudgeMonitor`:
its AUC and anchor mean, and whether it drifted since the run's first evaluation), and a second judge scores
the same held-out days (their rank agreement and mean difference: the judge's own noise).
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from teamrl.engine.team import RoleCall, ScriptedRole, Team
from teamrl.protocol import Episode, Message, Turn, render_message
from teamrl.protocol.settings import SeatConfig, Strict, TaskSettings, WorkflowSettings
from teamrl.rewards.settings import RewardConfig
from teamrl.tasks.base import TaskSuite
from teamrl.workflows.base import Rollouts, Workflow
from teamrl.world.judge import JUDGE_CHOICES, JudgeMonitor, agreement, load_anchors, make_judge
from teamrl.world.town import OBJECTS, PARTY_PLACE, PLACES, Action, Town

_ACTION = re.compile(r"^(wait|move (\w+)|use (\w+)|talk (agent_\d+) (\w+))$")
_PLAN = re.compile(r"^PLAN:((?: \w+){1,4})$")


@dataclass(frozen=True)
class TownTask:
    """One town to live a day in: its seed fixes where everyone starts, their objects and the book's two
    claimants."""

    task_id: str
    seed: int


class TownTasksConfig(TaskSettings):
    """Towns of ``teamrl.world.town``; train and held-out ones never share a seed."""

    suite: str = "towns"
    heldout_size: int = 32
    population: int = Field(100_000, ge=2, description="towns per split to draw from")


class TownSuite(TaskSuite[TownTasksConfig]):
    """``towns``: one task per town seed (train even, held-out odd)."""

    Settings = TownTasksConfig
    task_type = TownTask

    def sample(self, split: str, n: int, rng: random.Random) -> list[Any]:
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', not {split!r}")
        s = self.settings
        out = []
        for _ in range(n):
            index = 2 * rng.randrange(s.population) + (split == "heldout")
            out.append(TownTask(f"town-{s.seed}-{index}", s.seed * 1_000_003 + index))
        return out


class TownWeights(Strict):
    """The weights of the town's objectives in each agent's reward."""

    goal: float = Field(1.0, description="per goal reached (one's object, the book, the gathering)")
    social: float = Field(0.1, description="per conversation with someone it had not talked to yet")
    coherence: float = Field(0.05, description="per tick its action follows its stated plan")
    plausibility: float = Field(0.0, description="x the judge's score of the day, at its end")
    diversity: float = Field(0.0, description="x the entropy of whom it talked to about what, at its end")


class TownConfig(WorkflowSettings):
    """Workflow ``town``: a day of LLM agents in the town (see teamrl/world/workflow.py)."""

    name: str = "town"
    roles: dict[str, SeatConfig] = Field(default_factory=lambda: {"resident": SeatConfig(max_new_tokens=16)})
    order: list[str] = Field(default_factory=lambda: ["resident"])
    agents: int = Field(6, ge=2, le=64, description="agents in the town, all played by the role order[0]")
    horizon: int = Field(12, ge=2, le=200, description="ticks in a day")
    reflect_every: int = Field(
        6, ge=0, description="ticks between reflections (each rewrites the plan); 0: one plan at tick 0"
    )
    memory_entries: int = Field(4, ge=0, le=32, description="memories recalled into each prompt")
    recall_decay: float = Field(
        0.9, gt=0, le=1, description="a memory's recall weight: importance x decay^age"
    )
    weights: TownWeights = Field(default_factory=TownWeights)
    invalid_penalty: float = Field(0.1, ge=0, description="subtracted from a malformed turn's reward")
    judge: str = Field(
        "rule", description="the judge of plausibility: rule, rule_noisy or an HF checkpoint dir"
    )
    second_judge: str | None = Field(
        "rule_noisy", description="a second judge whose agreement is reported at evaluation (None: none)"
    )
    judge_threshold: float = Field(0.05, gt=0, description="anchor drift beyond which the judge is flagged")

    @field_validator("judge", "second_judge")
    @classmethod
    def _known_judge(cls, spec: str | None) -> str | None:
        if spec is None or spec in ("rule", "rule_noisy"):
            return spec
        path = Path(spec).expanduser()
        if not path.is_dir():
            raise ValueError(f"judge {spec!r}: no such judge or directory; choose {JUDGE_CHOICES}")
        return str(path.resolve())  # saved absolute: the run resumes from anywhere

    @model_validator(mode="after")
    def _one_role(self) -> TownConfig:
        if len(self.order) != 1 or self.order[0] not in self.roles:
            raise ValueError(
                f"workflow.order {self.order}: the town has one role, in workflow.roles, that plays every "
                "agent (e.g. order: [resident])"
            )
        return self


@dataclass
class Memory:
    """One memory of an agent's stream."""

    tick: int
    text: str
    importance: float


@dataclass
class Mind:
    """What an agent carries through the day: its memory stream, its plan, whom it knows to know the party."""

    stream: list[Memory] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    plan_step: int = 0  # index of the plan's next place
    knowers: set[str] = field(default_factory=set)

    def remember(self, tick: int, text: str, importance: float) -> None:
        self.stream.append(Memory(tick, text, importance))

    def recall(self, now: int, k: int, decay: float) -> list[Memory]:
        """The ``k`` memories most worth recalling (importance x decay^age), oldest first."""
        ranked = sorted(self.stream, key=lambda m: -m.importance * decay ** (now - m.tick))[:k]
        return sorted(ranked, key=lambda m: m.tick)


def parse_action(text: str, agents: list[str]) -> Action | None:
    """The action a reply names, or None when it does not parse (a place, object or topic that does not
    exist parses: the world then counts the action as one that cannot happen)."""
    m = _ACTION.match(" ".join(text.strip().split()))
    if m is None:
        return None
    if m.group(1) == "wait":
        return Action("wait")
    if m.group(2):
        return Action("move", place=m.group(2))
    if m.group(3):
        return Action("use", obj=m.group(3))
    return Action("talk", to=m.group(4), topic=m.group(5))


def parse_plan(text: str) -> list[str] | None:
    """The places of ``PLAN: a b c`` (1 to 4 known places), or None."""
    m = _PLAN.match(" ".join(text.strip().split()))
    if m is None:
        return None
    places = m.group(1).split()
    return places if all(p in PLACES for p in places) else None


def follows_plan(mind: Mind, place: str, action: Action) -> bool:
    """Whether ``action``, taken at ``place``, follows the stated plan: moving to its next place, or acting
    (anything but moving away) at it; with the plan done, anything but moving. No plan: never."""
    if not mind.plan:
        return False
    if mind.plan_step >= len(mind.plan):
        return action.kind != "move"
    target = mind.plan[mind.plan_step]
    if action.kind == "move":
        return action.place == target and place != target
    return place == target


def describe(action: Action) -> str:
    if action.kind == "move":
        return f"move {action.place}"
    if action.kind == "use":
        return f"use {action.obj}"
    if action.kind == "talk":
        return f"talk {action.to} {action.topic}"
    return "wait"


def view_of(town: Town, agent: str, mind: Mind, cfg: TownConfig) -> dict[str, Any]:
    """What an agent can know at this tick (its prompts and its expert read nothing else)."""
    s = town.state[agent]
    here = [o for o in town.agents if o != agent and town.state[o].place == s.place]
    return {
        "agent": agent,
        "t": town.t,
        "horizon": town.horizon,
        "place": s.place,
        "here": here,
        "knowers": sorted(mind.knowers),
        "private": s.private,
        "private_done": s.done["private"],
        "wants_book": s.wants_book,
        "book_done": s.done["book"],
        "book_free": town.book_holder is None,
        "knows_party": s.knows_party,
        "shared_done": s.done["shared"],
        "plan": list(mind.plan[mind.plan_step :]),
        "memory": [f"t={m.tick} {m.text}" for m in mind.recall(town.t, cfg.memory_entries, cfg.recall_decay)],
    }


def _goals(view: dict[str, Any]) -> str:
    obj = view["private"]
    parts = [f"{obj} done" if view["private_done"] else f"{obj} at the {OBJECTS[obj]}"]
    if view["wants_book"]:
        parts.append(
            "book done" if view["book_done"] else "book " + ("free" if view["book_free"] else "taken")
        )
    if view["shared_done"]:
        parts.append("party done")
    else:
        parts.append(f"party at the {PARTY_PLACE}" if view["knows_party"] else "party place unknown")
    return "; ".join(parts)


def town_prompt(view: dict[str, Any], kind: Literal["plan", "act"], role: str = "resident") -> str:
    """The prompt of an agent's turn (``role``: the workflow's role that plays every agent): who and where it
    is, its goals, plan and recalled memories."""
    here = " ".join(o + ("*" if o in view["knowers"] else "") for o in view["here"]) or "nobody"
    lines = [
        f"### {role}: {view['agent']} t={view['t']}/{view['horizon']} at the {view['place']}. here: {here}",
        f"goals: {_goals(view)}",
        f"plan: {' '.join(view['plan']) or 'none'}",
        "memory: " + (" | ".join(view["memory"]) or "none"),
    ]
    if kind == "plan":
        lines.append("Reflect and plan. Reply PLAN: <places>.")
    else:
        lines.append("Act. Reply move <place>, use <object>, talk <agent> <topic> or wait.")
    return "\n".join(lines) + "\n"


def expert_plan(view: dict[str, Any]) -> list[str]:
    """The places a sensible agent means to act at: its object's, the library for a free book it wants,
    then the park (for the party, or to learn of it)."""
    places = []
    if not view["private_done"]:
        places.append(OBJECTS[view["private"]])
    if view["wants_book"] and not view["book_done"] and view["book_free"]:
        places.append("library")
    if not view["shared_done"]:
        places.append(PARTY_PLACE)
    return places or [view["place"]]


def expert_action(view: dict[str, Any], rng: random.Random) -> Action:
    """A sensible agent from what it can know (:func:`view_of`), the text twin of
    :func:`teamrl.world.town.planned`: its errands in order, then the party: telling those here it does not
    know to know, asking around while it does not know the place."""
    for todo, place, obj in (
        (not view["private_done"], OBJECTS[view["private"]], view["private"]),
        (view["wants_book"] and not view["book_done"] and view["book_free"], "library", "book"),
    ):
        if todo:
            return Action("use", obj=obj) if view["place"] == place else Action("move", place=place)
    if view["shared_done"]:
        return Action("wait")
    here = view["here"]
    if not view["knows_party"]:
        return (
            Action("talk", to=rng.choice(here), topic="party") if here else Action("move", place=PARTY_PLACE)
        )
    if view["place"] != PARTY_PLACE:
        tell = [o for o in here if o not in view["knowers"]]
        return (
            Action("talk", to=rng.choice(tell), topic="party") if tell else Action("move", place=PARTY_PLACE)
        )
    options = [Action("wait")] + [Action("talk", to=o, topic="party") for o in here]
    return rng.choice(options)


class TownWorkflow(Workflow[TownConfig]):
    """``town`` (see the module)."""

    Settings = TownConfig
    task_suite = "towns"
    task_type = TownTask
    own_rewards = True
    headline = [("goals achieved", "eval/outcome"), ("gathering", "eval/solved")]

    def __init__(self, settings: TownConfig, sandbox: Any = None) -> None:
        super().__init__(settings, sandbox)
        self.judge = make_judge(settings.judge)
        self.second = make_judge(settings.second_judge, seed=1) if settings.second_judge else None
        self.monitor = JudgeMonitor(self.judge, load_anchors(), threshold=settings.judge_threshold)

    async def play(self, team: Team, task: Any, group: int = 0) -> Episode:
        cfg, role = self.settings, self.settings.order[0]
        w = cfg.weights
        town = Town(cfg.agents, cfg.horizon, seed=task.seed)
        minds = {a: Mind() for a in town.agents}
        minds[town.agents[0]].remember(0, f"the party is at the {PARTY_PLACE}", 3.0)
        episode = Episode(task_id=task.task_id, group=group)
        rewards: dict[str, list[float]] = {a: [] for a in town.agents}  # per tick
        turns: list[tuple[int, str, int, bool, str]] = []  # (turn index, agent, tick, malformed, kind)
        malformed = coherent = 0
        while not town.over:
            t = town.t
            if t == 0 or (cfg.reflect_every and t % cfg.reflect_every == 0):
                replies = await self._all(team, role, town, minds, "plan")
                for a, turn in replies.items():
                    plan = parse_plan(_content(turn))
                    minds[a].plan, minds[a].plan_step = plan or [], 0
                    minds[a].remember(t, "I planned: " + (" ".join(plan) if plan else "nothing"), 3.0)
                    turns.append(self._add(episode, turn, a, t, plan is None, "plan"))
                    malformed += plan is None
            replies = await self._all(team, role, town, minds, "act")
            actions: dict[str, Action] = {}
            for a, turn in replies.items():
                act = parse_action(_content(turn), town.agents)
                turns.append(self._add(episode, turn, a, t, act is None, "act"))
                malformed += act is None
                actions[a] = act or Action("wait")
            where = {a: town.state[a].place for a in town.agents}
            follows = {a: follows_plan(minds[a], where[a], actions[a]) for a in town.agents}
            knew = {a: town.state[a].knows_party for a in town.agents}
            invalid = dict(town.invalid)
            earned = town.step(actions)
            for a in town.agents:
                earned[a]["coherence"] = float(follows[a])
                coherent += follows[a]
                rewards[a].append(w.goal * earned[a]["goal"] + w.social * earned[a]["social"])
                rewards[a][-1] += w.coherence * earned[a]["coherence"]
                self._observe(
                    town, minds, a, actions[a], where[a], knew, town.invalid[a] > invalid.get(a, 0), t
                )
        transcript = town.transcript()
        judged = self.judge(transcript)
        for a in town.agents:
            rewards[a][-1] += w.plausibility * judged + w.diversity * town.talk_diversity(a)
        for index, a, t, bad, kind in turns:
            episode.attempt_rewards[index] = float(sum(rewards[a][t:])) - cfg.invalid_penalty * bad
            episode.attempt_groups[index] = f"{a} {kind} t={t}"
        stats = town.stats()
        goals = [
            (s.done["private"], s.done["shared"]) + ((s.done["book"],) if s.wants_book else ())
            for s in town.state.values()
        ]
        achieved = sum(sum(g) for g in goals) / sum(len(g) for g in goals)
        episode.outcome = float(achieved)
        n_turns = max(len(turns), 1)
        episode.verifier = {
            "solved": stats["shared_achieved"] > 0,
            "goals_achieved": achieved,
            **stats,
            "plausibility": judged,
            "coherence": coherent / (cfg.agents * cfg.horizon),
            "malformed": malformed / n_turns,
            "return_per_agent": float(np.mean([sum(r) for r in rewards.values()])),
            "transcript": transcript,
        }
        return episode

    async def _all(
        self, team: Team, role: str, town: Town, minds: dict[str, Mind], kind: Literal["plan", "act"]
    ) -> dict[str, Turn]:
        """Every agent's turn of this tick at once (the engine batches them)."""
        views = {a: view_of(town, a, minds[a], self.settings) for a in town.agents}
        calls = [
            team.act(
                role,
                town_prompt(views[a], kind, role),
                "answer",
                round=town.t,
                context={"view": views[a], "kind": kind},
            )
            for a in town.agents
        ]
        return dict(zip(town.agents, await asyncio.gather(*calls), strict=True))

    @staticmethod
    def _add(
        episode: Episode, turn: Turn, agent: str, tick: int, bad: bool, kind: str
    ) -> tuple[int, str, int, bool, str]:
        episode.turns.append(turn)
        if turn.error:
            episode.errors.append(turn.error)
        return len(episode.turns) - 1, agent, tick, bad, kind

    @staticmethod
    def _observe(
        town: Town,
        minds: dict[str, Mind],
        a: str,
        act: Action,
        place: str,
        knew: dict[str, bool],
        failed: bool,
        t: int,
    ) -> None:
        """What ``a`` remembers of its tick (and its plan's progress)."""
        mind = minds[a]
        if failed:
            mind.remember(t, f"I could not {describe(act)}", 1.0)
        elif act.kind == "use":
            mind.remember(t, f"I took the {act.obj}", 2.0)
        elif act.kind == "talk":
            other = str(act.to)
            told = act.topic == "party" and knew[a]
            if told:
                mind.knowers.add(other)
                minds[other].knowers.add(a)
            mind.remember(t, f"I told {other} about the {act.topic}", 2.0 if told else 1.0)
            learned = told and not knew[other]
            news = f" at the {PARTY_PLACE}" if learned else ""
            minds[other].remember(t, f"{a} told me about the {act.topic}{news}", 3.0 if learned else 1.0)
        if failed and act == Action("use", obj="book") and town.book_holder not in (None, a):
            mind.remember(t, "the book is taken", 2.0)
        if mind.plan_step < len(mind.plan) and act.kind != "move" and place == mind.plan[mind.plan_step]:
            mind.plan_step += 1

    def assign_rewards(self, episode: Episode, reward: RewardConfig) -> None:
        """Every turn is rewarded on its own (``attempt_rewards``); the role's episode reward, logged, is the
        mean agent's return."""
        role = self.settings.order[0]
        episode.process = {role: 1.0 - float(episode.verifier.get("malformed", 0.0))}  # type: ignore[arg-type]
        episode.rewards = {role: float(episode.verifier.get("return_per_agent", 0.0))}  # type: ignore[arg-type]

    def metrics(self, episodes: list[Episode], prefix: str) -> dict[str, float]:
        """What emerged (conversations, partners, goals, plausibility, coherence with the stated plans)."""
        keys = (
            "conversations_per_agent",
            "partners_per_agent",
            "talk_entropy",
            "shared_achieved",
            "private_achieved",
            "book_achieved",
            "know_party",
            "invalid_per_agent",
            "plausibility",
            "coherence",
            "malformed",
            "return_per_agent",
        )
        return {
            f"{prefix}town/{k}": float(np.mean([float(e.verifier[k]) for e in episodes]))  # type: ignore[arg-type]
            for k in keys
            if episodes and all(k in e.verifier for e in episodes)
        }

    def evaluate(
        self, rollouts: Rollouts, tasks: list[Any], episodes: list[Episode], samples: int
    ) -> tuple[dict[str, float], dict[str, list[Episode]]]:
        """The judge calibrated on the anchors (drift since the run's first evaluation) and, with a second
        judge, the two judges' agreement on the held-out days."""
        row = self.monitor.check(len(self.monitor.history))
        out = {
            f"eval/judge/{k}": float(row[k]) for k in ("auc", "anchor_mean", "drift", "auc_drop", "drifted")
        }
        transcripts = [str(e.verifier["transcript"]) for e in episodes if "transcript" in e.verifier]
        if self.second is not None and len(transcripts) >= 2:
            agree = agreement(self.judge, self.second, transcripts)
            out["eval/judge/second_spearman"] = agree["spearman"]
            out["eval/judge/noise"] = agree["mean_abs_diff"]
        return out, {}

    def experts(self, rng: random.Random) -> dict[str, ScriptedRole]:
        """A sensible agent: plans its errands then the party (:func:`expert_plan`) and acts by
        :func:`expert_action`."""

        def resident(call: RoleCall) -> str:
            view = call.context["view"]
            if call.context["kind"] == "plan":
                content = "PLAN: " + " ".join(expert_plan(view))
            else:
                content = describe(expert_action(view, rng))
            return render_message(Message(role=call.role, kind="answer", content=content))

        return {self.settings.order[0]: resident}


def _content(turn: Turn) -> str:
    return turn.message.content if turn.message is not None else ""
