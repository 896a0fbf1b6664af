"""The one driver loop: SFT every role, then the recipe's phases of
rollout -> verify -> credit -> advantages -> update, with metrics, checkpoints and evaluation.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from teamrl.algorithms import grpo_loss, role_relative_advantages, team_relative_advantages
from teamrl.config import Config, dump_config, load_config
from teamrl.engine.engine import Engine
from teamrl.policies.hf import HFPolicy
from teamrl.policies.sft import SFTSettings
from teamrl.protocol import Episode, Turn
from teamrl.recipes import Phase, phases_for
from teamrl.rewards.credit import assign_hybrid_rewards, team_reward
from teamrl.tasks.programming import ProgrammingTask
from teamrl.trainer.build import build_policies, build_sandbox, build_suite, build_team, demonstrations
from teamrl.trainer.run_dir import JsonlLog, atomic_write_dir, atomic_write_text, recover_dir, write_jsonl
from teamrl.workflows.pipeline import pipeline

log = logging.getLogger("teamrl")


class FrozenParametersChanged(RuntimeError):
    """A role outside the current phase changed: the recipe's freeze was violated."""


@dataclass
class TrainerState:
    """What a resumed run needs to continue where it stopped."""

    sft_done: bool = False
    phase: int = 0  # index of the phase in progress
    phase_iteration: int = 0  # iterations of that phase already done
    step: int = 0  # RL iterations done in total
    evals: list[dict[str, Any]] = field(default_factory=list)


