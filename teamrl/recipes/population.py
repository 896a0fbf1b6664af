"""Recipe ``population``: the learners play against a pool of their own historical snapshots.

The schedule (``teamrl.recipes.schedule.population_blocks``) gives ``recipe.iterations`` RL iterations
in blocks of ``snapshot_every`` (M), the learners (``recipe.population.learners``, default the first
trained role) taking the blocks in turn. A learner's pool holds its adapter as it was after SFT and at the
end of each of its blocks, at most ``pool_size`` (K) snapshots, the oldest leaving first. Snapshots live
on disk (``RUN_DIR/population/ROLE/iterN``, peft format); a seat that plays one loads it into an adapter
slot of its own (``pool-SEAT``) when it draws a snapshot the slot does not hold, so memory holds one
adapter per pool seat, not K.

Every iteration, before the rollout, each pool seat draws a snapshot (:func:`snapshot_probabilities`):

- the seats of ``recipe.population.opponents`` (seat -> learner; in a debate, by default, every other
  debater plays from the first learning debater's pool: debaters are interchangeable) from that learner's
  pool;
- every learner not training in this block (an asymmetric game: generator and judge, proposer and solver)
  from its own pool.

``sampling: latest`` draws nothing: those seats play the current policies (plain self-play, the ablation
baseline). Outside the iterations (evaluations) the opponent seats play the learner's current adapter.

After the rollout every episode scores the training learner against each pool seat (1 a win, 0.5 a draw,
0 a loss; :func:`pairing_score`: in a debate from the two final answers' correctness, otherwise from the
two roles' rewards). Each learner keeps a win / draw / loss table against every snapshot and Elo ratings
(:func:`elo_update`, one match per pairing and iteration scored by its mean result). At each snapshot the
pool's diversity is probed (:func:`diversity_figures`): every snapshot plays the learner's seats
greedily on the same ``probe_tasks`` train tasks, and the share of distinct final answers and texts across
snapshots is logged. Figures go to ``metrics.jsonl`` as ``population/...``, the whole table to
``RUN_DIR/population/table.json`` (rewritten atomically every iteration) and to the console at the end;
a resumed run restores pools and tables from its checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from teamrl.atomic import atomic_write_text
from teamrl.engine.team import Seat
from teamrl.protocol import Episode, Turn
from teamrl.recipes.schedule import Phase, phases_for
from teamrl.tasks.reasoning import normalize_answer

if TYPE_CHECKING:
    from teamrl.recipes.schedule import RecipeHost as Trainer

log = logging.getLogger("teamrl")

POOL_DIR = "population"  # under the run directory: ROLE/iterN snapshots and table.json
TABLE = "table.json"
STATE = "state.json"  # in the checkpoint's recipe directory
INITIAL_ELO = 1000.0
PROBE_SLOT = "pool-probe"  # the adapter slot the diversity probe loads each snapshot into
_SNAPSHOT_DIR = re.compile(r"iter\d+")


@dataclasses.dataclass
class Snapshot:
    """A learner's adapter as it was after ``iteration`` RL iterations, saved at ``path`` (relative to the
    run directory); ``fingerprint`` is :meth:`HFPolicy.fingerprint` of the adapter when it was saved."""

    name: str
    role: str
    iteration: int
    fingerprint: str
    path: str


@dataclasses.dataclass
class Record:
    """A learner's results against one opponent."""

    wins: int = 0
    draws: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        return self.wins + 0.5 * self.draws

    def add(self, scores: Sequence[float]) -> None:
        for s in scores:
            if s == 1.0:
                self.wins += 1
            elif s == 0.0:
                self.losses += 1
            else:
                self.draws += 1


