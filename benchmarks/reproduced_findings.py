"""Reproduced findings: small, equal-budget comparisons of what docs/ describes, over seeds.

One subcommand per finding (``all`` runs them in order). Every variant is the main job's config
(examples/pipeline_freeze_rotate.yaml) with the small shared setting below and the variant's own
``--set`` overrides, trained by ``teamrl train`` once per seed:

- ``credit``: shared reward vs hybrid alpha 0.5 and 0.7 vs counterfactual credit, every role updated
  every iteration (recipe joint): does a role free-ride (its process score falls while the team's
  outcome holds) under the shared reward?
- ``ppo_critic``: PPO with a centralised critic vs GRPO, same schedule and budget (freeze-rotate).
- ``joint``: freeze-rotate vs simultaneous joint updates, same number of iterations: spread over seeds
  and stability of the rollout curve.
- ``closed_loop``: closed loop (train the weakest role, measured; with the empty-turn baseline and with
  the SFT-snapshot one) vs round-robin freeze-rotate at an equal number of RL iterations.
- ``team_vs_single``: the team vs the Coder alone at equal RL tokens, read from
  ``benchmarks/results/learning_gain.json`` (benchmarks/learning_gain.py); trains nothing.

For each finding it prints a table (mean +- std over seeds) and writes
``<results-dir>/findings_<name>.json`` and ``findings_<name>.png``.

    .venv/bin/python benchmarks/reproduced_findings.py FINDING [--seeds 0 1 2] [--jobs 1]
        [--out-dir benchmarks/runs/findings] [--results-dir benchmarks/results] [--set key=value ...]

FINDING is credit, ppo_critic, joint, closed_loop, team_vs_single or all.

Runs go to ``<out-dir>/<variant>_s<seed>`` with their output in a ``.log`` next to them. A run whose
directory already holds a finished run of the same command is reused, not trained again: findings
that share a variant (freeze-rotate GRPO is the baseline of three of them) train it once, and an
interrupted ``all`` continues where it stopped. ``--set`` applies to every run (e.g. a smaller model
for a smoke run).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import resource
import shlex
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import learning_gain as lg  # benchmarks/learning_gain.py: the job runner, run results, mean/std

from teamrl.recipes.settings import RecipeConfig
from teamrl.report.load import read_metrics

# The small shared setting: 4 tasks x 8 teams per iteration, 12 RL iterations, 48 held-out tasks x 2
# episodes; the main job's cached base, SFT and rewards otherwise (alpha 0.6, T 0.7, grpo).
SMALL = [
    *lg.COMMON,
    "tasks.heldout_size=48",
    "algorithm.group_size=8",
    "algorithm.tasks_per_iteration=4",
]
ITERATIONS = 12
ROLES = ("planner", "coder", "reviewer", "tester")
FREEZE_ROTATE = ["recipe.name=freeze_rotate", "recipe.roles=[coder,planner,reviewer,tester]"]
FREEZE_ROTATE.append(f"recipe.iterations_per_role={ITERATIONS // len(ROLES)}")
# recipe.roles explicitly: the main job's list names the coder twice (two freeze-rotate phases)
# the main job's file sets freeze_rotate's iterations_per_role, which joint does not read (and a config
# may not set what it does not read): back to its default
_PER_ROLE_DEFAULT = RecipeConfig.model_fields["iterations_per_role"].default
JOINT = [
    "recipe.name=joint",
    "recipe.roles=[planner,coder,reviewer,tester]",
    f"recipe.iterations={ITERATIONS}",
    f"recipe.iterations_per_role={_PER_ROLE_DEFAULT}",
]
# the credit finding compares one alpha for every role: the main job's per-role alpha (the reviewer on the
# outcome alone) is cleared
CREDIT = [*JOINT, "reward.role_alpha={}"]
# closed loop: ROUNDS rounds of 3 iterations = ITERATIONS, a probe set of 8 tasks x 2 episodes per round
CLOSED_LOOP = [
    "recipe.name=closed_loop",
    "recipe.roles=[coder,planner,reviewer,tester]",
    f"recipe.rounds={len(ROLES)}",
    f"recipe.iterations_per_role={ITERATIONS // len(ROLES)}",
    "recipe.closed_loop.probe_tasks=8",
    "recipe.closed_loop.probe_samples=2",
]


@dataclass(frozen=True)
class Variant:
    name: str  # also the run directories' prefix: the same name must mean the same overrides
    label: str
    sets: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    name: str
    title: str
    variants: tuple[Variant, ...]


GRPO_FR = Variant("freeze_rotate_grpo", "freeze-rotate, GRPO", tuple(FREEZE_ROTATE))
FINDINGS = {
    f.name: f
    for f in (
        Finding(
            "credit",
            "credit strategies, every role updated every iteration (joint, GRPO)",
            (
                Variant("joint_shared", "shared R", (*CREDIT, "reward.credit=shared")),
                Variant("joint_hybrid05", "hybrid alpha 0.5", (*CREDIT, "reward.alpha=0.5")),
                Variant("joint_hybrid07", "hybrid alpha 0.7", (*CREDIT, "reward.alpha=0.7")),
                # budget: a replay for every (episode, trained role) pair of an iteration
                Variant(
                    "joint_counterfactual",
                    "counterfactual",
                    (*CREDIT, "reward.credit=counterfactual", "reward.counterfactual_budget=128"),
                ),
            ),
        ),
        Finding(
            "ppo_critic",
            "PPO with a centralised critic vs GRPO (freeze-rotate, same budget)",
            (
                GRPO_FR,
                Variant(
                    "freeze_rotate_ppo_critic",
                    "freeze-rotate, PPO + critic",
                    (*FREEZE_ROTATE, "algorithm.name=ppo_critic"),
                ),
            ),
        ),
        Finding(
            "joint",
            "freeze-rotate vs simultaneous joint updates (GRPO, alpha 0.6, same iterations)",
            (GRPO_FR, Variant("joint_grpo", "joint, GRPO", tuple(JOINT))),
        ),
        Finding(
            "closed_loop",
            "closed loop vs round-robin freeze-rotate (same RL iterations)",
            (
                GRPO_FR,
                Variant(
                    "closed_loop_empty",
                    "closed loop (contribution, empty baseline)",
                    (*CLOSED_LOOP, "recipe.closed_loop.baseline=empty"),
                ),
                Variant(
                    "closed_loop_reference",
                    "closed loop (contribution, SFT baseline)",
                    (*CLOSED_LOOP, "recipe.closed_loop.baseline=reference"),
                ),
            ),
        ),
    )
}
TEAM_VS_SINGLE = "team_vs_single"
ORDER = ["credit", "ppo_critic", "joint", "closed_loop", TEAM_VS_SINGLE]


# -- reading one run ------------------------------------------------------------------------------------
def thirds_trend(values: list[float]) -> float | None:
    """Mean of the last third minus mean of the first third (None with fewer than 3 values)."""
    if len(values) < 3:
        return None
    k = len(values) // 3
    return sum(values[-k:]) / k - sum(values[:k]) / k


def roughness(values: list[float]) -> float | None:
    """Standard deviation of the step-to-step changes: how jagged a curve is (None below 3 values)."""
    steps = [b - a for a, b in zip(values, values[1:], strict=False)]
    return lg.mean_std(steps)["std"] if len(steps) > 1 else None


def run_summary(run_dir: Path) -> dict[str, Any]:
    """Held-out results (learning_gain.run_result), the per-iteration rollout curves, per-role process
    scores and rewards (held-out and in rollouts) and their trends."""
    out = lg.run_result(run_dir)
    evals = {e["label"]: e for e in json.loads((run_dir / "summary.json").read_text())["evals"]}
    sft, rl = evals["after_sft"], evals.get("after_rl", evals["after_sft"])
    rows = [r for r in read_metrics(run_dir) if "rollout/outcome" in r]
    curves: dict[str, list[float]] = {"outcome": [r["rollout/outcome"] for r in rows]}
    curves["solved"] = [r["rollout/solved"] for r in rows]
    roles = [role for role in ROLES if f"eval/process/{role}" in sft]
    for role in roles:
        for kind in ("process", "reward"):
            curves[f"{kind}/{role}"] = [r.get(f"rollout/{kind}/{role}", math.nan) for r in rows]
    out["curves"] = curves
    out["phases"] = [r.get("phase") for r in rows]
    out["outcome_trend"] = thirds_trend(curves["outcome"])
    out["outcome_roughness"] = roughness(curves["outcome"])
    out["roles"] = {
        role: {
            "eval_process_sft": sft[f"eval/process/{role}"],
            "eval_process_rl": rl[f"eval/process/{role}"],
            "eval_reward_sft": sft[f"eval/reward/{role}"],
            "eval_reward_rl": rl[f"eval/reward/{role}"],
            "process_trend": thirds_trend(curves[f"process/{role}"]),
            "reward_trend": thirds_trend(curves[f"reward/{role}"]),
        }
        for role in roles
    }
    ev = [r["critic/explained_variance"] for r in rows if "critic/explained_variance" in r]
    if ev:
        out["critic_explained_variance_last_third"] = sum(ev[-max(1, len(ev) // 3) :]) / max(1, len(ev) // 3)
    fallbacks = [r["credit/counterfactual_fallbacks"] for r in rows if "credit/counterfactual_fallbacks" in r]
    if fallbacks:  # (episode, role) pairs that kept hybrid rewards for want of replay budget
        out["counterfactual_fallbacks"] = sum(fallbacks) / len(fallbacks)
        for role in roles:  # the mean R - R_cf a role was credited with, over the iterations
            credits = [
                r[f"credit/{role}/counterfactual"] for r in rows if f"credit/{role}/counterfactual" in r
            ]
            out[f"counterfactual_credit/{role}"] = sum(credits) / len(credits) if credits else None
    picks = [r["closed_loop/picked"] for r in read_metrics(run_dir) if "closed_loop/picked" in r]
    if picks:
        out["closed_loop_picks"] = picks
        decisions = run_dir / "closed_loop.jsonl"
        if decisions.exists():
            records = [json.loads(x) for x in decisions.read_text().splitlines() if x.strip()]
            out["probe_tokens"] = sum(int(r.get("probe_tokens", 0)) for r in records)
            # per round, the roles left out of the pick (their swap changed no probe episode)
            out["closed_loop_no_influence"] = [r.get("no_influence", []) for r in records]
    return out


def eval_stderr(p: float, episodes: int) -> float:
    """Binomial standard error of a held-out success rate measured on ``episodes`` episodes."""
    return math.sqrt(max(p * (1 - p), 0.0) / episodes) if episodes else math.nan


# -- aggregating over seeds -----------------------------------------------------------------------------
def _ms(values: list[float | None]) -> dict[str, float | None]:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return lg.mean_std(kept) if kept else {"mean": None, "std": None}


def aggregate_variant(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sample std over seeds of every scalar a finding reports, and the mean curves."""
    keys = ["sft_solved", "rl_solved", "gain_solved", "sft_outcome", "rl_outcome", "gain_outcome"]
    keys += ["outcome_trend", "outcome_roughness", "rl_tokens", "critic_explained_variance_last_third"]
    keys += ["probe_tokens", "counterfactual_fallbacks", *(f"counterfactual_credit/{r}" for r in ROLES)]
    agg: dict[str, Any] = {k: _ms([r.get(k) for r in runs]) for k in keys if any(k in r for r in runs)}
    roles = runs[0]["roles"]
    agg["roles"] = {
        role: {k: _ms([r["roles"][role][k] for r in runs]) for k in roles[role]} for role in roles
    }
    n = min(len(r["curves"]["outcome"]) for r in runs)
    agg["mean_curves"] = {
        name: [sum(r["curves"][name][i] for r in runs) / len(runs) for i in range(n)]
        for name in runs[0]["curves"]
    }
    return agg


