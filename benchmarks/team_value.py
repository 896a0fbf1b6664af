"""Does the test-driven team earn its tokens? The team against the Coder alone and against one model doing
the whole loop, at equal RL tokens, greedy and sampled, over seeds (issue 18).

For every seed: train the team (examples/test_driven.yaml), read how many tokens its RL rollouts generated,
then train two controls from the team's base model with the same seed and ``recipe.token_budget`` set to
that number:

- ``coder_alone`` (examples/test_driven_coder_alone.yaml): the Coder alone, one attempt, same prompts;
- ``one_model`` (examples/test_driven_one_model.yaml): one model writes the tests, then the code, sees the
  execution report and revises: the value of the loop told apart from the value of separate roles.

Every finished run is then re-evaluated greedily (benchmarks/greedy_eval.py, ``GREEDY_N`` held-out tasks,
one episode each at temperature 0, after SFT and after RL); the team's run also with ``--per-role``: for
each trained role, the tasks whose outcome changes when that role alone plays its SFT snapshot's turns.
Prints held-out success after SFT and after RL per seed (sampled: the runs' own evaluations, 192 tasks x 2
episodes at T = 0.7; greedy), mean and sample standard deviation, and the issue's verdicts, and writes
``<results-dir>/team_value.json`` and ``team_value.png``.

    .venv/bin/python benchmarks/team_value.py [--seeds 0 1 2] [--jobs 2] [--out-dir benchmarks/runs]
        [--results-dir benchmarks/results] [--set key=value ...] [--collect BATCH_DIR]

``--set`` applies to every run (e.g. a smaller model for a smoke run); ``TEAM_VALUE_TEAM=CONFIG`` trains
another team config (a variant) in place of examples/test_driven.yaml. Runs go to a fresh
``<out-dir>/team_value-<timestamp>-<pid>/`` (``team_s<seed>``, ``coder_alone_s<seed>``,
``one_model_s<seed>``, each with a ``.log``); ``--collect`` trains nothing and reports the finished runs
of such a directory.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import learning_gain as lg  # noqa: E402  (job runner, run results, tables, figure)

TEAM = os.environ.get(
    "TEAM_VALUE_TEAM", "examples/test_driven.yaml"
)  # the team's config (a variant to compare)
CONTROLS = {
    "coder_alone": "examples/test_driven_coder_alone.yaml",
    "one_model": "examples/test_driven_one_model.yaml",
}
ARMS = ("team", *CONTROLS)
LABELS = {"team": "team", "coder_alone": "Coder alone", "one_model": "one-model loop"}
GREEDY_N = int(os.environ.get("TEAM_VALUE_GREEDY_N", "200"))  # held-out tasks of each greedy evaluation
MARGIN = 0.05  # the bar: the team beats the Coder alone by 5 points, greedy and sampled
LIFT = 0.10  # ... and RL lifts the team's greedy success by 10 points over SFT


def plan_jobs(seeds: list[int], sets: list[str], batch_dir: Path) -> list[lg.Job]:
    """The base build, then seed by seed: the team run, its controls (after it), a greedy evaluation of
    each run (after it). Ready jobs start in this order, so an earlier seed finishes whole first and a
    batch cut short still has complete seeds to ``--collect``."""
    jobs = [lg.Job("build", partial(lg._build_argv, TEAM, sets), batch_dir / "build.log")]
    for seed in seeds:
        team = batch_dir / f"team_s{seed}"
        argv = partial(lg._train_argv, TEAM, team, seed, sets, lg.COMMON, [])
        jobs.append(lg.Job(team.name, argv, team.with_suffix(".log"), ("build",), team))
        for arm, config in CONTROLS.items():
            run = batch_dir / f"{arm}_s{seed}"
            argv = partial(lg._baseline_argv, run, seed, sets, team, config, TEAM)
            jobs.append(lg.Job(run.name, argv, run.with_suffix(".log"), (team.name,), run))
        for arm in ARMS:
            run = batch_dir / f"{arm}_s{seed}"
            log = run.with_name(f"greedy_{run.name}.log")
            argv = partial(lg._greedy_argv, run, GREEDY_N, arm == "team")
            jobs.append(lg.Job(f"greedy_{run.name}", argv, log, (run.name,)))
    return jobs


def seed_result(batch_dir: Path, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"seed": seed}
    for arm in ARMS:
        run = batch_dir / f"{arm}_s{seed}"
        out[arm] = lg.run_result(run)
    for arm in CONTROLS:
        out[arm]["token_budget"] = out["team"]["rl_tokens"]
        out[arm]["budget_reached"] = out[arm]["rl_tokens"] >= out["team"]["rl_tokens"]
    return out


def collect(batch_dir: Path) -> list[dict[str, Any]]:
    """Every seed of ``batch_dir`` whose three runs finished (a summary.json each)."""
    seeds = sorted(int(d.name.removeprefix("team_s")) for d in batch_dir.glob("team_s*[0-9]") if d.is_dir())
    done = [s for s in seeds if all((batch_dir / f"{a}_s{s}" / "summary.json").exists() for a in ARMS)]
    return [seed_result(batch_dir, s) for s in done]


def _columns(prefix: str) -> list[tuple[str, str, str, str]]:
    short = {"team": "team", "coder_alone": "alone", "one_model": "loop"}
    return [
        (a, f"{prefix}{f}", f"{short[a]} {h}", ".3f")
        for a in ARMS
        for f, h in (("sft_solved", "SFT"), ("rl_solved", "RL"))
    ]


def has_greedy(per_seed: list[dict[str, Any]]) -> bool:
    return all("greedy_rl_solved" in s[a] for s in per_seed for a in ARMS)


def aggregate(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    prefixes = ["", "greedy_"] if has_greedy(per_seed) else [""]
    out: dict[str, dict[str, float | None]] = {}
    for prefix in prefixes:
        for a, f, _, _ in _columns(prefix):
            out[f"{a}.{f}"] = lg.mean_std([float(s[a][f]) for s in per_seed])
        for arm in CONTROLS:
            out[f"team_minus_{arm}.{prefix}rl_solved"] = lg.mean_std(
                [s["team"][f"{prefix}rl_solved"] - s[arm][f"{prefix}rl_solved"] for s in per_seed]
            )
        out[f"team.{prefix}gain_solved"] = lg.mean_std(
            [s["team"][f"{prefix}rl_solved"] - s["team"][f"{prefix}sft_solved"] for s in per_seed]
        )
    for key in ("rl_tokens",):
        for arm in ARMS:
            out[f"{arm}.{key}"] = lg.mean_std([float(s[arm][key]) for s in per_seed])
    return out


def verdicts(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's bars, seed by seed."""
    out: dict[str, Any] = {}
    for prefix, name in (("", "sampled"), ("greedy_", "greedy")):
        if prefix and not has_greedy(per_seed):
            continue
        margins = [s["team"][f"{prefix}rl_solved"] - s["coder_alone"][f"{prefix}rl_solved"] for s in per_seed]
        out[f"team_beats_coder_alone_by_{MARGIN:.2f}_{name}"] = all(m >= MARGIN for m in margins)
    if has_greedy(per_seed):
        lifts = [s["team"]["greedy_rl_solved"] - s["team"]["greedy_sft_solved"] for s in per_seed]
        out[f"rl_lifts_team_greedy_by_{LIFT:.2f}"] = all(x >= LIFT for x in lifts)
        roles = sorted({r for s in per_seed for r in s["team"].get("per_role", {})})
        changed = [
            s["team"].get("per_role", {}).get(r, {}).get("outcome_changed", 0)
            for s in per_seed
            for r in roles
        ]
        out["every_role_changes_outcomes"] = bool(roles) and all(n > 0 for n in changed)
    return out


