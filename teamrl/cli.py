"""``teamrl`` command line: train, eval, schema, and `marl` (classic multi-agent RL)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from teamrl.config import Config, ConfigError, load_config


def _run_dir(cfg: Config) -> Path:
    name = cfg.run.name or (
        f"{cfg.workflow.name}__{cfg.recipe.name}__{cfg.algorithm.name}__s{cfg.run.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
    )
    return Path(cfg.run.out_dir) / name


def _result_table(summary: dict[str, Any], roles: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="held-out evaluation")
    table.add_column("checkpoint")
    table.add_column("success", justify="right")
    table.add_column("pass fraction", justify="right")
    for role in roles:
        table.add_column(f"r:{role}", justify="right")
    for ev in summary["evals"]:
        if ev["label"] not in ("after_sft", "after_rl", "eval"):
            continue
        cells = [ev["label"], f"{ev['eval/solved']:.3f}", f"{ev['eval/outcome']:.3f}"]
        cells += [f"{ev.get(f'eval/reward/{r}', float('nan')):.3f}" for r in roles]
        table.add_row(*cells)
    console = Console()
    console.print(table)
    console.print(f"run written to [bold]{summary['run_dir']}[/bold]")


def cmd_train(args: argparse.Namespace) -> int:
    from teamrl.trainer.trainer import Trainer, resume_config

    if args.resume:
        if args.config or args.set:
            print("teamrl: --resume reads the run's own config.yaml; drop CONFIG and --set", file=sys.stderr)
            return 2
        run_dir = Path(args.resume)
        cfg = resume_config(run_dir)
    else:
        cfg = load_config(args.config, args.set)
        run_dir = _run_dir(cfg)
        if run_dir.exists() and any(run_dir.iterdir()):
            print(
                f"teamrl: {run_dir} exists; pick another run.name or continue it with --resume {run_dir}",
                file=sys.stderr,
            )
            return 2
    print(f"run directory: {run_dir}")
    trainer = Trainer(cfg, run_dir, resume=bool(args.resume))
    try:
        summary = trainer.fit()
    except KeyboardInterrupt:
        print(f"\ninterrupted; continue with: teamrl train --resume {run_dir}", file=sys.stderr)
        return 130
    _result_table(summary, cfg.workflow.order)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from teamrl.trainer.trainer import Trainer, resume_config

    run_dir = Path(args.run_dir)
    cfg = resume_config(run_dir)
    if args.n:
        cfg.tasks.heldout_size = args.n
    trainer = Trainer(cfg, run_dir, resume=True)
    result = trainer.evaluate("eval", save_episodes=True)
    _result_table({"run_dir": str(run_dir), "evals": [result]}, cfg.workflow.order)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from teamrl.protocol import message_json_schema

    print(message_json_schema())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teamrl", description="Train teams of LLM agents with RL.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a team (SFT, then the recipe's RL phases)")
    p.add_argument("config", nargs="?", help="YAML config (default: the defaults in teamrl/config.py)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run where it left off")
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("eval", help="evaluate a run's latest checkpoint on held-out tasks")
    p.add_argument("run_dir")
    p.add_argument("--n", type=int, default=0, help="number of held-out tasks (default: the run's)")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("schema", help="print the JSON Schema of the messages roles exchange")
    p.set_defaults(func=cmd_schema)
    from teamrl.marl.train import add_parser as add_marl_parser

    add_marl_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"teamrl: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
