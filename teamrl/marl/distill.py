"""KD-MARL (issue 21): distil a trained IPPO / MAPPO teacher into small decentralised students, and count
what one action costs each.

:func:`distill` is DAgger-style policy distillation: round 0 plays the teacher's policy and records, at every
state visited, each agent's own observation and the teacher's action distribution there; later rounds let
the student act with probability ``1 - beta_decay ** round`` (so it visits the states its own mistakes lead
to) while the teacher still labels every state; after each round the students (one MLP per teacher group,
``hidden`` wide, on the agent's observation only) fit all the data gathered so far by the KL divergence
from the teacher's distribution. The teacher may be anything :func:`teamrl.marl.ppo.make_actor` rebuilds:
an entity actor, a recurrent one (its state is carried and reset at episode ends), larger networks, a
centralised actor that sees the global state (``centralised_actor``: the KD-MARL setting). The
student is written as a checkpoint of the same algorithm, so ``teamrl marl eval`` evaluates it.

:func:`flops_per_action`: the floating-point operations of one agent's action, counted by torch's
``FlopCounterMode`` on the actor's forward pass (a matrix product of ``[1, a] x [a, b]`` counts ``2ab``;
biases, activations and the sampling are not counted). For an MLP that is :func:`mlp_flops`,
``sum(2 * a * b)`` over its layers (tested equal).

:func:`return_kept`: the share of the teacher's improvement over random play that the student keeps,
``(student - random) / (teacher - random)`` (returns are negative on MPE, so a plain ratio would mislead).

Discrete action spaces only (continuous ones: not yet).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from teamrl.marl.core import VecMultiAgentEnv
from teamrl.marl.ppo_nets import Actor, actor_input, group_masks, group_obs, load_actors, reset_where


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: list[int] = Field(default_factory=lambda: [16], description="the student's hidden layer sizes")
    activation: Literal["relu", "tanh"] = "relu"
    rounds: int = Field(8, ge=1, description="DAgger rounds (round 0: the teacher acts)")
    beta_decay: float = Field(0.5, ge=0, le=1, description="the teacher acts with probability decay**round")
    num_envs: int = Field(64, ge=1)
    steps_per_round: int = Field(50, ge=1, description="steps of every copy per round")
    epochs: int = Field(4, ge=1, description="passes over all the data after each round")
    batch_size: int = Field(1024, ge=1)
    lr: float = Field(3e-3, gt=0)
    seed: int = 0
    threads: int = Field(1, ge=1)
    finetune_env_steps: int = Field(
        0, ge=0, description="then fine-tune the students by PPO for this many env steps (0: no fine-tuning)"
    )
    finetune_lr: float = Field(3e-4, gt=0, description="the fine-tuning's learning rate (annealed to 0)")


def mlp_flops(sizes: list[int]) -> int:
    """FLOPs of one input through an MLP of ``sizes = [in, h1, ..., out]``: ``sum(2 * a * b)``."""
    return sum(2 * a * b for a, b in zip(sizes[:-1], sizes[1:], strict=False))


def flops_per_action(checkpoint: dict[str, Any]) -> float:
    """Mean FLOPs of one agent's action under ``checkpoint``'s actors (see the module)."""
    from torch.utils.flop_counter import FlopCounterMode

    groups, actors = load_actors(checkpoint)
    total = 0.0
    for g, actor in zip(groups, actors, strict=True):
        x = torch.zeros(1, 1, g.in_dim)
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            if actor.recurrent:
                actor.step(x, None)
            else:
                actor.dist(x)
        total += counter.get_total_flops() * g.k
    return total / sum(g.k for g in groups)


def return_kept(student: float, teacher: float, random: float) -> float:
    """``(student - random) / (teacher - random)``: the share of the teacher's gain over random kept."""
    if teacher <= random:  # returns are rewards: higher is better
        raise ValueError("the teacher is no better than random: nothing to keep")
    return (student - random) / (teacher - random)


def _kept(student: float, teacher: float, random: float) -> float | None:
    """:func:`return_kept`, or None where the teacher is no better than random (trained too little)."""
    return return_kept(student, teacher, random) if teacher > random else None


