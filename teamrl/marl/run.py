"""What every MARL algorithm gets from the driver: an env factory, logging, checkpoints, a progress bar.

An algorithm module exposes ``Config`` (a pydantic model, ``extra="forbid"``, with ``total_env_steps``
and ``seed`` among its fields) and ``train(cfg, run: RunContext) -> dict``. It builds its envs with
``run.make_env(num_envs, seed)``, calls ``run.log(step, {...})`` with ``step`` = environment steps so
far (one step of one copy = one env step; agent-steps = env steps x number of agents), calls
``run.progress(step)`` to move the bar, and ``run.save_checkpoint(obj)`` for anything ``torch.save``
can write. Episode returns are logged as ``return/mean`` (summed over agents, undiscounted, whole
episodes), ``return/<agent>`` and ``episode_length``; the definition is written to the run's
``metrics_definition.json`` so published numbers can be compared on the same scale.

After each update an algorithm calls ``run.after_update(env_steps, checkpoint_every, make_checkpoint)``:
the bar moves, a checkpoint is saved every ``checkpoint_every`` env steps, and, with an ``evaluator``, the
deterministic policy is evaluated every ``eval_every`` env steps on the same fixed episodes (logged as
``eval/return/mean``, ``eval/return/std``, ``eval/episode_length``: the evaluation curve). An evaluation runs
under ``torch.random.fork_rng``, so it changes nothing in training.

A resumed run (``teamrl marl train --resume``) passes the checkpoint it resumes from as ``resume``; a module
that can resume (``RESUMABLE = True``) restores its state from it. The log rows written after that
checkpoint (work the resumed run does again) move to ``metrics.discarded.jsonl``, and TensorBoard purges
its events after that step.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from teamrl.atomic import JsonlLog, atomic_write_text, temp_file_beside

RETURN_DEFINITION = (
    "return/mean: undiscounted episode return summed over all agents, averaged over the episodes that "
    "ended since the previous log row; episode_length: steps per episode; env steps count one step of "
    "one environment copy, agent-steps = env steps x number of agents"
)


class RunContext:
    def __init__(
        self,
        run_dir: Path | None,
        make_env: Callable[[int, int], Any],
        total_steps: int,
        show_progress: bool = True,
        tensorboard: bool = True,
        extra_definition: str = "",
        evaluator: Callable[[dict[str, Any]], dict[str, float]] | None = None,
        eval_every: int = 0,
        resume: dict[str, Any] | None = None,
        init: dict[str, Any] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.make_env = make_env  # (num_envs, seed) -> VecMultiAgentEnv
        self.total_steps = total_steps
        self.history: list[dict[str, Any]] = []
        self.evaluator = evaluator  # checkpoint -> evaluate()'s result
        self.eval_every = eval_every  # env steps between evaluations (0: none during training)
        self.resume = resume  # the checkpoint a resumed run starts from
        self.init = init  # weights a new run starts from (fine-tuning): actors, and critics where they fit
        start = int(resume.get("env_steps", 0)) if resume is not None else 0
        self._last_checkpoint = self._last_eval = start
        self._log = self._tb = self._bar = None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._log = JsonlLog(self.run_dir / "metrics.jsonl")
            if resume is not None:
                self.history = self._keep_rows_up_to(start)
            definition = {"returns": RETURN_DEFINITION, "env": extra_definition}
            atomic_write_text(self.run_dir / "metrics_definition.json", json.dumps(definition, indent=1))
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                purge = {"purge_step": start + 1} if resume is not None else {}
                self._tb = SummaryWriter(str(self.run_dir / "tb"), **purge)
        if show_progress:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total_steps, initial=start, unit="step", dynamic_ncols=True, mininterval=1.0
            )

    def _keep_rows_up_to(self, step: int) -> list[dict[str, Any]]:
        """Resuming from the checkpoint at ``step``: keep the log rows up to it, move the later ones (and
        unreadable lines) to ``metrics.discarded.jsonl``; the kept rows."""
        assert self._log is not None and self.run_dir is not None
        rows = self._log.lines()
        kept: list[dict[str, Any]] = []
        dropped: list[dict[str, Any]] = []
        for r in rows:
            if r is not None and int(r.get("step", 0)) <= step:
                kept.append(r)
            else:
                dropped.append(r if r is not None else {"unreadable": True})
        if dropped:
            discarded = JsonlLog(self.run_dir / "metrics.discarded.jsonl")
            for row in dropped:
                discarded.append({**row, "discarded_on_resume_from": step})
            atomic_write_text(self._log.path, "".join(json.dumps(r) + "\n" for r in kept))
        return kept

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": int(step), **{k: float(v) for k, v in metrics.items()}}
        self.history.append(row)
        if self._log is not None:
            self._log.append(row)
        if self._tb is not None:
            for key, value in metrics.items():
                if math.isfinite(float(value)):
                    self._tb.add_scalar(key, float(value), int(step))
        if self._bar is not None and "return/mean" in row:
            self._bar.set_postfix(ret=f"{row['return/mean']:.2f}", refresh=False)

    def progress(self, step: int) -> None:
        if self._bar is not None:
            self._bar.update(max(0, int(step) - self._bar.n))

    def after_update(
        self, env_steps: int, checkpoint_every: int, make_checkpoint: Callable[[], dict[str, Any]]
    ) -> None:
        """Move the bar; save a checkpoint when ``checkpoint_every`` env steps have passed since the last
        one, and evaluate when ``eval_every`` have passed since the last evaluation."""
        self.progress(env_steps)
        checkpoint = None
        if env_steps - self._last_checkpoint >= checkpoint_every:
            checkpoint = make_checkpoint()
            self.save_checkpoint(checkpoint)
            self._last_checkpoint = env_steps
        if self.evaluator is not None and self.eval_every and env_steps - self._last_eval >= self.eval_every:
            self.evaluate(env_steps, checkpoint if checkpoint is not None else make_checkpoint())

    def evaluate(self, env_steps: int, checkpoint: dict[str, Any]) -> None:
        """One point of the evaluation curve (nothing without an evaluator); training's RNG untouched."""
        if self.evaluator is None:
            return
        import torch

        with torch.random.fork_rng():
            result = self.evaluator(checkpoint)
        keys = ("return/mean", "return/std", "episode_length")
        self.log(env_steps, {f"eval/{k}": result[k] for k in keys if k in result})
        self._last_eval = env_steps

    def save_checkpoint(self, obj: Any, name: str = "checkpoint.pt") -> Path | None:
        """``torch.save`` to a temp file, then rename: a killed run keeps the previous checkpoint."""
        if self.run_dir is None:
            return None
        path = self.run_dir / name
        save_torch(obj, path)
        return path

    def finish(self, env: Any, final: dict[str, Any], env_steps: int, start: float) -> dict[str, Any]:
        """Close ``env``, save the ``final`` checkpoint; the summary every algorithm's ``train`` returns."""
        n_agents = len(env.agents)
        env.close()
        elapsed = time.perf_counter() - start
        self.save_checkpoint(final)
        if self.evaluator is not None and self.eval_every and self._last_eval != env_steps:
            self.evaluate(env_steps, final)  # the curve's last point is the final policy
        returns = [r["return/mean"] for r in self.history if "return/mean" in r]
        return {
            "env_steps": env_steps,
            "wall_s": elapsed,
            "agent_steps_per_s": env_steps * n_agents / elapsed,
            "train_return/mean": returns[-1] if returns else float("nan"),
            "checkpoint": final,
        }

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self.run_dir is not None and self.history:
            plot_curve(self.history, self.run_dir / "learning_curve.png")
            plot_env_curves(self.history, self.run_dir / "env_curves.png")