# A thirds difference in rollouts compares two means of 4 iterations x 32 episodes; with per-episode
# scores spread by 0.3-0.4 its standard error is about 0.05: smaller moves are read as no move.
FREE_RIDING_MARGIN = 0.05


def free_riding(agg: dict[str, Any], margin: float = FREE_RIDING_MARGIN) -> list[str]:
    """Roles whose mean process score fell by more than ``margin`` (last third vs first third of the
    iterations) while the team's mean rollout outcome held (fell by no more than ``margin``): the
    free-riding pattern."""
    outcome = agg["outcome_trend"]["mean"]
    if outcome is None or outcome < -margin:
        return []
    return [
        role
        for role, figs in agg["roles"].items()
        if figs["process_trend"]["mean"] is not None and figs["process_trend"]["mean"] < -margin
    ]


# -- tables ---------------------------------------------------------------------------------------------
def pm(stat: dict[str, float | None] | None, fmt: str = ".3f") -> str:
    if not stat or stat["mean"] is None:
        return "n/a"
    std = "" if stat["std"] is None else f" +- {stat['std']:{fmt.lstrip('+')}}"
    return f"{stat['mean']:{fmt}}{std}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table, also valid markdown."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main_table(finding: dict[str, Any]) -> str:
    header = ["variant", "seeds", "SFT", "after RL", "gain", "rollout outcome trend", "curve roughness"]
    rows = []
    for v in finding["variants"]:
        a = v["aggregate"]
        rows.append(
            [
                v["label"],
                " ".join(str(s["seed"]) for s in v["per_seed"]),
                pm(a["sft_solved"]),
                pm(a["rl_solved"]),
                pm(a["gain_solved"], "+.3f"),
                pm(a["outcome_trend"], "+.3f"),
                pm(a["outcome_roughness"]),
            ]
        )
    return table(header, rows)