# -- the pure parts: results, ratings, sampling, diversity -----------------------------------------
def reward_pairing_score(episode: Episode, role: str, opponent: str) -> float | None:
    """The generic result of ``role`` against ``opponent``: 1 when its reward is higher, 0 when lower, 0.5
    when equal; None when either has no reward in the episode."""
    if role not in episode.rewards or opponent not in episode.rewards:
        return None
    mine, theirs = episode.rewards[role], episode.rewards[opponent]
    return 0.5 if abs(mine - theirs) < 1e-9 else float(mine > theirs)


def pairing_score(workflow: Any, episode: Episode, role: str, opponent: str) -> float | None:
    """The workflow's own result of a pairing where it defines one (``Workflow.pairing_score``: two
    debaters), else the reward comparison."""
    score = workflow.pairing_score(episode, role, opponent)
    return score if score is not None else reward_pairing_score(episode, role, opponent)


def expected_score(rating: float, opponent: float) -> float:
    """Elo's expected score of a player rated ``rating`` against one rated ``opponent``."""
    return 1.0 / (1.0 + 10.0 ** ((opponent - rating) / 400.0))


def elo_update(rating: float, opponent: float, score: float, k: float) -> tuple[float, float]:
    """Both ratings after one match in which the first player scored ``score`` (0..1)."""
    delta = k * (score - expected_score(rating, opponent))
    return rating + delta, opponent - delta


def smoothed_win_rate(record: Record | None) -> float:
    """The learner's win rate against an opponent (draws count half) with one drawn game of prior, so an
    opponent never met counts 0.5 and no rate is exactly 0 or 1."""
    if record is None:
        return 0.5
    return (record.score + 0.5) / (record.games + 1)


def snapshot_probabilities(
    names: Sequence[str], results: Mapping[str, Record], sampling: str, power: float
) -> list[float]:
    """The chance of drawing each of ``names``: uniform, or prioritized (PFSP) in proportion to
    (1 - the learner's smoothed win rate against it) ** ``power``."""
    if not names:
        raise ValueError("an empty pool has no snapshot to draw")
    if sampling == "uniform":
        return [1.0 / len(names)] * len(names)
    if sampling != "prioritized":
        raise ValueError(f"sampling={sampling!r}: use 'uniform' or 'prioritized' ('latest' draws nothing)")
    weights = [(1.0 - smoothed_win_rate(results.get(name))) ** power for name in names]
    total = sum(weights)
    return [w / total for w in weights]


def _normalized_text(text: str) -> str:
    return " ".join(text.casefold().split())


def diversity_figures(
    answers: Sequence[Sequence[str | None]], texts: Sequence[Sequence[str]]
) -> dict[str, float]:
    """How much the pool's snapshots differ on the probe tasks; ``answers[s][t]`` and ``texts[s][t]`` are
    snapshot s's final answer (None: none) and reply on probe task t.

    ``distinct_answers``: distinct final answers per task over the number of snapshots, averaged over the
    tasks (1 / snapshots when every snapshot answers alike, 1 when all differ); ``answers_per_task``: the
    same count, not divided; ``distinct_texts``: as ``distinct_answers`` for whole replies (case and
    spacing ignored); ``distinct_2``: distinct word bigrams over all bigrams of all replies."""
    n, tasks = len(answers), len(answers[0]) if answers else 0
    if n == 0 or tasks == 0:
        raise ValueError("diversity needs at least one snapshot and one probe task")
    answer_counts = [
        len({normalize_answer(a) if a is not None else "(none)" for a in (row[t] for row in answers)})
        for t in range(tasks)
    ]
    text_counts = [len({_normalized_text(row[t]) for row in texts}) for t in range(tasks)]
    bigrams = [
        (words[i], words[i + 1])
        for row in texts
        for text in row
        for words in [_normalized_text(text).split()]
        for i in range(len(words) - 1)
    ]
    return {
        "snapshots": float(n),
        "distinct_answers": sum(answer_counts) / (tasks * n),
        "answers_per_task": sum(answer_counts) / tasks,
        "distinct_texts": sum(text_counts) / (tasks * n),
        "distinct_2": len(set(bigrams)) / len(bigrams) if bigrams else 0.0,
    }