def resume_seed(seed: int, env_steps: int) -> int:
    """The env seed of a run resumed at ``env_steps``: new episodes, not a replay of the first ones."""
    return (seed * 1_000_003 + env_steps) % 2**31


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` to a temp file beside ``path``, then rename: a crash keeps the previous file."""
    import torch

    fd, tmp = temp_file_beside(path)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def episode_metrics(
    returns: list[np.ndarray], lengths: list[np.ndarray], agents: list[str]
) -> dict[str, float]:
    """Return metrics of the episodes that ended since the last log row (``returns``: ``[n, agents]``
    arrays, ``lengths``: ``[n]``), which it then forgets; empty when none ended."""
    if not returns:
        return {}
    rets, lens = np.concatenate(returns), np.concatenate(lengths)
    out = {"return/mean": float(rets.sum(1).mean())}
    out.update({f"return/{a}": float(rets[:, j].mean()) for j, a in enumerate(agents)})
    out["episode_length"] = float(lens.mean())
    returns.clear()
    lengths.clear()
    return out


def info_metrics(ended: list[dict[str, float]]) -> dict[str, float]:
    """``env/<key>``: the mean over the episodes that ended since the last log row of what the env reported
    about each (``VecStep.info["episode"]``), which it then forgets."""
    keys = sorted({k for e in ended for k in e})
    out = {f"env/{k}": float(np.mean([e[k] for e in ended if k in e])) for k in keys}
    ended.clear()
    return out


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, save ``fig`` as PNG to a temp file beside ``path``, rename it there (atomic), close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fd, tmp = temp_file_beside(path, ".png")
    os.close(fd)
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def plot_curve(history: list[dict[str, Any]], path: Path, key: str = "return/mean") -> None:
    rows = [r for r in history if key in r and math.isfinite(r[key])]
    evals = [r for r in history if f"eval/{key}" in r and math.isfinite(r[f"eval/{key}"])]
    if not rows and not evals:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in rows], [r[key] for r in rows], label="training episodes (sampled)")
    if evals:
        mean = np.array([r[f"eval/{key}"] for r in evals])
        std = np.array([r.get("eval/return/std", 0.0) for r in evals])
        steps = [r["step"] for r in evals]
        ax.plot(steps, mean, "o-", label="evaluation (deterministic, fixed episodes)")
        ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
        ax.legend(fontsize=8)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(key + " (summed over agents)")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_env_curves(history: list[dict[str, Any]], path: Path) -> bool:
    """One small curve per ``env/<key>`` the run logged (what the env reported about its episodes: the
    town's objectives and what emerged); False (nothing drawn) when there is none."""
    keys = sorted({k for r in history for k in r if k.startswith("env/")})
    if not keys:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(keys))
    rows_n = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.2 * cols, 2.4 * rows_n), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        points = [(r["step"], r[key]) for r in history if key in r and math.isfinite(r[key])]
        ax.plot([p[0] for p in points], [p[1] for p in points], lw=1)
        ax.set_title(key.removeprefix("env/").replace("_", " "), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.supxlabel("environment steps", fontsize=8)
    save_figure(fig, path)
    return True
