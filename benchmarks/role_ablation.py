"""Does each role earn its tokens? The team against itself without one role at a time, from the same base
and at equal RL tokens, greedy and sampled, over seeds (non-negotiable 7; issue 18).

For every seed: train the team (``ROLE_ABLATION_TEAM``, by default examples/test_driven.yaml), read how many
tokens its RL rollouts generated, then train, for each ablated role, the same config with that role taken
out of ``workflow.order`` (and of ``recipe.roles`` / ``recipe.iterations_per_role`` where the config names
it), from the team's base model, with the same seed and ``recipe.token_budget`` set to the team's count (the
recipe repeated until the budget stops it: a team with fewer roles does more RL on the others). Every
finished run is then evaluated greedily with ``--per-role`` (benchmarks/greedy_eval.py, ``GREEDY_N``
held-out tasks). Prints held-out success after SFT and after RL per seed (sampled: the runs' own
evaluations; greedy), the team minus each ablation after RL, and per role whether it earns its tokens: the
team ahead of the team without it after RL on every seed, greedy and sampled. Writes
``<results-dir>/role_ablation.json`` and ``role_ablation.png``.

    .venv/bin/python benchmarks/role_ablation.py [--seeds 0 1 2] [--jobs 2] [--set key=value ...]
        [--collect BATCH_DIR]

``ROLE_ABLATION_ROLES=planner,tester`` picks the roles (default: every role of ``workflow.order`` whose
removal leaves a valid config); ``ROLE_ABLATION_TEAM_RUNS=DIR`` reuses the finished team runs
``DIR/team_s<seed>`` of an earlier batch (of this script or of benchmarks/team_value.py) instead of training
the team again; a run whose saved config differs from the team's config with ``--set`` is refused. Runs go to
a fresh ``<out-dir>/role_ablation-<timestamp>-<pid>/`` (``team_s<seed>``, ``without_<role>_s<seed>``).
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import learning_gain as lg  # noqa: E402  (job runner, run results, tables, figure)

TEAM = os.environ.get("ROLE_ABLATION_TEAM", "examples/test_driven.yaml")
GREEDY_N = int(os.environ.get("ROLE_ABLATION_GREEDY_N", "200"))
# the ablated team repeats its recipe until the team's token budget stops it; these only bound a runaway run
REPEAT = [f"recipe.iterations={lg.BASELINE_MAX_ITERATIONS}", "recipe.rounds=50"]


class AblationError(ValueError):
    """A role that cannot be taken out of the team's config (the message says why)."""


def ablated_overrides(team_config: str | Path, sets: list[str], role: str) -> list[str]:
    """``--set`` overrides that take ``role`` out of the team: out of ``workflow.order``, and out of
    ``recipe.roles`` and ``recipe.iterations_per_role`` where the config names it. Raises
    :class:`AblationError` when the role is not in the team or the config without it is invalid."""
    from teamrl.config import ConfigError, load_config

    cfg = load_config(REPO / team_config, sets, check_options=False)
    order = getattr(cfg.workflow, "order", None)
    if not isinstance(order, list):
        raise AblationError(f"workflow {cfg.workflow.name!r} has no 'order' list of roles to take one out of")
    if role not in order:
        raise AblationError(f"role {role!r} is not in the team's workflow.order {order}")
    out = [f"workflow.order={_flow([r for r in order if r != role])}"]
    if cfg.recipe.roles is not None and role in cfg.recipe.roles:
        out.append(f"recipe.roles={_flow([r for r in cfg.recipe.roles if r != role])}")
    per_role = cfg.recipe.iterations_per_role
    if isinstance(per_role, dict) and role in per_role:
        out.append(f"recipe.iterations_per_role={_flow({r: n for r, n in per_role.items() if r != role})}")
    try:
        load_config(REPO / team_config, [*sets, *out], check_options=False)
    except ConfigError as exc:
        raise AblationError(f"the team without {role!r} is not a valid config: {exc}") from exc
    return out


def _flow(value: Any) -> str:
    """A list or mapping as one line of YAML (``[a, b]``, ``{a: 1}``), as ``--set`` reads it."""
    return yaml.safe_dump(value, default_flow_style=True).strip()


def ablated_roles(team_config: str | Path, sets: list[str]) -> dict[str, list[str]]:
    """Each role to ablate with its :func:`ablated_overrides`: ``ROLE_ABLATION_ROLES`` (comma-separated;
    one that cannot come out is an error before anything is trained), or every role of the team whose
    removal leaves a valid config."""
    from teamrl.config import load_config

    given = [r.strip() for r in os.environ.get("ROLE_ABLATION_ROLES", "").split(",") if r.strip()]
    if given:
        return {role: ablated_overrides(team_config, sets, role) for role in given}
    order = getattr(load_config(REPO / team_config, sets, check_options=False).workflow, "order", None) or []
    roles = {}
    for role in order:
        try:
            roles[role] = ablated_overrides(team_config, sets, role)
        except AblationError as exc:
            print(f"role_ablation: not ablated: {exc}", file=sys.stderr)
    return roles