def _ref(role: str) -> str:
    return f"ref_{role}"


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.progress = cfg.run.progress
        torch.set_num_threads(cfg.run.threads)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = JsonlLog(self.run_dir / "metrics.jsonl")
        self.state = TrainerState()
        if resume:
            self._load_state()
        else:
            atomic_write_text(self.run_dir / "config.yaml", dump_config(cfg))
        self.suite = build_suite(cfg)
        self.sandbox = build_sandbox(cfg)
        self.policies = build_policies(cfg, progress=self.progress)
        self.engine = Engine(self.policies, max_concurrency=cfg.run.max_concurrency)  # type: ignore[arg-type]
        self.team = build_team(cfg, self.engine, cfg.algorithm.temperature)
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self._tb = None
        if resume:
            self._load_checkpoint()

    # -- helpers ------------------------------------------------------------------------------
    def policy_of(self, role: str) -> HFPolicy:
        return self.policies[self.cfg.workflow.roles[role].policy]

    @property
    def tb(self):  # noqa: ANN201 - created lazily: TensorBoard import is slow
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=self.state.step or None)
        return self._tb

    def log_metrics(self, record: dict[str, Any]) -> None:
        self.metrics.append(record)
        step = int(record.get("step", self.state.step))
        for key, value in record.items():
            if isinstance(value, int | float) and key != "step":
                self.tb.add_scalar(key, value, step)
        self.tb.flush()

    def _optimizer(self, role: str) -> torch.optim.Optimizer:
        if role not in self.optimizers:
            params = self.policy_of(role).adapter_parameters(role)
            self.optimizers[role] = torch.optim.AdamW(params, lr=self.cfg.algorithm.lr, weight_decay=0.0)
        return self.optimizers[role]

    # -- rollout --------------------------------------------------------------------------------
    def rollout(self, tasks: list[ProgrammingTask], group_size: int) -> list[Episode]:
        """Play ``group_size`` episodes of every task concurrently, verify them and assign credit."""
        wf = self.cfg.workflow

        def factory(task: ProgrammingTask, g: int):
            return lambda: pipeline(self.team, task, wf, self.sandbox, group=g)

        episodes = self.engine.run([factory(t, g) for t in tasks for g in range(group_size)])
        for ep in episodes:
            assign_hybrid_rewards(ep, wf.roles, self.cfg.reward.alpha, self.cfg.reward.format_penalty)
        return episodes

    def evaluate(self, label: str, save_episodes: bool = False) -> dict[str, Any]:
        tasks = self.suite.fixed_set("heldout", self.cfg.tasks.heldout_size)
        torch.manual_seed(self.cfg.run.seed + 12345)  # same sampling noise for every evaluation
        for policy in self.policies.values():
            policy.model.eval()
        episodes = self.rollout(tasks, 1)
        result = {"label": label, "step": self.state.step, **summarize(episodes, prefix="eval/")}
        if save_episodes:
            write_jsonl(self.run_dir / "episodes" / f"eval_{label}.jsonl", (e.model_dump() for e in episodes))
        return result

    # -- learning -------------------------------------------------------------------------------
    def advantages(self, episodes: list[Episode], roles: tuple[str, ...]) -> dict[str, torch.Tensor]:
        groups = [e.task_id for e in episodes]
        a = self.cfg.algorithm
        if a.name == "mgrpo":
            team = team_relative_advantages(torch.tensor([team_reward(e) for e in episodes]), groups, scale=a.scale)
            return {r: team for r in roles}
        rewards = {r: torch.tensor([e.rewards.get(r, 0.0) for e in episodes]) for r in roles}
        return role_relative_advantages(rewards, groups, scale=a.scale)

    def update(self, episodes: list[Episode], roles: tuple[str, ...]) -> dict[str, float]:
        """One GRPO / M-GRPO update of each role in ``roles`` on the turns it took in ``episodes``."""
        a = self.cfg.algorithm
        adv = self.advantages(episodes, roles)
        stats: dict[str, float] = {}
        for role in roles:
            policy = self.policy_of(role)
            items: list[tuple[Turn, float]] = [
                (t, float(adv[role][i]))
                for i, ep in enumerate(episodes)
                for t in ep.turns
                if t.role == role and t.completion_ids and abs(float(adv[role][i])) > 1e-8
            ]
            if not items:  # every group had equal rewards: nothing to learn from this batch
                stats[f"train/{role}/skipped"] = 1.0
                continue
            policy.set_trainable([role])
            policy.model.train()
            opt = self._optimizer(role)
            total_tokens = float(sum(len(t.completion_ids) for t, _ in items))
            chunks = [items[i : i + a.micro_batch] for i in range(0, len(items), a.micro_batch)]
            refs = [self._ref_logprobs(policy, role, chunk) for chunk in chunks] if a.kl_coef > 0 else None
            agg: dict[str, float] = {}
            for _ in range(a.ppo_epochs):
                opt.zero_grad(set_to_none=True)
                for c, chunk in enumerate(chunks):
                    logp, mask = policy.token_logprobs(
                        role, [t.prompt_ids for t, _ in chunk], [t.completion_ids for t, _ in chunk], a.temperature
                    )
                    old = _pad([t.logprobs for t, _ in chunk], logp.shape[1])
                    out = grpo_loss(
                        logp,
                        old,
                        torch.tensor([x for _, x in chunk]),
                        mask,
                        ref_logp=refs[c] if refs else None,
                        clip_low=a.clip_low,
                        clip_high=a.clip_high,
                        kl_coef=a.kl_coef,
                        num_tokens=total_tokens,
                    )
                    out.loss.backward()
                    weight = out.stats["num_tokens"] / total_tokens / a.ppo_epochs
                    for k, v in out.stats.items():
                        if k != "num_tokens":
                            agg[k] = agg.get(k, 0.0) + v * weight
                grad_norm = torch.nn.utils.clip_grad_norm_(policy.adapter_parameters(role), a.max_grad_norm)
                opt.step()
                agg["grad_norm"] = agg.get("grad_norm", 0.0) + float(grad_norm) / a.ppo_epochs
            policy.set_trainable([])
            policy.model.eval()
            stats.update({f"train/{role}/{k}": v for k, v in agg.items()})
            stats[f"train/{role}/turns"] = float(len(items))
        return stats

    @torch.no_grad()
    def _ref_logprobs(self, policy: HFPolicy, role: str, chunk: list[tuple[Turn, float]]) -> torch.Tensor:
        logp, _ = policy.token_logprobs(
            _ref(role), [t.prompt_ids for t, _ in chunk], [t.completion_ids for t, _ in chunk], self.cfg.algorithm.temperature
        )
        return logp

    # -- SFT ------------------------------------------------------------------------------------
    def sft_roles(self) -> dict[str, float]:
        """Step 1 of freeze-rotate: SFT every role's adapter on its demonstrations."""
        s = self.cfg.recipe.sft
        out: dict[str, float] = {}
        if s.enabled:
            pairs = demonstrations(self.cfg, s.demo_episodes, seed=self.cfg.run.seed + 104729)
            settings = SFTSettings(epochs=s.epochs, batch_size=s.batch_size, lr=s.lr, seed=self.cfg.run.seed)
            for role in self.cfg.workflow.order:
                if not self.cfg.workflow.roles[role].adapter:
                    continue
                result = self.policy_of(role).sft(role, pairs[role], settings, progress=self.progress)
                out[f"sft/{role}/loss"] = float(result.get("final_loss", result.get("loss", 0.0)))
        for role in self.cfg.workflow.order:
            if self.cfg.workflow.roles[role].adapter:
                self.policy_of(role).copy_adapter(role, _ref(role))
        return out

    # -- frozen check -----------------------------------------------------------------------------
    def fingerprints(self) -> dict[str, str]:
        fp = {f"base:{name}": p.fingerprint(None) for name, p in self.policies.items()}
        for role in self.cfg.workflow.order:
            if self.cfg.workflow.roles[role].adapter:
                fp[role] = self.policy_of(role).fingerprint(role)
        return fp

    def check_frozen(self, before: dict[str, str], phase: Phase) -> None:
        after = self.fingerprints()
        changed = [k for k in before if k not in phase.roles and before[k] != after[k]]
        if changed:
            raise FrozenParametersChanged(f"phase {phase.name} changed frozen parameters of {changed}")

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        def fill(tmp: Path) -> None:
            for role in self.cfg.workflow.order:
                if self.cfg.workflow.roles[role].adapter:
                    pol = self.policy_of(role)
                    pol.save_adapter(role, tmp / "adapters" / role)
                    if self.state.sft_done:
                        pol.save_adapter(_ref(role), tmp / "adapters" / _ref(role))
            torch.save({r: o.state_dict() for r, o in self.optimizers.items()}, tmp / "optimizers.pt")
            (tmp / "state.json").write_text(json.dumps(self.state.__dict__))

        atomic_write_dir(self.run_dir / "checkpoint", fill)

    def _load_state(self) -> None:
        recover_dir(self.run_dir / "checkpoint")
        state_file = self.run_dir / "checkpoint" / "state.json"
        if state_file.exists():
            self.state = TrainerState(**json.loads(state_file.read_text()))
        # rows logged after the last checkpoint belong to an iteration that will be replayed
        self.metrics.keep(lambda r: r.get("step", 0) <= self.state.step)

    def _load_checkpoint(self) -> None:
        ckpt = self.run_dir / "checkpoint"
        if not (ckpt / "state.json").exists():
            return
        for role in self.cfg.workflow.order:
            if not self.cfg.workflow.roles[role].adapter:
                continue
            pol = self.policy_of(role)
            pol.load_adapter(role, ckpt / "adapters" / role)
            if (ckpt / "adapters" / _ref(role)).exists():
                if _ref(role) not in pol.adapter_names:
                    pol.copy_adapter(role, _ref(role))
                pol.load_adapter(_ref(role), ckpt / "adapters" / _ref(role))
        saved = torch.load(ckpt / "optimizers.pt", weights_only=False)
        for role, sd in saved.items():
            self._optimizer(role).load_state_dict(sd)

    # -- the driver -------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        cfg, st = self.cfg, self.state
        phases = phases_for(cfg)
        if not st.sft_done:
            sft_stats = self.sft_roles()
            st.sft_done = True
            st.evals.append(self.evaluate("after_sft", save_episodes=True))
            self.log_metrics({"step": 0, **sft_stats, **_numeric(st.evals[-1])})
            self.save_checkpoint()
        rng_base = cfg.run.seed * 1_000_003
        for index in range(st.phase, len(phases)):
            phase = phases[index]
            before = self.fingerprints()
            bar = tqdm(
                total=phase.iterations, initial=st.phase_iteration, desc=f"RL {phase.name}", disable=not self.progress
            )
            while st.phase_iteration < phase.iterations:
                start = time.perf_counter()
                rng = random.Random(rng_base + st.step)
                torch.manual_seed(rng_base + st.step)
                tasks = self.suite.sample("train", cfg.algorithm.tasks_per_iteration, rng)
                tokens0, gen0 = self.engine.stats.generated_tokens, self.engine.stats.generate_s
                episodes = self.rollout(tasks, cfg.algorithm.group_size)
                rollout_s = time.perf_counter() - start
                tokens = self.engine.stats.generated_tokens - tokens0
                stats = self.update(episodes, phase.roles)
                st.step += 1
                st.phase_iteration += 1
                record: dict[str, Any] = {
                    "step": st.step,
                    "phase": phase.name,
                    **summarize(episodes, prefix="rollout/"),
                    **stats,
                    "perf/rollout_tokens_per_s": tokens / max(rollout_s, 1e-9),
                    "perf/generate_s": self.engine.stats.generate_s - gen0,
                    "perf/rollout_s": rollout_s,
                    "perf/iteration_s": time.perf_counter() - start,
                }
                if cfg.run.eval_every and st.step % cfg.run.eval_every == 0:
                    st.evals.append(self.evaluate(f"step{st.step}"))
                    record.update(_numeric(st.evals[-1]))
                self.log_metrics(record)
                write_jsonl(self.run_dir / "episodes" / "last_rollout.jsonl", (e.model_dump() for e in episodes[:16]))
                self.save_checkpoint()
                bar.update(1)
                bar.set_postfix(solved=f"{record['rollout/solved']:.2f}", R=f"{record['rollout/outcome']:.2f}")
            bar.close()
            self.check_frozen(before, phase)
            st.phase += 1
            st.phase_iteration = 0
            if index == len(phases) - 1:
                st.evals.append(self.evaluate("after_rl", save_episodes=True))
            else:
                st.evals.append(self.evaluate(f"after_{phase.name.replace('/', '_')}"))
            self.log_metrics({"step": st.step, **_numeric(st.evals[-1])})
            self.save_checkpoint()
        if self._tb is not None:
            self._tb.close()
        summary = {"run_dir": str(self.run_dir), "evals": st.evals}
        atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        return summary


def summarize(episodes: list[Episode], prefix: str) -> dict[str, float]:
    """Team success, outcome and per-role reward / process / format-error means."""
    n = max(len(episodes), 1)
    out = {
        f"{prefix}solved": sum(bool(e.verifier.get("solved")) for e in episodes) / n,
        f"{prefix}outcome": sum(e.outcome for e in episodes) / n,
        f"{prefix}tokens_per_episode": sum(e.num_generated_tokens for e in episodes) / n,
    }
    roles = dict.fromkeys(r for e in episodes for r in e.rewards)
    for role in roles:
        eps = [e for e in episodes if role in e.rewards]
        out[f"{prefix}reward/{role}"] = sum(e.rewards[role] for e in eps) / len(eps)
        out[f"{prefix}process/{role}"] = sum(e.process.get(role, 0.0) for e in eps) / len(eps)
        turns = [t for e in eps for t in e.turns_of(role)]
        out[f"{prefix}format_error/{role}"] = sum(t.error is not None for t in turns) / max(len(turns), 1)
    return out


def _numeric(record: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in record.items() if isinstance(v, int | float) and k != "step"}


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row[:width])
    return out


def resume_config(run_dir: Path) -> Config:
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml); nothing to resume")
    return load_config(path)
