"""A small town (issue 20): ``n_agents`` agents, a few places and objects, a clock, goals of three kinds
and actions as structured messages; the reward is a weighted mix of objectives read from the world state.

The rules, one tick at a time (every agent acts at once; :func:`aec_env` gives the turn-based view):

* **places** ``home, cafe, park, library, market``; each agent starts at a place drawn from the seed.
* **actions** (structured messages, :class:`Action`): ``wait``; ``move`` to a place; ``use`` an object of
  the place the agent is at (``coffee`` at the cafe, ``bread`` at the market, the one ``book`` at the
  library); ``talk`` to another agent about a topic (``weather, party, food, books``), which succeeds only
  when both stand at the same place. An action that cannot happen (using an object elsewhere, talking to
  someone absent) does nothing and is counted as invalid.
* **goals**: *shared*, a gathering: at least half of the agents at the party's place at the same tick, in
  the second half of the day; only agent 0 knows the place at first, and an agent who is told about the
  ``party`` by one who knows learns it (news spreads by talk); *private*: get one's object (coffee or
  bread); *in conflict*: the agents who want the book (two of them) cannot both have it: the first to use
  it holds it.
* **objectives**, per agent and tick: ``goal`` 1 when one of its goals becomes achieved; ``social`` 1 for a
  conversation it starts that succeeds with someone it has not talked to yet (a partner counts once per
  episode: talking to the same agent every tick earns nothing more, so the objective rewards meeting
  people, not chatter); ``coherence`` 1 when its action follows its plan (the actions that advance its
  first unachieved goal, :func:`planned`), else 0; and, judged at the end of an episode,
  ``plausibility``: how plausible its transcript reads as social behaviour to a fixed judge
  (:class:`teamrl.world.judge.RuleJudge`, calibrated on shipped anchor transcripts). The reward is
  ``weights`` over them (default goal 1, social 0.1, coherence 0.05, plausibility 0), plus an exploration
  bonus over social strategies at the episode's end (``diversity_weight`` x the normalised entropy of
  whom it talked to about what, :meth:`Town.talk_diversity`): changing the weights changes what emerges
  (benchmarks/world_benchmark.py).

Observation (a vector, the same layout for every agent): its place (one-hot), the clock, the others' places
(one-hot each, in agent order after it), whether it knows the party's place and which, its goals' status,
its private object, whether it wants the book and whether the book is free, and whether someone talked to
it last tick. :class:`TownParallelEnv` is a PettingZoo ``ParallelEnv`` (``parallel_env``); ``teamrl marl
train --env teamrl.world.town:parallel_env`` trains on it like on any user env.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

PLACES = ("home", "cafe", "park", "library", "market")
OBJECTS = {"coffee": "cafe", "bread": "market", "book": "library"}
PRIVATE = ("coffee", "bread")  # the objects of private goals (the book is the contested one)
TOPICS = ("weather", "party", "food", "books")
OBJECTIVES = ("goal", "social", "coherence")
DEFAULT_WEIGHTS = {"goal": 1.0, "social": 0.1, "coherence": 0.05}
PARTY_PLACE = "park"


@dataclass(frozen=True)
class Action:
    """One agent's move this tick, as a structured message."""

    kind: Literal["wait", "move", "use", "talk"]
    place: str | None = None
    obj: str | None = None
    to: str | None = None
    topic: str | None = None


@dataclass
class AgentState:
    place: str
    private: str  # coffee or bread
    wants_book: bool
    knows_party: bool
    done: dict[str, bool] = field(default_factory=lambda: {"shared": False, "private": False, "book": False})
    heard: bool = False  # someone talked to it last tick


def action_table(agents: list[str]) -> list[Action]:
    """Every action a discrete policy can take (the same table for every agent: ``talk`` by the others'
    positions relative to the speaker, see :func:`decode`)."""
    table = [Action("wait")]
    table += [Action("move", place=p) for p in PLACES]
    table += [Action("use", obj=o) for o in OBJECTS]
    table += [Action("talk", to=str(k), topic=t) for k in range(len(agents) - 1) for t in TOPICS]
    return table


def decode(index: int, agent: str, agents: list[str], table: list[Action]) -> Action:
    """The action of ``index`` for ``agent`` (``talk`` to the k-th other agent, in agent order after it)."""
    action = table[int(index)]
    if action.kind != "talk":
        return action
    others = _others(agent, agents)
    return Action("talk", to=others[int(action.to or 0)], topic=action.topic)


