"""LLM agents in the town: RL on the weighted reward against the SFT agents, judged plausibility against the
judge's own noise (issue 20).

Per seed, ``teamrl train examples/town.yaml`` (6 agents on the embedded base, 12 ticks; SFT on a sensible
agent's plans and actions, then RL on the weighted objectives). The trainer evaluates the same held-out towns
(``tasks.heldout_size`` x ``run.eval_samples``, sampled at the run's temperature, seeded alike) after SFT and
after RL; this reads both from the run's ``summary.json``:

- the held-out **goal achievement** (``eval/outcome``: the share of goals reached, one's object, the book and
  the gathering) and what emerged (conversations and partners per agent, the gathering, malformed replies,
  the share of ticks whose action follows the agent's own stated plan);
- the **judged plausibility** (the fixed rule judge on each held-out day) with the judge's own noise beside
  it: the mean absolute difference between the judge and a second, noisy judge on the same days
  (``eval/judge/noise``), and the judge's calibration on the shipped anchors at each evaluation (AUC, anchor
  mean and its drift since the first evaluation of the run).

The scripted text agent the SFT imitates (``teamrl.world.workflow.expert_action``) plays the same held-out
towns as a reference row.

    .venv/bin/python benchmarks/town_llm.py --seeds 0 1 2 --jobs 2
    .venv/bin/python benchmarks/town_llm.py --collect benchmarks/runs/town_llm-<time>-<pid>

(results: benchmarks/results/town_llm.json and .png)
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import learning_gain as lg  # noqa: E402  (job runner)
from benchmarks.seeded_batch import batch_parser, run_batch  # noqa: E402

CONFIG = "examples/town.yaml"
KEYS = {
    "goals achieved": "eval/outcome",
    "gathering": "eval/town/shared_achieved",
    "own object": "eval/town/private_achieved",
    "book": "eval/town/book_achieved",
    "conversations / agent": "eval/town/conversations_per_agent",
    "partners / agent": "eval/town/partners_per_agent",
    "follows own plan": "eval/town/coherence",
    "malformed": "eval/town/malformed",
    "plausibility (judged)": "eval/town/plausibility",
    "judge noise": "eval/judge/noise",
    "judge AUC": "eval/judge/auc",
    "judge drift": "eval/judge/drift",
}
STAGES = ("after_sft", "after_rl")


def plan(seeds: list[int], sets: list[str], batch: Path) -> list[lg.Job]:
    """The base, then a run per seed; in a batch directory given again, finished runs are not redone."""
    jobs = [lg.Job("build", partial(lg._build_argv, CONFIG, sets), batch / "build.log")]
    for seed in seeds:
        run = batch / f"town_s{seed}"
        if (run / "summary.json").exists():
            continue
        train = partial(lg._train_argv, CONFIG, run, seed, sets, lg.COMMON, [])
        jobs.append(lg.Job(run.name, train, run.with_suffix(".log"), ("build",), run_dir=run))
    return jobs


def expert_row(heldout: int) -> dict[str, float]:
    """The scripted text agent on the run's held-out towns (the same suite seed)."""
    from teamrl.config import load_config
    from teamrl.engine.team import Seat, Team
    from teamrl.world.workflow import TownSuite, TownWorkflow

    cfg = load_config(REPO / CONFIG)
    wf = TownWorkflow(cfg.workflow)  # type: ignore[arg-type]
    suite = TownSuite(cfg.tasks)  # type: ignore[arg-type]
    team = Team({"resident": Seat(script=wf.experts(random.Random(0))["resident"])})
    episodes = [asyncio.run(wf.play(team, t)) for t in suite.fixed_set("heldout", heldout)]
    metrics = {"eval/outcome": statistics.mean(e.outcome for e in episodes)}
    metrics |= wf.metrics(episodes, "eval/")
    evaluated, _ = wf.evaluate(None, [], episodes, 1)  # type: ignore[arg-type]
    return {
        label: float((metrics | evaluated)[key]) for label, key in KEYS.items() if key in metrics | evaluated
    }


def collect(batch: Path) -> dict[str, Any]:
    runs = []
    for path in sorted(batch.glob("town_s*/summary.json")):
        evals = {e["label"]: e for e in json.loads(path.read_text())["evals"]}
        if not all(s in evals for s in STAGES):
            continue
        row: dict[str, Any] = {
            s: {label: float(evals[s][key]) for label, key in KEYS.items() if key in evals[s]} for s in STAGES
        }
        row["seed"] = int(path.parent.name.removeprefix("town_s"))
        runs.append(row)
    summary: dict[str, Any] = {}
    for stage in STAGES:
        summary[stage] = {}
        for label in KEYS:
            values = [r[stage][label] for r in runs if label in r[stage]]
            if values:
                summary[stage][label] = [
                    statistics.mean(values),
                    statistics.stdev(values) if len(values) > 1 else 0.0,
                ]
    lift = [r["after_rl"]["goals achieved"] - r["after_sft"]["goals achieved"] for r in runs]
    drop = [r["after_sft"]["plausibility (judged)"] - r["after_rl"]["plausibility (judged)"] for r in runs]
    noise = [r["after_rl"]["judge noise"] for r in runs]
    summary |= paired_days(batch)
    summary["goal_lift_per_seed"] = lift
    summary["plausibility_drop_per_seed"] = drop
    summary["judge_noise_per_seed"] = noise
    summary["rl_beats_sft_every_seed"] = bool(runs) and all(x > 0 for x in lift)
    summary["plausibility_within_noise_every_seed"] = bool(runs) and all(
        d <= n for d, n in zip(drop, noise, strict=True)
    )
    return {"summary": summary, "runs": runs}


