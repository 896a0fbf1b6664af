"""The debate-trained team against one debater answering alone, at equal RL tokens, over seeds.

For every seed: train the debate (examples/debate.yaml: 3 debaters, 1 revision round, majority vote,
joint GRPO), read how many tokens its RL rollouts generated, then train the single agent from the same
base model with the same seed and ``recipe.token_budget`` set to that number: the same config with
``workflow.debaters=1`` and ``workflow.rounds=0`` (DebateConfig allows both: one debater answers alone
and its answer is the verdict), i.e. single-agent GRPO on the same problems and rewards. Both are
measured on the same fixed held-out problems. Prints held-out accuracy after SFT and after RL per seed
with mean and sample standard deviation, and writes ``<results-dir>/debate_benchmark.json`` and
``<results-dir>/debate_benchmark.png``.

    .venv/bin/python benchmarks/debate_benchmark.py [--seeds 0 1 2] [--jobs 1] [--out-dir benchmarks/runs]
        [--results-dir benchmarks/results] [--set key=value ...] [--collect BATCH_DIR]

``--set`` applies to team and single agent alike (the single agent's ``workflow.debaters``,
``workflow.rounds``, token budget and base model are fixed). Runs go to a fresh
``<out-dir>/debate_benchmark-<timestamp>-<pid>/`` (``team_s<seed>``, ``single_s<seed>``, each with a
``.log``);
``--collect`` trains nothing and reports the finished runs of such a directory. The single agent starts
from the team's base (an ``hf`` checkpoint), because a one-debater corpus would build another base.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import learning_gain as lg  # noqa: E402  (job runner, run results, table, figure)

CONFIG = "examples/debate.yaml"
SINGLE = ("workflow.debaters=1", "workflow.rounds=0")  # one debater, no revision: it answers alone
RUNS = (("team", "team"), ("single", "single"))  # (key, short name in the table's headers)
COLUMNS = [
    (r, f, f"{short} {h}", ".3f")
    for r, short in RUNS
    for f, h in (("sft_solved", "SFT"), ("rl_solved", "RL"), ("gain_solved", "gain"))
] + [
    (r, f, f"{short} {h}", ".0f")
    for r, short in RUNS
    for f, h in (("rl_tokens", "tok"), ("rl_iterations", "it"))
]


def plan_jobs(seeds: list[int], sets: list[str], batch_dir: Path) -> list[lg.Job]:
    """The base build, every seed's team run, then each seed's single agent after its team run."""
    jobs = [lg.Job("build", partial(lg._build_argv, CONFIG, sets), batch_dir / "build.log")]
    for seed in seeds:
        team = batch_dir / f"team_s{seed}"
        argv = partial(lg._train_argv, CONFIG, team, seed, sets, lg.COMMON, [])
        jobs.append(lg.Job(team.name, argv, team.with_suffix(".log"), ("build",), team))
    for seed in seeds:
        team, single = batch_dir / f"team_s{seed}", batch_dir / f"single_s{seed}"
        argv = partial(lg._baseline_argv, single, seed, sets, team, CONFIG, CONFIG, SINGLE)
        jobs.append(lg.Job(single.name, argv, single.with_suffix(".log"), (team.name,), single))
    return jobs


def seed_result(batch_dir: Path, seed: int) -> dict[str, Any]:
    """Held-out results and RL tokens of a seed's two finished runs."""
    team, single = lg.run_result(batch_dir / f"team_s{seed}"), lg.run_result(batch_dir / f"single_s{seed}")
    single["token_budget"] = team["rl_tokens"]
    single["budget_reached"] = single["rl_tokens"] >= team["rl_tokens"]
    return {"seed": seed, "team": team, "single": single}


def collect(batch_dir: Path) -> list[dict[str, Any]]:
    """Every seed of ``batch_dir`` whose team and single-agent runs both finished (have a summary.json)."""
    seeds = sorted(int(d.name.removeprefix("team_s")) for d in batch_dir.glob("team_s*[0-9]") if d.is_dir())
    done = [s for s in seeds if all((batch_dir / f"{r}_s{s}" / "summary.json").exists() for r, _ in RUNS)]
    return [seed_result(batch_dir, s) for s in done]


def aggregate(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out = {f"{r}.{f}": lg.mean_std([float(s[r][f]) for s in per_seed]) for r, f, _, _ in COLUMNS}
    out["team_minus_single.rl_solved"] = lg.mean_std(
        [s["team"]["rl_solved"] - s["single"]["rl_solved"] for s in per_seed]
    )
    return out


def format_verdict(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]]) -> str:
    wins = sum(s["team"]["rl_solved"] > s["single"]["rl_solved"] for s in per_seed)
    lines = [
        f"team minus single agent, held-out accuracy after RL: {lg._pm(agg['team_minus_single.rl_solved'])}; "
        f"team ahead on {wins}/{len(per_seed)} seed(s)",
        f"RL gain: team {lg._pm(agg['team.gain_solved'])}, single agent {lg._pm(agg['single.gain_solved'])}",
    ]
    missed = [s["seed"] for s in per_seed if not s["single"]["budget_reached"]]
    if missed:
        lines.append(f"warning: seeds {missed}: the single agent stopped before spending its token budget")
    return "\n".join(lines)


def plot(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    groups = [
        ({f: agg[f"{r}.{f}"] for f in lg.SFT_RL}, {f: [s[r][f] for s in per_seed] for f in lg.SFT_RL})
        for r, _ in RUNS
    ]
    lg.sft_rl_bars(ax, groups)
    ax.set_xticks(range(len(RUNS)), ["debate (3 debaters, 1 revision)", "one debater alone"])
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"Held-out accuracy, mean ± std over {len(per_seed)} seed(s), equal RL tokens", fontsize=10)
    ax.legend()
    lg.save_figure(fig, path, dpi=120)


def report(per_seed: list[dict[str, Any]], result: dict[str, Any], results_dir: Path) -> None:
    agg = aggregate(per_seed)
    print(
        lg.format_table(
            "held-out accuracy (share of held-out problems whose verdict is right)", COLUMNS, per_seed, agg
        )
    )
    print()
    print(format_verdict(per_seed, agg))
    result = {
        **result,
        "config": CONFIG,
        "single_overrides": list(SINGLE),
        "per_seed": per_seed,
        "aggregate": agg,
    }
    lg.write_results(results_dir, "debate_benchmark", result, partial(plot, per_seed, agg))


def main(argv: list[str] | None = None) -> int:
    return lg.seeds_main(
        "debate_benchmark",
        __doc__,
        "override for team and single agent alike",
        plan_jobs,
        collect,
        report,
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