def encode(action: Action, agent: str, agents: list[str], table: list[Action]) -> int:
    """The index of ``agent``'s ``action`` in ``table``: the inverse of :func:`decode`."""
    if action.kind == "talk":
        action = Action("talk", to=str(_others(agent, agents).index(str(action.to))), topic=action.topic)
    return table.index(action)


def _others(agent: str, agents: list[str]) -> list[str]:
    i = agents.index(agent)
    return agents[i + 1 :] + agents[:i]


class Town:
    """The world's state and rules (see the module)."""

    def __init__(self, n_agents: int = 6, horizon: int = 24, seed: int | None = None) -> None:
        if n_agents < 2:
            raise ValueError(f"n_agents={n_agents}: a town needs at least 2 agents")
        if horizon < 2:
            raise ValueError(f"horizon={horizon}: at least 2 ticks")
        self.agents = [f"agent_{i}" for i in range(n_agents)]
        self.horizon = horizon
        self.reset(seed)

    def reset(self, seed: int | None = None) -> None:
        rng = np.random.default_rng(seed)
        n = len(self.agents)
        book_wanters = {int(i) for i in rng.choice(n, size=min(2, n), replace=False)}
        self.state = {
            a: AgentState(
                place=PLACES[int(rng.integers(len(PLACES)))],
                private=PRIVATE[int(rng.integers(len(PRIVATE)))],
                wants_book=i in book_wanters,
                knows_party=i == 0,
            )
            for i, a in enumerate(self.agents)
        }
        self.t = 0
        self.book_holder: str | None = None
        self.talks: list[tuple[int, str, str, str]] = []  # (tick, from, to, topic) that succeeded
        self.invalid = Counter[str]()
        self.positions: list[dict[str, str]] = [{a: s.place for a, s in self.state.items()}]
        self.log: list[tuple[int, str, str, Action, bool]] = []  # (tick, agent, place, action, valid)

    @property
    def gathering_size(self) -> int:
        return math.ceil(len(self.agents) / 2)

    def step(self, actions: dict[str, Action]) -> dict[str, dict[str, float]]:
        """Apply every agent's action at once; the objectives each agent earned this tick."""
        earned = {a: dict.fromkeys(OBJECTIVES, 0.0) for a in self.agents}
        for a in self.agents:
            earned[a]["coherence"] = float(actions.get(a, Action("wait")) in planned(self, a))
        before = {a: dict(s.done) for a, s in self.state.items()}
        invalid_before = dict(self.invalid)
        heard: set[str] = set()
        where = {a: s.place for a, s in self.state.items()}  # talk happens where agents stood this tick
        for a in self.agents:
            act = actions.get(a, Action("wait"))
            me = self.state[a]
            if act.kind == "talk":
                if act.to in self.state and act.to != a and where[act.to] == where[a] and act.topic in TOPICS:
                    new_partner = all(not (f == a and to == act.to) for _, f, to, _ in self.talks)
                    self.talks.append((self.t, a, act.to, str(act.topic)))
                    earned[a]["social"] = float(new_partner)  # meeting someone, not repeating oneself
                    heard.add(act.to)
                    if act.topic == "party" and me.knows_party:
                        self.state[act.to].knows_party = True
                else:
                    self.invalid[a] += 1
            elif act.kind == "use":
                if act.obj not in OBJECTS or OBJECTS[act.obj] != me.place:
                    self.invalid[a] += 1
                elif act.obj == "book":
                    if self.book_holder is None and me.wants_book:
                        self.book_holder = a
                        me.done["book"] = True
                    elif self.book_holder != a:
                        self.invalid[a] += 1  # taken, or not wanted
                elif act.obj == me.private:
                    me.done["private"] = True
        for a in self.agents:
            act = actions.get(a, Action("wait"))
            if act.kind == "move":
                if act.place in PLACES:
                    self.state[a].place = str(act.place)
                else:
                    self.invalid[a] += 1
            self.state[a].heard = a in heard
        self.t += 1
        at_party = [a for a, s in self.state.items() if s.place == PARTY_PLACE]
        if self.t > self.horizon // 2 and len(at_party) >= self.gathering_size:
            for a in at_party:
                if self.state[a].knows_party:  # came for the party, not by chance
                    self.state[a].done["shared"] = True
        for a in self.agents:
            earned[a]["goal"] = float(sum(self.state[a].done[g] and not before[a][g] for g in before[a]))
        for a in self.agents:
            act = actions.get(a, Action("wait"))
            self.log.append((self.t - 1, a, where[a], act, self.invalid[a] == invalid_before.get(a, 0)))
        self.positions.append({a: s.place for a, s in self.state.items()})
        return earned

    @property
    def over(self) -> bool:
        return self.t >= self.horizon

    def transcript(self) -> str:
        """The episode so far as text, one line per agent and tick (what a judge reads)."""
        lines = []
        for t, agent, place, act, valid in self.log:
            if act.kind == "wait":
                what = "waits"
            elif act.kind == "move":
                what = f"goes to the {act.place}"
            elif act.kind == "use":
                what = f"takes the {act.obj}"
            else:
                what = f"talks to {act.to} about {act.topic}"
            lines.append(f"t={t} {agent} at the {place} {what}" + ("" if valid else " (cannot)"))
        return "\n".join(lines)

    def observe(self, agent: str) -> np.ndarray:
        s = self.state[agent]
        parts = [_one_hot(PLACES.index(s.place), len(PLACES)), [self.t / self.horizon]]
        for other in _others(agent, self.agents):
            parts.append(_one_hot(PLACES.index(self.state[other].place), len(PLACES)))
        party = _one_hot(PLACES.index(PARTY_PLACE), len(PLACES)) if s.knows_party else np.zeros(len(PLACES))
        parts += [[float(s.knows_party)], party, [float(s.done[g]) for g in ("shared", "private", "book")]]
        parts += [_one_hot(PRIVATE.index(s.private), len(PRIVATE))]
        parts += [[float(s.wants_book), float(self.book_holder is None), float(s.heard)]]
        return np.concatenate([np.asarray(p, np.float32) for p in parts])

    def talk_diversity(self, agent: str) -> float:
        """The exploration bonus over social strategies: the entropy of ``agent``'s conversations over
        (partner, topic), divided by its maximum (every pair once), in [0, 1]; 0 without conversations."""
        counts = Counter((t, topic) for _, f, t, topic in self.talks if f == agent)
        total = sum(counts.values())
        if total < 2:
            return 0.0
        entropy = -sum(c / total * math.log(c / total) for c in counts.values())
        most = math.log(min(total, (len(self.agents) - 1) * len(TOPICS)))
        return entropy / most if most > 0 else 0.0

    def stats(self) -> dict[str, float]:
        """What emerged this episode: conversations per agent, distinct partners per agent, the entropy of
        who talks to whom (diversity), the share of agents with each goal achieved, invalid actions."""
        n = len(self.agents)
        pairs = Counter((f, t) for _, f, t, _ in self.talks)
        total = sum(pairs.values())
        entropy = -sum(c / total * math.log(c / total) for c in pairs.values()) if total else 0.0
        wanters = [s for s in self.state.values() if s.wants_book]
        return {
            "conversations_per_agent": len(self.talks) / n,
            "partners_per_agent": len(pairs) / n,
            "talk_entropy": entropy,
            "shared_achieved": sum(s.done["shared"] for s in self.state.values()) / n,
            "private_achieved": sum(s.done["private"] for s in self.state.values()) / n,
            "book_achieved": sum(s.done["book"] for s in wanters) / max(len(wanters), 1),
            "know_party": sum(s.knows_party for s in self.state.values()) / n,
            "invalid_per_agent": sum(self.invalid.values()) / n,
        }


