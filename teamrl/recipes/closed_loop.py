"""Recipe ``closed_loop`` (after SAGE): find the team's weakest role, train it, measure again.

Every round (``recipe.rounds``) measures each trained role on a probe set of train tasks (the same
``recipe.closed_loop.probe_tasks`` tasks every round, ``probe_samples`` episodes each, the same sampling
seed every time), picks the weakest and runs one phase of that role alone for its
``recipe.iterations_per_role`` iterations, the others frozen; the next round's measurement shows what
the training did. ``recipe.closed_loop.select`` says what "weakest" means:

- ``contribution``: a role's contribution is the team's success on the probe set with every role's
  current policy minus its success with that role's seat taken by its baseline (an empty turn, the
  default; or its frozen SFT snapshot, the KL reference), every other role current. The weakest role is
  the one whose swap costs the team least; ties (frequent on a small probe set) go to the smaller
  pass-fraction difference, then to the lower process score, then to the earlier role in
  ``recipe.roles``. A role whose swap changed no probe episode's outcome (``changed`` 0) cannot move the
  team's outcome from its seat (in the pipeline, the tester: its tests do not change the final code) and
  is not picked while another role can be: its contribution is 0 by construction, not by weakness.
  With the ``reference`` baseline a role not yet trained plays exactly its baseline under seeded
  sampling, so its contribution is 0 and its influence unknown: it stays a candidate until it has been
  trained once (the contribution then reads as what its training did for the team).
- ``process``: the role with the lowest mean process score on the probe episodes.

A role picked ``max_repeats`` rounds in a row (default 2) sits the next round out: the weakest of the
others is trained instead, since on a small probe set a role whose training does not move the figures
would otherwise be picked every round.

Each decision is logged with its figures: one record per round in ``RUN_DIR/closed_loop.jsonl``,
``closed_loop/...`` metrics in ``metrics.jsonl`` and a line on the console. A resumed run reads its
decisions back from that log instead of measuring again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from teamrl.atomic import JsonlLog
from teamrl.engine.team import Seat
from teamrl.policies.base import ref_adapter
from teamrl.protocol import Episode
from teamrl.recipes.schedule import Phase, iterations_for

if TYPE_CHECKING:
    from teamrl.recipes.schedule import RecipeHost as Trainer

log = logging.getLogger("teamrl")

DECISION_LOG = "closed_loop.jsonl"


@dataclasses.dataclass
class Measurement:
    """The probe set's figures: the current team's, and with each role swapped for its baseline."""

    success: float  # share of probe episodes the current team solved
    outcome: float  # their mean outcome (hidden-test pass fraction)
    process: dict[str, float]  # each role's mean process score in those episodes
    baseline_success: dict[str, float] = dataclasses.field(default_factory=dict)  # select contribution
    baseline_outcome: dict[str, float] = dataclasses.field(default_factory=dict)
    # probe episodes whose outcome the swap changed, per role (a role missing here counts as influential)
    changed: dict[str, int] = dataclasses.field(default_factory=dict)
    generated_tokens: int = 0

    def influential(self, roles: Sequence[str]) -> list[str]:
        """The roles whose swap changed some probe episode's outcome; all of ``roles`` if none did."""
        moved = [r for r in roles if self.changed.get(r, 1) > 0]
        return moved or list(roles)

    def contribution(self, role: str) -> float:
        """Team success with the role's current policy minus with its baseline in its seat."""
        return self.success - self.baseline_success[role]

    def contribution_outcome(self, role: str) -> float:
        return self.outcome - self.baseline_outcome[role]


def pick_weakest(measurement: Measurement, roles: Sequence[str], select: str) -> str:
    """The weakest of ``roles`` (see the module); ties go to the earlier role."""
    if select == "process":
        return min(roles, key=lambda r: measurement.process.get(r, 0.0))
    if select == "contribution":
        return min(
            measurement.influential(roles),
            key=lambda r: (
                measurement.contribution(r),
                measurement.contribution_outcome(r),
                measurement.process.get(r, 0.0),
            ),
        )
    raise ValueError(f"select={select!r}: use 'contribution' or 'process'")