def format_report(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]]) -> str:
    parts = [lg.format_table("held-out success, sampled (T = 0.7)", _columns(""), per_seed, agg)]
    if has_greedy(per_seed):
        parts.append(lg.format_table("held-out success, greedy", _columns("greedy_"), per_seed, agg))
    lines = []
    for prefix, name in (("", "sampled"), ("greedy_", "greedy")):
        if prefix and not has_greedy(per_seed):
            continue
        for arm in CONTROLS:
            stat = agg[f"team_minus_{arm}.{prefix}rl_solved"]
            lines.append(f"team minus {LABELS[arm]} after RL, {name}: {lg._pm(stat)}")
        lines.append(f"team RL - SFT, {name}: {lg._pm(agg[f'team.{prefix}gain_solved'])}")
    for s in per_seed:
        for role, c in s["team"].get("per_role", {}).items():
            lines.append(
                f"seed {s['seed']} {role}: RL turns change {c['outcome_changed']} outcomes "
                f"(solved only with them {c['solved_only_rl']}, "
                f"only with the SFT turns {c['solved_only_sft_turns']})"
            )
    tokens = ", ".join(f"{LABELS[a]} {agg[f'{a}.rl_tokens']['mean']:,.0f}" for a in ARMS)
    lines.append(f"RL rollout tokens (mean over seeds): {tokens}")
    missed = [(s["seed"], a) for s in per_seed for a in CONTROLS if not s[a]["budget_reached"]]
    if missed:
        lines.append(f"warning: {missed}: a control stopped before spending its token budget")
    for k, v in verdicts(per_seed).items():
        lines.append(f"{k}: {'yes' if v else 'no'}")
    return "\n\n".join(parts) + "\n\n" + "\n".join(lines)


def plot(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]], path: Path) -> None:
    lg.panels(per_seed, agg, list(ARMS), LABELS, has_greedy(per_seed), path, 10)


def report(per_seed: list[dict[str, Any]], result: dict[str, Any], results_dir: Path) -> None:
    agg = aggregate(per_seed)
    print(format_report(per_seed, agg))
    result = {
        **result,
        "team_config": TEAM,
        "controls": CONTROLS,
        "greedy_tasks": GREEDY_N,
        "per_seed": per_seed,
        "aggregate": agg,
        "verdicts": verdicts(per_seed),
    }
    lg.write_results(results_dir, "team_value", result, partial(plot, per_seed, agg))


def main(argv: list[str] | None = None) -> int:
    return lg.seeds_main(
        "team_value",
        __doc__,
        "config override for the team and its controls alike",
        plan_jobs,
        collect,
        report,
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