def role_table(finding: dict[str, Any]) -> str:
    """Per role: the rollout process-score trend (last third - first third) and the held-out process
    score after SFT -> after RL; last column the roles that fit the free-riding pattern."""
    header = ["variant", *(f"{r} process trend" for r in ROLES), "team outcome trend", "free-riding roles"]
    rows = []
    for v in finding["variants"]:
        a = v["aggregate"]
        cells = [pm(a["roles"][r]["process_trend"], "+.3f") if r in a["roles"] else "n/a" for r in ROLES]
        rows.append(
            [v["label"], *cells, pm(a["outcome_trend"], "+.3f"), ", ".join(v["free_riding"]) or "none"]
        )
    return table(header, rows)


def held_out_role_table(finding: dict[str, Any]) -> str:
    header = ["variant", *(f"{r} held-out process SFT -> RL" for r in ROLES)]
    rows = []
    for v in finding["variants"]:
        roles = v["aggregate"]["roles"]
        rows.append(
            [v["label"]]
            + [
                f"{roles[r]['eval_process_sft']['mean']:.3f} -> {roles[r]['eval_process_rl']['mean']:.3f}"
                if r in roles
                else "n/a"
                for r in ROLES
            ]
        )
    return table(header, rows)


def extra_lines(finding: dict[str, Any]) -> list[str]:
    lines = []
    for v in finding["variants"]:
        a = v["aggregate"]
        if "critic_explained_variance_last_third" in a:
            lines.append(
                f"{v['label']}: critic explained variance, last third: "
                f"{pm(a['critic_explained_variance_last_third'])}"
            )
        picks = [s.get("closed_loop_picks") for s in v["per_seed"]]
        if any(picks):
            seeds = ", ".join(
                f"seed {s['seed']}: {' '.join(s.get('closed_loop_picks') or [])}" for s in v["per_seed"]
            )
            lines.append(f"{v['label']}: roles picked per round: {seeds}")
            left_out = "; ".join(
                f"seed {s['seed']}: "
                + " | ".join(",".join(r) or "-" for r in s.get("closed_loop_no_influence") or [])
                for s in v["per_seed"]
            )
            lines.append(f"{v['label']}: roles whose swap changed no probe episode, per round: {left_out}")
            lines.append(
                f"{v['label']}: probe tokens (not counted as RL tokens): {pm(a.get('probe_tokens'), '.0f')}"
            )
        if "counterfactual_credit/coder" in a:
            credits = ", ".join(f"{r} {pm(a.get(f'counterfactual_credit/{r}'), '+.3f')}" for r in ROLES)
            lines.append(f"{v['label']}: mean R - R_cf per role: {credits}")
        if "counterfactual_fallbacks" in a:
            lines.append(
                f"{v['label']}: pairs kept hybrid per iteration: {pm(a['counterfactual_fallbacks'], '.1f')}"
            )
        lines.append(f"{v['label']}: RL rollout tokens: {pm(a['rl_tokens'], '.0f')}")
    return lines