def _changed(episodes: list[Episode], swapped: list[Episode]) -> int:
    """How many episodes of the same probe (same tasks, samples and seeds) ended differently."""

    def key(e: Episode) -> tuple[str, int]:
        return (e.task_id, e.group)

    before = {key(e): (bool(e.verifier.get("solved")), e.outcome) for e in episodes}
    after = {key(e): (bool(e.verifier.get("solved")), e.outcome) for e in swapped}
    return sum(before[k] != after.get(k) for k in before)


def _success(episodes: list[Episode]) -> tuple[float, float]:
    n = max(len(episodes), 1)
    return (
        sum(bool(e.verifier.get("solved")) for e in episodes) / n,
        sum(e.outcome for e in episodes) / n,
    )


def _empty_turn(_call: object) -> str:
    return ""  # parses as a format error, like the counterfactual replay's empty baseline


def measure_roles(trainer: Trainer, roles: Sequence[str]) -> Measurement:
    """Play the probe set with the current team and, for ``select: contribution``, once more per role with
    that role's seat taken by its baseline. Changes no parameter."""
    cl = trainer.cfg.recipe.closed_loop
    tasks = trainer.suite.fixed_set("train", cl.probe_tasks)
    tokens0 = trainer.engine.stats.generated_tokens

    def probe() -> list[Episode]:
        torch.manual_seed(trainer.cfg.run.seed + 271828)  # the same sampling noise for every probe
        return trainer.rollout(tasks, cl.probe_samples, seed_key="probe")

    for policy in trainer.policies.values():
        model = getattr(policy, "model", None)
        if model is not None:  # an inference-only endpoint has no local model
            model.eval()
    episodes = probe()
    success, outcome = _success(episodes)
    process = {}
    for role in roles:
        spoke = [e for e in episodes if role in e.process]
        process[role] = sum(e.process[role] for e in spoke) / len(spoke) if spoke else 0.0
    m = Measurement(success, outcome, process)
    if cl.select == "contribution":
        for role in roles:
            own = trainer.team.seats[role]
            if cl.baseline == "reference":
                seat = dataclasses.replace(own, adapter=ref_adapter(role))
            else:
                seat = Seat(script=_empty_turn, max_new_tokens=own.max_new_tokens)
            with trainer.team.seated({role: seat}):
                swapped = probe()
            m.baseline_success[role], m.baseline_outcome[role] = _success(swapped)
            m.changed[role] = _changed(episodes, swapped)
    m.generated_tokens = trainer.engine.stats.generated_tokens - tokens0
    return m


def _metrics_row(decision: dict[str, Any], step: int) -> dict[str, Any]:
    """A decision's row of metrics.jsonl."""
    row: dict[str, Any] = {
        "step": step,
        "closed_loop/round": float(decision["round"]),
        "closed_loop/success": decision["success"],
        "closed_loop/outcome": decision["outcome"],
        "closed_loop/probe_tokens": float(decision["probe_tokens"]),
        "closed_loop/picked": decision["picked"],
    }
    for role, figs in decision["roles"].items():
        row.update({f"closed_loop/{name}/{role}": value for name, value in figs.items()})
    return row