_LINE = re.compile(r"^t=(\d+) (\S+) at the (\S+) (.+?)( \(cannot\))?$")  # what Town.transcript() writes
_TALK = re.compile(r"^talks to (\S+) about (\S+)$")


@dataclass(frozen=True)
class TranscriptLine:
    """One line of :meth:`Town.transcript`, read back."""

    tick: int
    agent: str
    place: str
    what: str  # "waits", "goes to the park", "takes the coffee", "talks to agent_2 about party"
    valid: bool  # False: the action could not happen ("(cannot)")

    @property
    def talk(self) -> tuple[str, str] | None:
        """(listener, topic) of a conversation line, else None."""
        m = _TALK.match(self.what)
        return (m[1], m[2]) if m else None


def read_line(line: str) -> TranscriptLine | None:
    """A transcript line read back, or None for text that is not one."""
    m = _LINE.match(line)
    return None if m is None else TranscriptLine(int(m[1]), m[2], m[3], m[4], m[5] is None)


def planned(town: Town, agent: str) -> set[Action]:
    """The actions that advance ``agent``'s plan: its first unachieved goal in the order private, book,
    shared (the gathering once it knows the place; before that, asking around: talking about the party).
    Used by the coherence objective and by :func:`scripted_action`."""
    s = town.state[agent]
    goals: list[tuple[str, str]] = []
    if not s.done["private"]:
        goals.append((OBJECTS[s.private], s.private))
    if s.wants_book and not s.done["book"] and town.book_holder is None:
        goals.append(("library", "book"))
    for place, obj in goals:
        if s.place != place:
            return {Action("move", place=place)}
        return {Action("use", obj=obj)}
    if s.done["shared"]:
        return {Action("wait")}
    here = [o for o in town.agents if o != agent and town.state[o].place == s.place]
    if not s.knows_party:
        return {Action("talk", to=o, topic="party") for o in here} or {Action("move", place=PARTY_PLACE)}
    if s.place != PARTY_PLACE:
        tell = {Action("talk", to=o, topic="party") for o in here if not town.state[o].knows_party}
        return tell or {Action("move", place=PARTY_PLACE)}
    return {Action("wait")} | {Action("talk", to=o, topic="party") for o in here}