def paired_days(batch: Path) -> dict[str, Any]:
    """The same held-out days after SFT and after RL (a day: a town and a sample, seeded alike), paired: per
    seed the days' differences in goals achieved and in judged plausibility, and over all seeds their mean
    with a 95% bootstrap interval (seeds, then days, resampled: ``teamrl.marl.stats``)."""
    from teamrl.marl.stats import bootstrap_ci

    out: dict[str, Any] = {}
    for key, name in (("goals_achieved", "goal"), ("plausibility", "plausibility")):
        per_seed = []
        for run in sorted(batch.glob("town_s*/episodes")):
            days = {}
            for stage in STAGES:
                path = run / f"eval_{stage}.jsonl"
                if not path.exists():
                    break
                rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                days[stage] = {(r["task_id"], r["group"]): float(r["verifier"][key]) for r in rows}
            if len(days) < len(STAGES):
                continue
            shared = sorted(set(days["after_sft"]) & set(days["after_rl"]))
            per_seed.append([days["after_rl"][d] - days["after_sft"][d] for d in shared])
        if per_seed:
            pooled = [x for seed in per_seed for x in seed]
            out[f"paired_{name}_diff"] = {
                "mean": statistics.mean(pooled),
                "ci95": bootstrap_ci(per_seed, statistics.mean),
                "days": len(pooled),
                "per_seed": [statistics.mean(seed) for seed in per_seed],
            }
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        "goals achieved",
        "gathering",
        "conversations / agent",
        "follows own plan",
        "plausibility (judged)",
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels), 3.2))
    for ax, label in zip(axes, panels, strict=True):
        stages = [s for s in STAGES if label in result["summary"][s]]
        means = [result["summary"][s][label][0] for s in stages]
        stds = [result["summary"][s][label][1] for s in stages]
        ax.bar(range(len(stages)), means, yerr=stds, color=["C0", "C3"][: len(stages)], capsize=3)
        for run in result["runs"]:
            ax.plot(range(len(stages)), [run[s][label] for s in stages], "k.-", ms=3, lw=0.5)
        if label in result.get("expert", {}):
            ax.axhline(result["expert"][label], color="grey", ls=":", lw=1, label="scripted agent")
        if label == "plausibility (judged)":
            noise = result["summary"]["after_rl"].get("judge noise", [0.0])[0]
            base = means[0]
            ax.axhspan(base - noise, base + noise, color="C0", alpha=0.12, label="SFT +- judge noise")
            ax.legend(fontsize=7, loc="lower right")
        ax.set_xticks(range(len(stages)), [s.replace("_", " ") for s in stages], fontsize=8)
        ax.set_title(label, fontsize=9)
    fig.suptitle(f"LLM agents in the town, held-out towns ({len(result['runs'])} seeds; dots: seeds)")
    lg.save_figure(fig, path, 110)


def draw_days(batch: Path, results: Path, stem: str) -> list[str]:
    """The first held-out town's day as the lowest seed's agents lived it after SFT and after RL
    (``<stem>_day_after_sft.png``, ``<stem>_day_after_rl.png``), from the transcripts the run kept."""
    from teamrl.world.timeline import plot_timeline, rows_from_transcript

    runs = sorted(batch.glob("town_s*/episodes"), key=lambda p: int(p.parent.name.removeprefix("town_s")))
    if not runs:
        return []
    out = []
    results.mkdir(parents=True, exist_ok=True)
    for stage in STAGES:
        path = runs[0] / f"eval_{stage}.jsonl"
        if not path.exists():
            continue
        episode = json.loads(path.read_text().splitlines()[0])
        v = episode["verifier"]
        rows = rows_from_transcript(v["transcript"])
        title = (
            f"{stage.replace('_', ' ')} ({runs[0].parent.name}): {episode['task_id']}, goals "
            f"{v['goals_achieved']:.2f}, gathering {v['shared_achieved']:.2f}"
        )
        png = results / f"{stem}_day_{stage}.png"
        plot_timeline(rows, png, title)
        out.append(png.name)
    return out


def main(argv: list[str] | None = None) -> int:
    args = batch_parser(__doc__ or "", "town_llm").parse_args(argv)
    result = run_batch(args, "town_llm", CONFIG, plan, collect)
    if result is None:
        return 1
    result["expert"] = expert_row(64)
    result["days"] = draw_days(Path(result["batch_dir"]), args.results, args.name)
    lg.write_results(args.results, args.name, result, lambda p: plot(result, p))
    s = result["summary"]
    print(f"{'':24s} {'after SFT':>16s} {'after RL':>16s} {'scripted':>9s}")
    for label in KEYS:
        cells = [
            f"{s[st][label][0]:7.3f} +- {s[st][label][1]:.3f}" if label in s[st] else " " * 16
            for st in STAGES
        ]
        print(f"{label:24s} {cells[0]:>16s} {cells[1]:>16s} {result['expert'].get(label, float('nan')):9.3f}")
    print("goal lift per seed:", [round(x, 3) for x in s["goal_lift_per_seed"]])
    for name in ("goal", "plausibility"):
        if f"paired_{name}_diff" in s:
            d = s[f"paired_{name}_diff"]
            low, high = d["ci95"]
            print(
                f"{name}, RL minus SFT on the same {d['days']} days: {d['mean']:+.3f} "
                f"[{low:+.3f}, {high:+.3f}]"
            )
    print("plausibility drop per seed:", [round(x, 3) for x in s["plausibility_drop_per_seed"]])
    print("judge noise per seed:", [round(x, 3) for x in s["judge_noise_per_seed"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