def report(finding: dict[str, Any]) -> str:
    parts = [
        f"== {finding['title']} ==",
        "held-out success (mean +- std over seeds); rollout outcome trend = mean of the last third of the"
        " iterations minus the first third; roughness = std of the step-to-step changes of the rollout"
        " outcome",
        main_table(finding),
    ]
    if finding["name"] == "credit":
        parts += ["per-role process score in rollouts, last third minus first third", role_table(finding)]
    parts += [held_out_role_table(finding), *extra_lines(finding)]
    if finding.get("missing"):
        parts.append(f"not finished, left out: {', '.join(finding['missing'])}")
    parts.append(
        f"one held-out evaluation ({finding['eval_episodes']} episodes): standard error about "
        f"{finding['eval_stderr']:.3f}; of a gain (difference of two): about "
        f"{finding['eval_stderr'] * math.sqrt(2):.3f}"
    )
    return "\n".join(parts)


# -- figures --------------------------------------------------------------------------------------------
def plot_finding(finding: dict[str, Any], path: Path) -> None:
    """Left: held-out success after SFT and after RL per variant (bars: mean +- std, dots: seeds).
    Right: the rollout outcome over RL iterations (mean over seeds, thin lines: seeds). With the credit
    finding, a third panel: each role's process-score trend per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    credit = finding["name"] == "credit"
    fig, axes = plt.subplots(1, 3 if credit else 2, figsize=(15 if credit else 11, 4.2))
    variants = finding["variants"]
    ax = axes[0]
    seeds = [{f: [s[f] for s in v["per_seed"]] for f in lg.SFT_RL} for v in variants]
    lg.sft_rl_bars(ax, [(v["aggregate"], vs) for v, vs in zip(variants, seeds, strict=True)])
    ax.set_xticks(range(len(variants)), [v["label"] for v in variants], rotation=15, fontsize=8)
    ax.set_ylabel("held-out success")
    ax.set_title("held-out success, mean ± std; dots: seeds", fontsize=9)
    ax.legend(fontsize=8)
    ax = axes[1]
    for i, v in enumerate(variants):
        color = f"C{i}"
        for s in v["per_seed"]:
            ax.plot(
                range(1, len(s["curves"]["outcome"]) + 1),
                s["curves"]["outcome"],
                color=color,
                alpha=0.25,
                lw=0.8,
            )
        mean = v["aggregate"]["mean_curves"]["outcome"]
        ax.plot(range(1, len(mean) + 1), mean, color=color, lw=2, label=v["label"])
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("rollout outcome (pass fraction)")
    ax.set_title("rollout outcome; thick: mean over seeds", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")  # "best" is slow with many points
    if credit:
        ax = axes[2]
        w = 0.8 / len(variants)
        for i, v in enumerate(variants):
            roles = v["aggregate"]["roles"]
            xs = [j + (i - (len(variants) - 1) / 2) * w for j in range(len(ROLES))]
            ys = [roles[r]["process_trend"]["mean"] or 0.0 if r in roles else 0.0 for r in ROLES]
            errs = [roles[r]["process_trend"]["std"] or 0.0 if r in roles else 0.0 for r in ROLES]
            ax.bar(xs, ys, w, yerr=errs, capsize=2, color=f"C{i}", label=v["label"])
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xticks(range(len(ROLES)), ROLES)
        ax.set_ylabel("process score, last third - first third")
        ax.set_title("per-role process-score trend in rollouts", fontsize=9)
        ax.legend(fontsize=8)
    n = len(finding["seeds"])
    fig.suptitle(f"{finding['title']} ({n} seed{'' if n == 1 else 's'})", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    lg._write_atomic(path, buf.getvalue())


# -- running --------------------------------------------------------------------------------------------
def train_argv(variant: Variant, run_dir: Path, seed: int, sets: list[str]) -> list[str]:
    return lg._train_argv(lg.TEAM_CONFIG, run_dir, seed, sets, SMALL, list(variant.sets))


def _stamp(run_dir: Path) -> Path:
    return run_dir.with_suffix(".cmd")


def _start(variant: Variant, run_dir: Path, seed: int, sets: list[str]) -> list[str]:
    """The run's command, recorded next to it (``<run>.cmd``) as the run starts; a run directory left by
    an interrupted run is cleared first (the trainer would continue in it otherwise)."""
    argv = train_argv(variant, run_dir, seed, sets)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    lg._write_atomic(_stamp(run_dir), json.dumps(argv[1:]).encode())
    return argv


def finished_with(run_dir: Path, argv: list[str]) -> bool:
    """A finished run (summary.json with an after-RL evaluation) of exactly this command."""
    stamp, summary = _stamp(run_dir), run_dir / "summary.json"
    if not (stamp.exists() and summary.exists()):
        return False
    labels = {e.get("label") for e in json.loads(summary.read_text()).get("evals", [])}
    return "after_rl" in labels and json.loads(stamp.read_text()) == argv[1:]  # the interpreter may differ


def plan(findings: list[Finding], seeds: list[int], sets: list[str], out_dir: Path) -> list[lg.Job]:
    """A base build, then one job per (variant, seed) not already finished (none at all when every run
    is); a variant shared by several findings runs once. Seeds before variants: when a batch stops
    early, every variant has the same seeds."""
    jobs = [lg.Job("build_team", partial(lg._build_argv, lg.TEAM_CONFIG, sets), out_dir / "build_team.log")]
    seen = set()
    for seed in seeds:
        for finding in findings:
            for v in finding.variants:
                run_dir = out_dir / f"{v.name}_s{seed}"
                if run_dir in seen or finished_with(run_dir, train_argv(v, run_dir, seed, sets)):
                    continue
                seen.add(run_dir)
                argv = partial(_start, v, run_dir, seed, sets)
                jobs.append(lg.Job(run_dir.name, argv, run_dir.with_suffix(".log"), ("build_team",), run_dir))
    return jobs if len(jobs) > 1 else []  # nothing to train: no base build either


def collect(finding: Finding, seeds: list[int], sets: list[str], out_dir: Path) -> dict[str, Any]:
    """Every variant's finished runs; runs not finished (and variants without any) are left out and
    listed in ``missing``."""
    variants, missing = [], []
    for v in finding.variants:
        per_seed = []
        for seed in seeds:
            run_dir = out_dir / f"{v.name}_s{seed}"
            if finished_with(run_dir, train_argv(v, run_dir, seed, sets)):
                per_seed.append({"seed": seed, **run_summary(run_dir)})
            else:
                missing.append(run_dir.name)
        if not per_seed:  # left out of the tables, named in "missing"
            continue
        agg = aggregate_variant(per_seed)
        variants.append(
            {
                "name": v.name,
                "label": v.label,
                "sets": [*SMALL, *sets, *v.sets],
                "per_seed": per_seed,
                "aggregate": agg,
                "free_riding": free_riding(agg),
            }
        )
    if not variants:
        raise lg.RunFailed(f"{finding.name}: no finished run in {out_dir}")
    cfg_episodes = _eval_episodes(sets)
    mean_rl = statistics.fmean(v["aggregate"]["rl_solved"]["mean"] for v in variants)
    return {
        "name": finding.name,
        "title": finding.title,
        "seeds": sorted({s["seed"] for v in variants for s in v["per_seed"]}),
        "config": lg.TEAM_CONFIG,
        "eval_episodes": cfg_episodes,
        "eval_stderr": eval_stderr(mean_rl, cfg_episodes),
        "variants": variants,
        "missing": missing,
    }


def _eval_episodes(sets: list[str]) -> int:
    from teamrl.config import load_config

    cfg = load_config(lg.REPO / lg.TEAM_CONFIG, [*SMALL, *sets])
    return cfg.tasks.heldout_size * cfg.run.eval_samples


def team_vs_single(source: Path) -> dict[str, Any]:
    """The learning-gain benchmark's numbers (team vs the Coder alone at equal RL tokens), as they are."""
    try:
        data = json.loads(source.read_text())
        per_seed, agg = data["per_seed"], data["aggregate"]
    except (OSError, ValueError, KeyError) as exc:
        raise lg.RunFailed(
            f"team_vs_single reads {source} (run benchmarks/learning_gain.py first): {exc}"
        ) from None
    return {
        "name": TEAM_VS_SINGLE,
        "title": "trained team vs the Coder alone at equal RL tokens (from the learning-gain benchmark)",
        "source": _shown(source),
        "seeds": data.get("seeds"),
        "sets": data.get("sets"),
        "per_seed": per_seed,
        "aggregate": agg,
    }


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(lg.REPO))
    except ValueError:
        return str(path)