def scripted_action(town: Town, agent: str, rng: np.random.Generator) -> Action:
    """A scripted agent: one of its planned actions (the SFT teacher of the LLM side)."""
    options = sorted(planned(town, agent), key=repr)
    return options[int(rng.integers(len(options)))]


def _one_hot(i: int, n: int) -> np.ndarray:
    out = np.zeros(n, np.float32)
    out[i] = 1.0
    return out


class TownParallelEnv(ParallelEnv):
    """The town as a PettingZoo ``ParallelEnv``: discrete actions (:func:`action_table`), the weighted
    objectives as reward, ``info[agent]["objectives"]`` the unweighted ones, truncation at the horizon."""

    metadata = {"name": "town_v0", "render_modes": []}

    def __init__(
        self,
        n_agents: int = 6,
        horizon: int = 24,
        goal_weight: float = DEFAULT_WEIGHTS["goal"],
        social_weight: float = DEFAULT_WEIGHTS["social"],
        coherence_weight: float = DEFAULT_WEIGHTS["coherence"],
        plausibility_weight: float = 0.0,
        diversity_weight: float = 0.0,
    ) -> None:
        self.town = Town(n_agents, horizon, seed=0)
        self.weights = {"goal": goal_weight, "social": social_weight, "coherence": coherence_weight}
        self.plausibility_weight = plausibility_weight
        self.diversity_weight = diversity_weight
        from teamrl.world.judge import RuleJudge

        self.judge = RuleJudge()  # fixed: never trained with the agents it judges
        self.possible_agents = list(self.town.agents)
        self.agents: list[str] = []
        self.max_cycles = horizon  # the episode length teamrl.marl reads
        self.table = action_table(self.possible_agents)
        dim = len(self.town.observe(self.possible_agents[0]))
        self._obs_space = spaces.Box(0.0, 1.0, (dim,), np.float32)
        self._act_space = spaces.Discrete(len(self.table))
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.town.reset(int(self._rng.integers(2**31)))
        self.agents = list(self.possible_agents)
        return {a: self.town.observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        decoded = {a: decode(int(actions[a]), a, self.possible_agents, self.table) for a in self.agents}
        earned = self.town.step(decoded)
        agents = list(self.agents)
        rewards = {a: float(sum(self.weights[k] * earned[a][k] for k in OBJECTIVES)) for a in agents}
        done = self.town.over
        infos: dict[str, dict[str, Any]] = {a: {"objectives": earned[a]} for a in agents}
        if done:
            stats = self.town.stats()
            stats["plausibility"] = self.judge(self.town.transcript())  # the judged objective, per episode
            from teamrl.world.timeline import timeline_rows  # (it imports this module)

            # the day itself, for `teamrl report` (a record of kind "town_day", drawn as a timeline)
            infos[agents[0]]["record"] = {"kind": "town_day", "data": timeline_rows(self.town)}
            for a in agents:
                infos[a]["episode"] = stats
                rewards[a] += self.plausibility_weight * stats["plausibility"]
                rewards[a] += self.diversity_weight * self.town.talk_diversity(a)
            self.agents = []
        obs = {a: self.town.observe(a) for a in agents}
        return obs, rewards, dict.fromkeys(agents, False), dict.fromkeys(agents, done), infos

    def render(self) -> None:
        return None

    def close(self) -> None:
        return None


def parallel_env(**kwargs: Any) -> TownParallelEnv:
    """``teamrl marl train --env teamrl.world.town:parallel_env`` (``--set env.social_weight=0.5``)."""
    return TownParallelEnv(**kwargs)


def aec_env(**kwargs: Any) -> Any:
    """The town as a PettingZoo AEC env (agents act in turn; the tick advances when all have acted)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(TownParallelEnv(**kwargs))