def distill(
    teacher: dict[str, Any],
    make_env: Callable[[int, int], VecMultiAgentEnv],
    cfg: Config,
    progress: Callable[[dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """The student's checkpoint (see the module); ``teacher`` a ppo checkpoint."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    groups, teachers = load_actors(teacher)
    if not all(g.discrete for g in groups):
        raise ValueError(
            "distillation of continuous actions is not supported yet (discrete action spaces only)"
        )
    student_groups = [replace(g, entities=None, state_dim=0) for g in groups]
    students = [Actor(g, cfg.hidden, cfg.activation) for g in student_groups]
    params = [p for s in students for p in s.parameters()]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    data: list[dict[str, list[torch.Tensor]]] = [{"x": [], "mask": [], "probs": []} for _ in groups]
    env = make_env(cfg.num_envs, cfg.seed)
    step = env.reset(seed=cfg.seed)
    hidden: list[torch.Tensor | None] = [None] * len(groups)
    start = time.perf_counter()
    history: list[dict[str, float]] = []
    for round_ in range(cfg.rounds):
        beta = cfg.beta_decay**round_
        for _ in range(cfg.steps_per_round):
            actions: dict[str, np.ndarray] = {}
            teacher_acts = rng.random(env.num_envs) < beta  # per copy: who acts this step
            with torch.no_grad():
                for i, (g, sg) in enumerate(zip(groups, student_groups, strict=True)):
                    x, mask = group_obs(sg, step.obs), group_masks(g, step)  # the student's input
                    hidden[i] = reset_where(hidden[i], step.done) if hidden[i] is not None else None
                    dist, hidden[i] = teachers[i].step(actor_input(g, step.obs, step.state), hidden[i], mask)
                    probs = cast(torch.distributions.Categorical, dist).probs
                    data[i]["x"].append(x.reshape(-1, sg.in_dim))
                    full = torch.ones_like(probs, dtype=torch.bool) if mask is None else mask
                    data[i]["mask"].append(full.reshape(-1, g.n_out))
                    data[i]["probs"].append(probs.reshape(-1, g.n_out))
                    taught = dist.sample()
                    own = students[i].dist(x, mask).sample()
                    chosen = torch.where(torch.from_numpy(teacher_acts)[:, None], taught, own)
                    actions.update({a: chosen[:, j].numpy() for j, a in enumerate(g.agents)})
            step = env.step(actions)
        row = _fit(students, data, optimizer, cfg, rng)
        row.update(round=float(round_), beta=beta, seconds=time.perf_counter() - start)
        history.append(row)
        if progress is not None:
            progress(row)
    env.close()
    student_cfg = {**teacher["config"], "hidden": list(cfg.hidden), "activation": cfg.activation}
    student_cfg.update(entity_actor=False, recurrent=False, centralised_actor=False, shared_encoder=False)
    # the teacher's critic width, so that fine-tuning can start from the teacher's critics
    student_cfg["critic_hidden"] = teacher["config"].get("critic_hidden") or teacher["config"]["hidden"]
    return {
        "algorithm": teacher.get("algorithm", "mappo"),
        "config": student_cfg,
        "agents": list(teacher["agents"]),
        "groups": [asdict(g) for g in student_groups],
        "actors": [s.state_dict() for s in students],
        "env_steps": 0,
        "distilled": {
            "from_env_steps": int(teacher.get("env_steps", 0)),
            "settings": cfg.model_dump(),
            "history": history,
        },
    }


def _fit(
    students: list[Actor],
    data: list[dict[str, list[torch.Tensor]]],
    optimizer: torch.optim.Optimizer,
    cfg: Config,
    rng: np.random.Generator,
) -> dict[str, float]:
    """``epochs`` passes of KL(teacher || student) over all the data; the last pass's loss and the share
    of states where the student's most likely action is the teacher's."""
    tensors = [{k: torch.cat(v) for k, v in d.items()} for d in data]
    last_loss, agree = 0.0, 0.0
    for _ in range(cfg.epochs):
        losses, hits, count = [], 0.0, 0
        for i, t in enumerate(tensors):
            n = len(t["x"])
            order = torch.from_numpy(rng.permutation(n))
            for idx in order.split(cfg.batch_size):
                probs, mask = t["probs"][idx], t["mask"][idx]
                logits = students[i].net(t["x"][idx]).masked_fill(~mask, -1e9)
                logp = torch.log_softmax(logits, -1)
                loss = (probs * (torch.log(probs.clamp_min(1e-12)) - logp)).sum(-1).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()) * len(idx))
                hits += float((logits.argmax(-1) == probs.argmax(-1)).float().sum())
                count += len(idx)
        last_loss, agree = sum(losses) / count, hits / count
    return {"kl": last_loss, "agreement": agree, "states": float(sum(len(t["x"]) for t in tensors))}


def distill_run(
    teacher_dir: str | Path,
    out: str | Path,
    overrides: dict[str, Any] | None = None,
    episodes: int = 50,
    show_progress: bool = True,
) -> dict[str, Any]:
    """``teamrl marl distill``: distil the teacher run's checkpoint into a student run directory (its
    config.yaml, checkpoint.pt, distill.json, eval.json); with ``finetune_env_steps`` the students are then
    fine-tuned by PPO in that directory (a ``teamrl marl train`` run: its critics start from the
    teacher's, fresh where those read the teacher's actor encoder, ``shared_encoder``; the distilled
    checkpoint kept as distilled.pt). Returns teacher, students and random play on
    the same evaluation episodes, their FLOPs per action and the return kept."""
    import yaml
    from pydantic import ValidationError

    from teamrl.atomic import atomic_write_text
    from teamrl.config import ConfigError
    from teamrl.marl.evaluate import evaluate, random_actor
    from teamrl.marl.registry import algorithm
    from teamrl.marl.run import save_torch
    from teamrl.marl.train import EVAL_SEED, _one_line, _run, evaluate_run, make_env_factory, read_run

    out = Path(out)
    resolved, ckpt_path = read_run(teacher_dir)
    if resolved["algorithm"] not in ("ippo", "mappo"):
        raise ConfigError(f"distillation takes an ippo or mappo teacher, not {resolved['algorithm']}")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists and is not empty; pick another --out")
    try:
        cfg = Config(**(overrides or {}))
    except ValidationError as err:
        raise ConfigError(_one_line(err, "distill", Config)) from None
    teacher = torch.load(ckpt_path, weights_only=False)
    make_env = make_env_factory(resolved["env"], resolved["env_kwargs"])
    try:
        student = distill(teacher, make_env, cfg)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    run_cfg = student["config"]
    if cfg.finetune_env_steps:  # the student's run directory is then the fine-tuning's run
        run_cfg = {
            **run_cfg,
            "total_env_steps": cfg.finetune_env_steps,
            "lr": cfg.finetune_lr,
            "seed": cfg.seed,
        }
    student_resolved = {**resolved, "config": run_cfg}
    atomic_write_text(out / "config.yaml", yaml.safe_dump(student_resolved, sort_keys=False))
    save_torch(student, out / "checkpoint.pt")
    module, _ = algorithm(resolved["algorithm"])
    finetune: dict[str, Any] = {}
    if cfg.finetune_env_steps:
        save_torch(student, out / "distilled.pt")
        # a critic on the teacher's actor encoder (shared_encoder) reads features the student has not: fresh
        shared = teacher["config"].get("shared_encoder")
        init = {"actors": student["actors"], "critics": None if shared else teacher.get("critics")}
        start = time.perf_counter()
        result = _run(
            module,
            module.Config(**run_cfg),
            student_resolved,
            out,
            episodes,
            show_progress,
            False,
            None,
            init,
        )
        finetune = {
            "env_steps": cfg.finetune_env_steps,
            "seconds": time.perf_counter() - start,
            "train": result["train"],
        }
    env = make_env(min(episodes, 256), EVAL_SEED)
    try:
        actors = {
            "teacher": module.make_actor(teacher),
            "student": module.make_actor(student),
            "random": random_actor(env, seed=0),
        }
        scores = {
            name: evaluate(actor, env, episodes, seed=EVAL_SEED)["return/mean"]
            for name, actor in actors.items()
        }
    finally:
        env.close()
    if finetune:  # _run evaluated the fine-tuned checkpoint on these same episodes (eval.json)
        scores["finetuned"] = result["eval"]["return/mean"]
    flops = {"teacher": flops_per_action(teacher), "student": flops_per_action(student)}
    summary = {
        "returns": scores,
        "return_kept": _kept(scores["student"], scores["teacher"], scores["random"]),
        "flops_per_action": flops,
        "flops_ratio": flops["teacher"] / flops["student"],
        "episodes": episodes,
        "history": student["distilled"]["history"],
    }
    if finetune:
        kept = _kept(scores["finetuned"], scores["teacher"], scores["random"])
        summary["finetune"] = {**finetune, "return_kept": kept}
    atomic_write_text(out / "distill.json", json.dumps(summary, indent=1))
    if not finetune:
        evaluate_run(out, episodes)
    return summary