class ClosedLoop:
    """The phases of recipe closed_loop, decided as the trainer reaches them.

    It stands where the fixed recipes' list of phases stands in ``Trainer.fit``: ``len()`` is the number
    of rounds, and ``loop[k]`` is round k+1's phase: on first access it measures the roles, picks the
    weakest and logs the decision (or reads it back from the decision log of a resumed run).
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.roles = trainer.cfg.trained_roles()
        self.decision_log = JsonlLog(trainer.run_dir / DECISION_LOG)
        # decisions of a resumed run; any after the phase in progress belong to nothing trained yet
        logged = self.decision_log.lines()
        self.decisions: list[dict[str, Any]] = [d for d in logged if d is not None][: trainer.state.phase + 1]
        if logged != self.decisions:  # later decisions, or a line cut by a crash, go
            self.decision_log.rewrite(self.decisions)
        # the decision of the phase in progress, made after the checkpoint (none of its iterations
        # is): its metrics row went with the rows past the checkpoint, so it is logged again
        st = trainer.state
        self._relog = st.phase if st.phase_iteration == 0 and st.phase < len(self.decisions) else None

    def __len__(self) -> int:
        return self.trainer.cfg.recipe.rounds

    def __getitem__(self, index: int) -> Phase:
        if not 0 <= index < len(self):
            raise IndexError(f"closed_loop has {len(self)} rounds; there is no round {index + 1}")
        if index > len(self.decisions):
            raise IndexError(f"closed_loop decides its rounds in order: round {index} is not decided yet")
        if index == len(self.decisions):
            self.decisions.append(self.decide(index))
        elif index == self._relog:
            self._relog = None
            self.trainer.log_metrics(_metrics_row(self.decisions[index], self.trainer.state.step))
        decision = self.decisions[index]
        return Phase(f"round{index + 1}/{decision['picked']}", (decision["picked"],), decision["iterations"])

    def decide(self, index: int) -> dict[str, Any]:
        """Measure, pick the weakest role, and log the decision with its figures."""
        trainer, cl = self.trainer, self.trainer.cfg.recipe.closed_loop
        m = measure_roles(trainer, self.roles)
        if cl.baseline == "reference":  # an untrained role is its baseline: no influence can show yet
            trained = {d["picked"] for d in self.decisions}
            for role in self.roles:
                if role not in trained:
                    m.changed.pop(role, None)
        candidates, rested = self.roles, None
        recent = [d["picked"] for d in self.decisions[-cl.max_repeats :]] if cl.max_repeats else []
        if len(self.roles) > 1 and len(recent) == cl.max_repeats and len(set(recent)) == 1:
            rested = recent[0]  # picked max_repeats rounds in a row: the others' turn
            candidates = [r for r in self.roles if r != rested]
        picked = pick_weakest(m, candidates, cl.select)
        figures = {
            role: {
                "process": m.process.get(role, 0.0),
                **(
                    {
                        "contribution": m.contribution(role),
                        "contribution_outcome": m.contribution_outcome(role),
                        "baseline_success": m.baseline_success[role],
                        "baseline_outcome": m.baseline_outcome[role],
                        "changed_episodes": m.changed.get(role),  # None: not judged (untrained)
                    }
                    if cl.select == "contribution"
                    else {}
                ),
            }
            for role in self.roles
        }
        record: dict[str, Any] = {
            "round": index + 1,
            "step": trainer.state.step,
            "select": cl.select,
            "baseline": cl.baseline,
            "picked": picked,
            "iterations": iterations_for(picked, trainer.cfg.recipe.iterations_per_role),
            "success": m.success,
            "outcome": m.outcome,
            "probe_episodes": cl.probe_tasks * cl.probe_samples,
            "probe_tokens": m.generated_tokens,
            "roles": figures,
        }
        if cl.select == "contribution":  # roles left out of the pick: their swap changed nothing
            record["no_influence"] = [r for r in self.roles if r not in m.influential(self.roles)]
        if rested is not None:
            record["rested"] = rested
        key = "contribution" if cl.select == "contribution" else "process"
        if self.decisions:  # what the previous round's training did to the role it trained
            before = self.decisions[-1]
            trained = before["picked"]
            record["previous"] = {
                "role": trained,
                f"{key}_before": before["roles"][trained][key],
                f"{key}_after": figures[trained][key],
                "success_before": before["success"],
                "success_after": m.success,
            }
        self.decision_log.append(record)
        trainer.log_metrics(_metrics_row(record, trainer.state.step))
        shown = ", ".join(f"{role} {figs[key]:+.3f}" for role, figs in figures.items())
        if record.get("no_influence"):
            shown += f" (no influence: {', '.join(record['no_influence'])})"
        if rested is not None:
            shown += f" ({rested} rests after {cl.max_repeats} rounds in a row)"
        line = (
            f"closed loop round {index + 1}/{len(self)}: team success {m.success:.3f}; {key}: {shown} "
            f"-> train {picked} for {record['iterations']} iteration{'s' * (record['iterations'] != 1)}"
        )
        if trainer.progress:
            tqdm.write(line)
        else:
            log.info(line)
        return record