def _ablation_argv(
    run_dir: Path, seed: int, sets: list[str], team_dir: Path, without: list[str]
) -> list[str]:
    """The team with the ``without`` overrides (one role out), from the team's base, until it generated the
    team run's RL tokens."""
    tokens = lg.rl_token_counts(team_dir)[0]
    budget = [f"recipe.token_budget={tokens}", *REPEAT] if tokens else ["recipe.roles=[]"]
    same_base = ["policies.default.kind=hf", f"policies.default.path={lg._team_base_path(sets, TEAM)}"]
    return lg._train_argv(TEAM, run_dir, seed, sets, lg.COMMON, [*without, *budget, *same_base])


def _differences(old: Any, new: Any, path: str) -> list[str]:
    """Dotted paths whose values differ, over the keys both have (an option added since a run was trained is
    not a difference)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d for k in sorted(old.keys() & new.keys()) for d in _differences(old[k], new[k], f"{path}.{k}")
        ]
    return [] if old == new else [path]


def check_reused(run_dir: Path, sets: list[str]) -> None:
    """Refuse a reused team run whose saved config differs from the team's config with ``sets`` (the ``run``
    section aside): its ablations would be compared with another team."""
    from teamrl.config import load_config

    saved = (
        yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").exists() else {}
    )
    saved = saved if isinstance(saved, dict) else {}  # an empty or broken file is no config either
    wanted = load_config(REPO / TEAM, sets, check_options=False).model_dump(mode="json")
    diffs = [d for k, v in wanted.items() if k != "run" and k in saved for d in _differences(saved[k], v, k)]
    if not saved or diffs:
        what = f"differs in {', '.join(diffs[:6])}" if diffs else "has no readable config.yaml"
        raise AblationError(f"{run_dir} was not trained as {TEAM} with these --set: its config {what}")


def plan_jobs(seeds: list[int], sets: list[str], batch_dir: Path) -> list[lg.Job]:
    """The base build, then seed by seed: the team run (or a link to a reused one), each ablation after it,
    a greedy evaluation of every run after it."""
    roles = ablated_roles(TEAM, sets)
    if not roles:
        raise AblationError(f"no role of {TEAM} can be taken out")
    reuse = os.environ.get("ROLE_ABLATION_TEAM_RUNS")
    jobs = [lg.Job("build", partial(lg._build_argv, TEAM, sets), batch_dir / "build.log")]
    for seed in seeds:
        team = batch_dir / f"team_s{seed}"
        if reuse:
            found = Path(reuse).resolve() / f"team_s{seed}"
            if not (found / "summary.json").exists():
                raise AblationError(f"{found} is not a finished team run (no summary.json)")
            check_reused(found, sets)
            batch_dir.mkdir(parents=True, exist_ok=True)
            team.symlink_to(found, target_is_directory=True)
            trained: tuple[str, ...] = ()  # the team run is there already
        else:
            argv = partial(lg._train_argv, TEAM, team, seed, sets, lg.COMMON, [])
            jobs.append(lg.Job(team.name, argv, team.with_suffix(".log"), ("build",), team))
            trained = (team.name,)
        evaluate = [] if (team / lg.GREEDY_FILE).exists() else [(team, trained)]
        for role, without in roles.items():
            run = batch_dir / f"without_{role}_s{seed}"
            argv = partial(_ablation_argv, run, seed, sets, team, without)
            jobs.append(lg.Job(run.name, argv, run.with_suffix(".log"), trained or ("build",), run))
            evaluate.append((run, (run.name,)))
        for run, deps in evaluate:
            log = batch_dir / f"greedy_{run.name}.log"
            jobs.append(
                lg.Job(f"greedy_{run.name}", partial(lg._greedy_argv, run, GREEDY_N, True), log, deps)
            )
    return jobs


def _arms(batch_dir: Path, seed: int) -> list[str]:
    return ["team", *sorted(d.name.removesuffix(f"_s{seed}") for d in batch_dir.glob(f"without_*_s{seed}"))]


def seed_result(batch_dir: Path, seed: int, arms: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"seed": seed}
    for arm in arms:
        run = batch_dir / f"{arm}_s{seed}"
        out[arm] = lg.run_result(run)
        if arm != "team":
            out[arm]["token_budget"] = out["team"]["rl_tokens"]
            out[arm]["budget_reached"] = out[arm]["rl_tokens"] >= out["team"]["rl_tokens"]
    return out


def collect(batch_dir: Path) -> list[dict[str, Any]]:
    """Every seed of ``batch_dir`` whose team run and ablations all finished, over the ablations every such
    seed has."""
    seeds = sorted(int(d.name.removeprefix("team_s")) for d in batch_dir.glob("team_s*[0-9]") if d.is_dir())
    done = {}
    for s in seeds:
        arms = _arms(batch_dir, s)
        if len(arms) > 1 and all((batch_dir / f"{a}_s{s}" / "summary.json").exists() for a in arms):
            done[s] = arms
    if not done:
        return []
    common = [a for a in next(iter(done.values())) if all(a in arms for arms in done.values())]
    return [seed_result(batch_dir, s, common) for s in done]


def arms_of(per_seed: list[dict[str, Any]]) -> list[str]:
    return [k for k in per_seed[0] if k != "seed"]


def label(arm: str) -> str:
    return "team" if arm == "team" else "without " + arm.removeprefix("without_")


def has_greedy(per_seed: list[dict[str, Any]]) -> bool:
    return all("greedy_rl_solved" in s[a] for s in per_seed for a in arms_of(per_seed))


def _columns(per_seed: list[dict[str, Any]], prefix: str) -> list[tuple[str, str, str, str]]:
    return [
        (a, f"{prefix}{f}", f"{a.removeprefix('without_')} {h}", ".3f")
        for a in arms_of(per_seed)
        for f, h in (("sft_solved", "SFT"), ("rl_solved", "RL"))
    ]


def _prefixes(per_seed: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [("", "sampled"), ("greedy_", "greedy")] if has_greedy(per_seed) else [("", "sampled")]


def aggregate(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for prefix, _ in _prefixes(per_seed):
        for a, f, _, _ in _columns(per_seed, prefix):
            out[f"{a}.{f}"] = lg.mean_std([float(s[a][f]) for s in per_seed])
        for a in arms_of(per_seed)[1:]:
            for stage in ("sft", "rl"):
                key = f"{prefix}{stage}_solved"
                out[f"team_minus_{a}.{key}"] = lg.mean_std([s["team"][key] - s[a][key] for s in per_seed])
    for a in arms_of(per_seed):
        out[f"{a}.rl_tokens"] = lg.mean_std([float(s[a]["rl_tokens"]) for s in per_seed])
    return out


def verdicts(per_seed: list[dict[str, Any]]) -> dict[str, bool]:
    """Per ablated role: the team is ahead of the team without it after RL on every seed, greedy (when
    measured) and sampled."""
    out = {}
    for a in arms_of(per_seed)[1:]:
        out[f"{a.removeprefix('without_')}_earns_its_tokens"] = all(
            s["team"][f"{p}rl_solved"] > s[a][f"{p}rl_solved"]
            for s in per_seed
            for p, _ in _prefixes(per_seed)
        )
    return out


def format_report(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]]) -> str:
    parts = [
        lg.format_table(f"held-out success, {name}", _columns(per_seed, prefix), per_seed, agg)
        for prefix, name in _prefixes(per_seed)
    ]
    lines = []
    for prefix, name in _prefixes(per_seed):
        for a in arms_of(per_seed)[1:]:
            sft, rl = agg[f"team_minus_{a}.{prefix}sft_solved"], agg[f"team_minus_{a}.{prefix}rl_solved"]
            lines.append(
                f"team minus the team {label(a)}, {name}: after SFT {lg._pm(sft)}, after RL {lg._pm(rl)}"
            )
    for s in per_seed:
        for role, c in s["team"].get("per_role", {}).items():
            lines.append(
                f"seed {s['seed']} {role}: its RL turns change {c['outcome_changed']} greedy outcomes"
            )
    tokens = ", ".join(f"{label(a)} {agg[f'{a}.rl_tokens']['mean']:,.0f}" for a in arms_of(per_seed))
    lines.append(f"RL rollout tokens (mean over seeds): {tokens}")
    missed = [(s["seed"], a) for s in per_seed for a in arms_of(per_seed)[1:] if not s[a]["budget_reached"]]
    if missed:
        lines.append(f"warning: {missed}: an ablation stopped before spending the team's RL tokens")
    for k, v in verdicts(per_seed).items():
        lines.append(f"{k}: {'yes' if v else 'no'}")
    return "\n\n".join(parts) + "\n\n" + "\n".join(lines)


def plot(per_seed: list[dict[str, Any]], agg: dict[str, dict[str, float | None]], path: Path) -> None:
    arms = arms_of(per_seed)
    lg.panels(per_seed, agg, arms, {a: label(a) for a in arms}, has_greedy(per_seed), path, 10)


def report(per_seed: list[dict[str, Any]], result: dict[str, Any], results_dir: Path) -> None:
    agg = aggregate(per_seed)
    print(format_report(per_seed, agg))
    result = {
        **result,
        "team_config": TEAM,
        "ablated": [a.removeprefix("without_") for a in arms_of(per_seed)[1:]],
        "greedy_tasks": GREEDY_N,
        "per_seed": per_seed,
        "aggregate": agg,
        "verdicts": verdicts(per_seed),
    }
    lg.write_results(results_dir, "role_ablation", result, partial(plot, per_seed, agg))


def main(argv: list[str] | None = None) -> int:
    try:
        return lg.seeds_main(
            "role_ablation",
            __doc__,
            "config override for the team and its ablations alike",
            plan_jobs,
            collect,
            report,
            argv,
        )
    except AblationError as exc:
        print(f"role_ablation: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