# -- the recipe's hooks in the trainer ---------------------------------------------------------------
class Population:
    """The trainer's hooks for recipe population (see the module): the seats of each iteration, the
    results after it, the snapshots at the end of each block, and the state a checkpoint keeps."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        cfg = trainer.cfg
        self.p = cfg.recipe.population
        self.learners = cfg.population_learners()
        self.opponents = cfg.population_opponents()
        self.dir = trainer.run_dir / POOL_DIR
        self.blocks = len(phases_for(cfg))
        self.own_seats = dict(trainer.team.seats)
        self.pools: dict[str, list[Snapshot]] = {role: [] for role in self.learners}
        self.results: dict[str, dict[str, Record]] = {role: {} for role in self.learners}
        self.elo: dict[str, float] = dict.fromkeys(self.learners, INITIAL_ELO)
        self.diversity: dict[str, dict[str, float]] = {}
        self.drawn: dict[str, str] = {}  # pool seat -> the snapshot (or current learner) it plays now
        self._loaded: dict[str, str] = {}  # adapter slot -> the snapshot it holds
        self._evicted: list[Path] = []  # snapshots evicted since the last checkpoint
        # those evicted before each kept checkpoint (oldest first): an older checkpoint still names them
        self._named: list[list[Path]] = []
        # Outside the iterations the opponent seats play their learner's current adapter.
        for seat, source in self.opponents.items():
            trainer.team.seats[seat] = self._seat(seat, source, adapter=source)

    def _seat(self, seat: str, source: str, adapter: str) -> Seat:
        """``seat`` played by learner ``source``'s policy with ``adapter``; the seat's own length limit."""
        policy = self.trainer.cfg.seat(source).policy
        return dataclasses.replace(self.own_seats[seat], policy=policy, adapter=adapter, trainable=False)

    def pool_seats(self, active: str) -> dict[str, str]:
        """Seat -> the learner whose pool plays it while ``active`` trains."""
        seats = {role: role for role in self.learners if role != active}
        return {**seats, **self.opponents}

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(self, role: str) -> Snapshot:
        """Save ``role``'s adapter into its pool; evict the oldest beyond ``pool_size``."""
        step = self.trainer.state.step
        rel = Path(POOL_DIR) / role / f"iter{step}"
        policy = self.trainer.policy_of(role)
        policy.save_adapter(role, self.trainer.run_dir / rel)
        snap = Snapshot(f"{role}@iter{step}", role, step, policy.fingerprint(role), str(rel))
        pool = self.pools[role]
        pool.append(snap)
        self.elo[snap.name] = self.elo[role]  # a new snapshot starts at the learner's rating
        while len(pool) > self.p.pool_size:
            self._evicted.append(self.trainer.run_dir / pool.pop(0).path)
        return snap

    def load(self, slot: str, snap: Snapshot) -> str:
        """Load ``snap`` into adapter ``slot`` of its learner's policy (unless it holds it already)."""
        policy = self.trainer.policy_of(snap.role)
        if slot not in policy.adapter_names:
            policy.copy_adapter(snap.role, slot)  # a frozen adapter of the right shape
        if self._loaded.get(slot) != snap.name:
            policy.load_adapter(slot, self.trainer.run_dir / snap.path)
            if policy.fingerprint(slot) != snap.fingerprint:
                raise RuntimeError(
                    f"pool snapshot {snap.name} in {snap.path} is not the adapter saved there; the run "
                    "directory was changed: restore it or start a new run"
                )
            self._loaded[slot] = snap.name
        return slot

    def draw(self, active: str, source: str, rng: random.Random) -> Snapshot:
        pool = self.pools[source]
        probs = snapshot_probabilities(
            [s.name for s in pool], self.results[active], self.p.sampling, self.p.priority_power
        )
        return rng.choices(pool, weights=probs)[0]

    # -- the trainer's hooks -----------------------------------------------------------------------
    def seats(self, phase: Phase) -> dict[str, Seat]:
        """The pool seats of this iteration (the trainer seats them for its rollout): each draws a snapshot
        and plays it from its adapter slot."""
        for role in self.learners:
            if not self.pools[role]:  # the first iteration: the pool starts with the SFT'd adapter
                self.snapshot(role)
        [active] = phase.roles
        if self.p.sampling == "latest":
            self.drawn = self.pool_seats(active)
            return {}
        rng = random.Random(f"teamrl-population-{self.trainer.cfg.run.seed}-{self.trainer.state.step}")
        seats, self.drawn = {}, {}
        for seat, source in self.pool_seats(active).items():
            snap = self.draw(active, source, rng)
            seats[seat] = self._seat(seat, source, self.load(f"pool-{seat}", snap))
            self.drawn[seat] = snap.name
        return seats

    def after_iteration(self, phase: Phase, episodes: list[Episode]) -> dict[str, Any]:
        """Score the iteration's pairings, update the tables and ratings; at the end of a block, take the
        learner's snapshot and probe the pool's diversity. Returns the metrics to log."""
        [active] = phase.roles
        workflow = self.trainer.workflow
        scores: dict[str, list[float]] = {}
        for ep in episodes:
            for seat, name in self.drawn.items():
                score = pairing_score(workflow, ep, active, seat)
                if score is not None:
                    scores.setdefault(name, []).append(score)
        every = [s for values in scores.values() for s in values]
        metrics: dict[str, Any] = {
            "population/opponents": " ".join(f"{seat}={name}" for seat, name in self.drawn.items())
        }
        for name, values in scores.items():
            self.results[active].setdefault(name, Record()).add(values)
            if name not in self.learners:  # the current policies (sampling latest) have no rating
                mean = sum(values) / len(values)
                self.elo[active], self.elo[name] = elo_update(
                    self.elo[active], self.elo[name], mean, self.p.elo_k
                )
        if every:
            metrics[f"population/{active}/score"] = sum(every) / len(every)
            for key, value in (("wins", 1.0), ("draws", 0.5), ("losses", 0.0)):
                metrics[f"population/{active}/{key}"] = sum(s == value for s in every) / len(every)
        metrics[f"population/{active}/elo"] = self.elo[active]
        if self.trainer.state.phase_iteration == phase.iterations:  # the block ends: a snapshot joins
            self.snapshot(active)
            self.diversity[active] = self.measure_diversity(active)
            metrics.update(
                {f"population/diversity/{active}/{k}": v for k, v in self.diversity[active].items()}
            )
        for role in self.learners:
            metrics[f"population/{role}/pool_size"] = float(len(self.pools[role]))
        atomic_write_text(self.dir / TABLE, json.dumps(self.table(), indent=2))
        if (
            self.trainer.state.phase == self.blocks - 1
            and self.trainer.state.phase_iteration == phase.iterations
        ):
            self.print_table()
        return metrics

    def measure_diversity(self, role: str) -> dict[str, float]:
        """Every snapshot of ``role``'s pool plays ``role``'s seat and the seats that mirror it, greedily,
        on the same probe tasks; the diversity of ``role``'s last replies across the snapshots."""
        pool = self.pools[role]
        if len(pool) < 2:
            return {}
        trainer = self.trainer
        tasks = trainer.suite.fixed_set("train", self.p.probe_tasks)
        group = [role, *(seat for seat, source in self.opponents.items() if source == role)]
        answers: list[list[str | None]] = []
        texts: list[list[str]] = []
        for snap in pool:
            slot = self.load(PROBE_SLOT, snap)
            seats = {
                seat: dataclasses.replace(self._seat(seat, role, slot), temperature=0.0) for seat in group
            }
            with trainer.team.seated(seats):
                episodes = trainer.rollout(tasks, 1)
            # the role's last reply in each episode (None where it did not speak)
            last: list[Turn | None] = [([None, *ep.turns_of(role)])[-1] for ep in episodes]
            answers.append([trainer.workflow.answer_of(t) if t is not None else None for t in last])
            texts.append([t.text if t is not None else "" for t in last])
        return diversity_figures(answers, texts)

    # -- tables and checkpoints --------------------------------------------------------------------
    def table(self) -> dict[str, Any]:
        """Pools, results, ratings and the latest diversity figures (``table.json`` and the checkpoint)."""
        return {
            "step": self.trainer.state.step,
            "sampling": self.p.sampling,
            "pools": {role: [dataclasses.asdict(s) for s in pool] for role, pool in self.pools.items()},
            "results": {
                role: {
                    name: {**dataclasses.asdict(r), "games": r.games, "win_rate": r.score / max(r.games, 1)}
                    for name, r in results.items()
                }
                for role, results in self.results.items()
            },
            "elo": self.elo,
            "diversity": self.diversity,
        }

    def print_table(self) -> None:
        lines = [f"population table (sampling {self.p.sampling}; win rate counts draws half):"]
        for role in self.learners:
            lines.append(f"  {role}: Elo {self.elo[role]:.0f}, pool {[s.name for s in self.pools[role]]}")
            lines.append(
                f"    {'opponent':<22} {'games':>6} {'W':>5} {'D':>5} {'L':>5} {'win rate':>9} {'Elo':>6}"
            )
            for name, r in self.results[role].items():
                elo = f"{self.elo[name]:.0f}" if name in self.elo and name not in self.learners else "-"
                lines.append(
                    f"    {name:<22} {r.games:>6} {r.wins:>5} {r.draws:>5} {r.losses:>5} "
                    f"{r.score / max(r.games, 1):>9.3f} {elo:>6}"
                )
            if role in self.diversity and self.diversity[role]:
                d = self.diversity[role]
                lines.append(
                    f"    diversity over {d['snapshots']:.0f} snapshots: distinct answers "
                    f"{d['distinct_answers']:.3f}, distinct texts {d['distinct_texts']:.3f}, "
                    f"distinct-2 {d['distinct_2']:.3f}"
                )
        for line in lines:
            if self.trainer.progress:
                tqdm.write(line)
            else:
                log.info(line)

    def save(self, directory: Path) -> None:
        """Write the state into a checkpoint being written."""
        self._named.append(self._evicted)
        self._evicted = []
        directory.mkdir(parents=True, exist_ok=True)
        (directory / STATE).write_text(json.dumps(self.table()))

    def saved(self) -> None:
        """Delete the evicted snapshots that no kept checkpoint names (a resume may fall back to the
        oldest of the ``run.keep_checkpoints``), keep the others."""
        while len(self._named) >= self.trainer.cfg.run.keep_checkpoints:
            for path in self._named.pop(0):
                shutil.rmtree(path, ignore_errors=True)

    def restore(self, directory: Path) -> None:
        """Restore pools, results and ratings from a checkpoint; delete snapshot directories it does not
        name (written or evicted after it)."""
        if (directory / STATE).exists():
            state = json.loads((directory / STATE).read_text())
            self.pools = {
                role: [Snapshot(**s) for s in state["pools"].get(role, [])] for role in self.learners
            }
            self.results = {
                role: {
                    name: Record(r["wins"], r["draws"], r["losses"])
                    for name, r in state["results"].get(role, {}).items()
                }
                for role in self.learners
            }
            self.elo = {**self.elo, **state["elo"]}
            self.diversity = state["diversity"]
        kept = {str(self.trainer.run_dir / s.path) for pool in self.pools.values() for s in pool}
        for role in self.learners:
            folder = self.dir / role
            for path in folder.iterdir() if folder.is_dir() else []:
                if _SNAPSHOT_DIR.fullmatch(path.name) and str(path) not in kept:
                    shutil.rmtree(path, ignore_errors=True)
