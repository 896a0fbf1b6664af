"""Learner throughput: the GRPO update (``teamrl.trainer.learner.Learner``) of one role's LoRA adapter on
synthetic turns of the real shape, so that it can be measured on any model, trained or not (a model
with random weights fails every episode alike, so a real run's update would skip every group).

Each of ``--tasks`` x ``--group`` episodes gets one Coder turn with a random prompt and completion of
the given lengths, the behaviour log-probs the current adapter gives them (so the ratio starts at 1)
and a reward that varies within each group. Prints prompt + completion tokens per second through the
update (forward and backward over ``ppo_epochs`` x ``minibatches`` steps, the reference log-probs for
the KL term included) and peak GPU memory, and writes JSON.

    python benchmarks/learner_throughput.py --config examples/gpu_vllm_team.yaml \\
        --set policies.default.path=MODEL --set policies.default.generation=hf [--updates 3]

``--vary-prompts`` draws each prompt's length between a quarter of ``--prompt-tokens`` and all of it (a
team's prompts: a first version's brief, a revision's brief + code + report). ``--compare-micro-batch-tokens
N`` runs every update twice on the same turns, with ``algorithm.micro_batch_tokens`` 0 and N (alternating
which goes first), and prints the ratio of their times: what cutting micro-batches by length saves.

    python benchmarks/learner_throughput.py --config examples/test_driven.yaml --prompt-tokens 460 \\
        --completion-tokens 40 --vary-prompts --compare-micro-batch-tokens 8192 --tasks 8 --group 8
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from teamrl.config import load_config
from teamrl.protocol import Episode, Turn
from teamrl.trainer.build import build_policies
from teamrl.trainer.learner import Learner, ref_adapter

ROLE = "coder"


def synthetic_episodes(policy, vocab: int, args: argparse.Namespace, rng: random.Random) -> list[Episode]:  # noqa: ANN001
    def length() -> int:
        return (
            rng.randint(max(1, args.prompt_tokens // 4), args.prompt_tokens)
            if args.vary_prompts
            else args.prompt_tokens
        )

    prompts = [[rng.randrange(3, vocab) for _ in range(length())] for _ in range(args.tasks * args.group)]
    completions = [[rng.randrange(3, vocab) for _ in range(args.completion_tokens)] for _ in prompts]
    logprobs: list[list[float]] = []
    with torch.no_grad():
        for start in range(0, len(prompts), 16):
            logp, _ = policy.token_logprobs(
                ROLE, prompts[start : start + 16], completions[start : start + 16], 1.0
            )
            logprobs += [row[: args.completion_tokens].tolist() for row in logp]
    episodes = []
    for n, (p, c, lp) in enumerate(zip(prompts, completions, logprobs, strict=True)):
        turn = Turn(role=ROLE, prompt="", text="", prompt_ids=p, completion_ids=c, logprobs=lp)
        episodes.append(Episode(task_id=f"t{n // args.group}", group=n % args.group, turns=[turn]))
        episodes[-1].rewards = {ROLE: rng.choice([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])}
    return episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="examples/gpu_vllm_team.yaml")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=160)
    parser.add_argument("--completion-tokens", type=int, default=48)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument(
        "--vary-prompts", action="store_true", help="prompt lengths from 1/4 to all of --prompt-tokens"
    )
    parser.add_argument(
        "--compare-micro-batch-tokens",
        type=int,
        default=0,
        metavar="N",
        help="time every update with algorithm.micro_batch_tokens 0 and N on the same turns",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "learner_throughput.json"))
    args = parser.parse_args()
    cfg = load_config(args.config, [*args.set, "run.progress=false"])
    torch.set_num_threads(cfg.run.threads)
    policies = build_policies(cfg, progress=False)
    policy = policies[cfg.workflow.roles[ROLE].policy]
    policy.copy_adapter(ROLE, ref_adapter(ROLE))  # the KL reference, as after SFT
    vocab = policy.model.get_input_embeddings().weight.shape[0]
    learner = Learner(cfg, policies)  # type: ignore[arg-type]
    n = args.compare_micro_batch_tokens
    if n:  # the same turns through a learner that cuts micro-batches by length

        def cutting(tokens: int) -> Learner:
            algorithm = cfg.algorithm.model_copy(update={"micro_batch_tokens": tokens})
            return Learner(cfg.model_copy(update={"algorithm": algorithm}), policies)  # type: ignore[arg-type]

        learner, by_length = cutting(0), cutting(n)
    rng = random.Random(0)
    compared: dict[int, list[float]] = {0: [], n: []}
    cuda = torch.cuda.is_available() and policy.model.device.type == "cuda"
    rows = []
    for update in range(args.updates + 1):  # the first update warms up kernels and allocators
        episodes = synthetic_episodes(policy, vocab, args, rng)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if n:
            order = [(0, learner), (n, by_length)]
            for tokens, lrn in order if update % 2 else order[::-1]:
                start = time.perf_counter()
                lrn.update(episodes, (ROLE,), step=update)
                compared[tokens].append(time.perf_counter() - start)
        start = time.perf_counter()
        stats = learner.update(episodes, (ROLE,), step=update)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        row = {
            "update": update,
            "seconds": seconds,
            "learner_tokens": stats["perf/learner_tokens"],
            "tokens_per_s": stats["perf/learner_tokens"] / seconds,
            "turns": stats.get(f"train/{ROLE}/turns", 0.0),
            "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    timed = rows[1:] or rows
    result = {
        "model": cfg.policies["default"].path,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "algorithm": cfg.algorithm.model_dump(mode="json"),
        "tokens_per_s": sum(r["learner_tokens"] for r in timed) / sum(r["seconds"] for r in timed),
        "updates": rows,
    }
    print(f"learner: {result['tokens_per_s']:.0f} tokens/s (prompt + completion, forward + backward)")
    if n:
        plain_s, cut_s = sum(compared[0][1:] or compared[0]), sum(compared[n][1:] or compared[n])
        result["micro_batch_tokens"] = {"n": n, "seconds_plain": plain_s, "seconds_by_length": cut_s}
        result["micro_batch_tokens"]["speedup"] = plain_s / cut_s
        print(
            f"micro_batch_tokens={n}: the update takes {cut_s / plain_s:.2f} of the time "
            f"({plain_s / cut_s:.2f}x)"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
