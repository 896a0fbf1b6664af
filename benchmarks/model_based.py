"""Model-based MAPPO against model-free MAPPO on simple_spread at half the real steps (issue 21).

For every seed, in one batch: model-free MAPPO (the simple_spread preset until 2026-12-07: 128 copies, the
critic on the raw observation) for ``--steps`` real env steps, and model-based MAPPO (the same plus
``model:``, teamrl/marl/imagination.py) for ``--steps / 2``. Every run
is evaluated every ``--eval-every`` real steps on the MARL benchmark's episode set (the batched simple_spread,
``marl_benchmark.EPISODES`` copies reset with seed 12345, one episode each, deterministic policy: 1,000 since
2026-12-07, 50 when the recorded figures were measured), so the two arms' curves are on the same episodes.
Reported: each arm's final return (mean +- std over seeds),
the model-free return at the model-based run's budget, and the first real step at which the model-based
mean curve reaches the model-free final return (the issue's bar: at most half the steps), plus the model's
held-out error, the teammate model's accuracy and refreshes, and training time (CPU seconds).

    .venv/bin/python benchmarks/model_based.py [--seeds 0 1 2] [--steps 4000000] [--jobs 2]
        [--set model.horizon=5 ...] [--tag NAME]

Writes benchmarks/results/model_based[_TAG].json and .png.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results"

from benchmarks.marl_benchmark import (  # noqa: E402
    EPISODE_SET,
    SPREAD_UNTIL_2026_12_07,
    evaluate_on_episode_set,
)
from teamrl.marl.train import make_env_factory, parse_sets, resolve  # noqa: E402


def train(arm: str, steps: int, seed: int, sets: dict[str, Any], eval_every: int) -> dict[str, Any]:
    """One run in this process (one torch thread): its evaluation curve on the episode set and its log."""
    import torch

    from teamrl.marl.run import RunContext

    overrides = {
        **SPREAD_UNTIL_2026_12_07,  # the settings its figures were measured with
        "total_env_steps": steps,
        "seed": seed,
        **(sets if arm == "model_based" else {}),
    }
    if arm == "model_based" and not any(k == "model" or k.startswith("model.") for k in overrides):
        overrides["model"] = {}
    module, cfg, env_kwargs = resolve("mappo", "simple_spread", overrides)
    torch.set_num_threads(1)

    def evaluator(checkpoint: dict[str, Any]) -> dict[str, Any]:
        return evaluate_on_episode_set(lambda env: module.make_actor(checkpoint, deterministic=True))

    with tempfile.TemporaryDirectory() as tmp:
        run = RunContext(
            Path(tmp),
            make_env_factory("simple_spread", env_kwargs),
            steps,
            show_progress=False,
            tensorboard=False,
            evaluator=evaluator,
            eval_every=eval_every,
        )
        wall0, cpu0 = time.perf_counter(), time.process_time()
        module.train(cfg, run)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    history = run.history
    curve = [(r["step"], r["eval/return/mean"]) for r in history if "eval/return/mean" in r]
    last = [r for r in history if "return/mean" in r][-1]
    return {
        "arm": arm,
        "seed": seed,
        "env_steps": curve[-1][0],
        "config": cfg.model_dump(),
        "curve": curve,
        "final_return": curve[-1][1],
        "wall_s": wall,
        "cpu_s": cpu,
        **{k: last[k] for k in last if k.startswith("model/")},
        "model_error_curve": [(r["step"], r["model/error"]) for r in history if "model/error" in r][::25],
        "teammate_accuracy_curve": [
            (r["step"], r["model/teammate_accuracy"]) for r in history if "model/teammate_accuracy" in r
        ][::25],
    }


def _ms(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def mean_curve(runs: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """The arm's curve averaged over seeds at the steps every seed evaluated."""
    steps = sorted(set.intersection(*(set(s for s, _ in r["curve"]) for r in runs)))
    return [(s, statistics.fmean(dict(r["curve"])[s] for r in runs)) for s in steps]


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    mf, mb = res["model_free"], res["model_based"]
    target, target_sd = _ms([r["final_return"] for r in mf])
    mb_final, mb_sd = _ms([r["final_return"] for r in mb])
    half = mb[0]["env_steps"]
    mf_at_half = _ms([min(r["curve"], key=lambda p: abs(p[0] - half))[1] for r in mf])  # nearest point
    reached = next((s for s, v in mean_curve(mb) if v >= target), None)
    return {
        "model_free_final": [target, target_sd],
        "model_free_steps": mf[0]["env_steps"],
        "model_based_final": [mb_final, mb_sd],
        "model_based_steps": half,
        "model_free_at_model_based_steps": list(mf_at_half),
        "gap_to_model_free_final": mb_final - target,
        "model_based_reaches_model_free_final_at": reached,
        "bar_met": reached is not None and reached <= mf[0]["env_steps"] // 2,
        "cpu_s": {arm: _ms([r["cpu_s"] for r in res[arm]]) for arm in ("model_free", "model_based")},
    }


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"model_free": "tab:blue", "model_based": "tab:orange"}
    for arm in ("model_free", "model_based"):
        for r in res[arm]:
            xs, ys = zip(*r["curve"], strict=True)
            ax.plot([x / 1e6 for x in xs], ys, color=colors[arm], alpha=0.25, lw=1)
        xs, ys = zip(*mean_curve(res[arm]), strict=True)
        label = f"{arm.replace('_', '-')} MAPPO (mean of {len(res[arm])} seeds)"
        ax.plot([x / 1e6 for x in xs], ys, color=colors[arm], lw=2, label=label)
    summary = res["summary"]
    ax.axhline(summary["model_free_final"][0], color="tab:blue", ls=":", lw=1, label="model-free final")
    ax.axvline(summary["model_free_steps"] / 2e6, color="grey", ls="--", lw=1, label="half its steps")
    ax.set_xlabel("real env steps (millions)")
    ax.set_ylabel("return on the fixed episode set")
    ax.set_title("simple_spread: model-based vs model-free MAPPO")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=4_000_000, help="model-free real steps (model-based: half)")
    ap.add_argument("--eval-every", type=int, default=250_000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="model-based settings, e.g. model.horizon=5")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    sets = parse_sets(args.set)
    name = "model_based" + (f"_{args.tag}" if args.tag else "")
    res: dict[str, Any] = {
        "definition": "simple_spread N=3; return summed over agents, deterministic policy; " + EPISODE_SET,
        "steps": args.steps,
        "seeds": args.seeds,
        "model_based_sets": sets,
        "model_free": [],
        "model_based": [],
    }
    jobs = [(arm, s) for s in args.seeds for arm in ("model_based", "model_free")]
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        budget = {"model_based": args.steps // 2, "model_free": args.steps}
        futures = [pool.submit(train, arm, budget[arm], s, sets, args.eval_every) for arm, s in jobs]
        for future in concurrent.futures.as_completed(futures):
            r = future.result()
            res[r["arm"]] = sorted([*res[r["arm"]], r], key=lambda x: x["seed"])
            print(f"{r['arm']} seed {r['seed']}: {r['final_return']:.2f} at {r['env_steps']}", flush=True)
    res["summary"] = summarize(res)
    print(json.dumps(res["summary"], indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=1))
    plot(res, RESULTS / f"{name}.png")


if __name__ == "__main__":
    main()