def team_vs_single_report(result: dict[str, Any]) -> str:
    agg = result["aggregate"]
    return "\n".join(
        [
            f"== {result['title']} ==",
            f"not retrained: the numbers of {result['source']}",
            lg.format_table("held-out success", lg.SUCCESS_COLUMNS, result["per_seed"], agg),
            f"team minus coder alone, success after RL: {lg._pm(agg['team_minus_coder.rl_solved'])}",
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("finding", choices=[*ORDER, "all"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each uses one torch thread)")
    parser.add_argument("--out-dir", type=Path, default=lg.REPO / "benchmarks" / "runs" / "findings")
    parser.add_argument("--results-dir", type=Path, default=lg.REPO / "benchmarks" / "results")
    parser.add_argument(
        "--no-train", action="store_true", help="train nothing: report the runs that already finished"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.jobs < 1 or len(set(args.seeds)) != len(args.seeds):
        print("reproduced_findings: --jobs must be >= 1 and --seeds distinct", file=sys.stderr)
        return 2
    names = ORDER if args.finding == "all" else [args.finding]
    out_dir, results_dir = args.out_dir.resolve(), args.results_dir.resolve()
    try:
        for name in names:
            if name == TEAM_VS_SINGLE:
                result = team_vs_single(results_dir / "learning_gain.json")
                print(team_vs_single_report(result), flush=True)
                lg.plot(result["per_seed"], result["aggregate"], results_dir / f"findings_{name}.png")
            else:
                finding = FINDINGS[name]
                jobs = [] if args.no_train else plan([finding], args.seeds, args.set, out_dir)
                print(
                    f"{name}: {max(len(jobs) - 1, 0)} run(s) to train, {args.jobs} at once, in {out_dir}",
                    flush=True,
                )
                start, cpu0 = time.perf_counter(), _children_cpu_s()
                lg.run_jobs(jobs, args.jobs)
                result = collect(finding, args.seeds, args.set, out_dir)
                if jobs:  # what this invocation trained (runs reused from earlier ones are not in it)
                    result["batch"] = {
                        "trained": [j.name for j in jobs[1:]],
                        "wall_min": (time.perf_counter() - start) / 60,
                        "cpu_min": (_children_cpu_s() - cpu0) / 60,
                        "commands": {j.name: shlex.join(j.command) for j in jobs[1:]},
                    }
                print(report(result), flush=True)
                plot_finding(result, results_dir / f"findings_{name}.png")
            lg._write_atomic(
                results_dir / f"findings_{name}.json", (json.dumps(result, indent=2) + "\n").encode()
            )
            print(f"wrote {results_dir / f'findings_{name}.json'} and .png\n", flush=True)
    except lg.RunFailed as exc:
        print(f"reproduced_findings: {exc}", file=sys.stderr)
        return 1
    return 0


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main())
