"""hf policies at scale: hub ids, dtype / device / gradient checkpointing, adapters peft loads alone,
and a mixed team on two differently sized checkpoints trained through the real trainer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from checkpoints import tiny_checkpoint
from peft import PeftModel
from transformers import AutoModelForCausalLM

from teamrl.config import ConfigError, load_config
from teamrl.policies import GenerationRequest, HFPolicy
from teamrl.policies.hf import resolve_device, resolve_dtype
from teamrl.trainer.build import build_policy
from teamrl.trainer.trainer import Trainer

torch.set_num_threads(1)

CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "small", hidden=32, heads=2)


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "large", hidden=64, heads=4, seed=1)


def _perturb(policy: HFPolicy, adapter: str, seed: int, scale: float = 0.05) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.adapter_parameters(adapter):
            p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * scale)


def _hub_cache(root: Path, repo_id: str, checkpoint: Path) -> None:
    """Lay ``checkpoint`` out as the Hugging Face cache holds a downloaded ``repo_id``."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(checkpoint, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


def test_a_hub_id_loads_through_the_hf_cache_and_an_unavailable_one_says_what_to_do(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Offline: the hub path is taken, but only the cache answers (tests never download).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    _hub_cache(tmp_path / "hub", "teamrl-test/tiny-llama", small)
    monkeypatch.chdir(tmp_path)  # so that no local directory of that name can exist

    cfg = load_config(overrides=["policies.default.kind=hf", "policies.default.path=teamrl-test/tiny-llama"])
    from_hub = build_policy(cfg, "default", progress=False)
    from_dir = HFPolicy.from_pretrained(small, adapters=["planner"])
    assert from_hub.adapter_names == ["planner", "coder", "reviewer", "tester"]
    assert from_hub.fingerprint(None) == from_dir.fingerprint(None)

    with pytest.raises(FileNotFoundError, match=r"as a hub id failed(.|\n)*hf download teamrl-test/absent"):
        HFPolicy.from_pretrained("teamrl-test/absent")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        HFPolicy.from_pretrained("./teamrl-test/tiny-llama")  # a path, not a hub id


def test_device_and_dtype_settings() -> None:
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("auto", "cuda") == resolve_dtype("bfloat16", "cpu") == torch.bfloat16
    assert resolve_device("auto") == ("cuda" if CUDA else "cpu")
    assert resolve_device("cpu") == "cpu"
    defaults = load_config().policies["default"]
    assert (defaults.device, defaults.dtype, defaults.gradient_checkpointing) == ("auto", "auto", False)
    with pytest.raises(ConfigError, match=r"policies\.default.*device must be cpu, cuda, cuda:N or auto"):
        load_config(overrides=["policies.default.device=gpu"])
    with pytest.raises(ConfigError, match="dtype"):
        load_config(overrides=["policies.default.dtype=int8"])
    api = ["policies.api.kind=openai", "policies.api.base_url=http://x/v1", "policies.api.model=m"]
    with pytest.raises(ConfigError, match="device, gradient_checkpointing only apply to a model in this"):
        load_config(overrides=[*api, "policies.api.device=cpu", "policies.api.gradient_checkpointing=true"])


@pytest.mark.skipif(CUDA, reason="checks the error on a machine without a GPU")
def test_a_gpu_device_without_a_gpu_is_a_config_error_before_any_model_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(HFPolicy, "from_pretrained", never)
    cfg = load_config(overrides=["policies.default.device=cuda"])
    with pytest.raises(ConfigError, match=r"policies\.default\.device: device 'cuda'.*sees no CUDA GPU"):
        build_policy(cfg, "default", progress=False)


def test_bfloat16_weights_keep_float32_adapters_and_consistent_log_probs(small: Path) -> None:
    cfg = load_config(
        overrides=[
            "policies.default.kind=hf",
            f"policies.default.path={small}",
            "policies.default.dtype=bfloat16",
        ]
    )
    policy = build_policy(cfg, "default", progress=False)
    assert policy.base.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in policy.adapter_parameters("coder"))
    _perturb(policy, "coder", seed=0)
    gens = policy.generate([GenerationRequest("def f(x):", "coder", 8, 1.0) for _ in range(3)])
    lp, _ = policy.token_logprobs("coder", [g.prompt_ids for g in gens], [g.completion_ids for g in gens])
    for row, g in enumerate(gens):
        assert torch.allclose(lp[row, : len(g.logprobs)], torch.tensor(g.logprobs), atol=0.05)


def test_gradient_checkpointing_recomputes_activations_and_keeps_the_gradients(small: Path) -> None:
    grads, calls = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        policy = HFPolicy.from_pretrained(small, adapters=["coder"], gradient_checkpointing=checkpointing)
        _perturb(policy, "coder", seed=1)
        mlp, count = policy.base.model.layers[0].mlp, [0]  # the MLP runs inside the checkpointed layer
        forward = mlp.forward

        def counted(*args: object, _forward=forward, _count=count, **kwargs: object) -> torch.Tensor:
            _count[0] += 1
            return _forward(*args, **kwargs)

        mlp.forward = counted
        ids = policy.tokenizer("def add(a, b):\n    return a + b")["input_ids"]
        policy.set_trainable(["coder"])
        policy.model.train()
        lp, mask = policy.token_logprobs("coder", [ids[:5]], [ids[5:]])
        (lp * mask).sum().backward()
        grads.append([p.grad.clone() for p in policy.adapter_parameters("coder")])
        calls.append(count[0])
    assert calls == [1, 2]  # with checkpointing the MLP ran again in the backward pass
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads, strict=True))


def _logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_a_mixed_team_on_two_model_sizes_trains_each_role_in_its_own_model(
    small: Path, large: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planner on the small checkpoint, coder / reviewer / tester sharing the large one; one joint RL
    iteration of planner and coder through Trainer.fit. Each trained role moves only its own adapter, in
    its own model; the reviewer and tester adapters on the coder's base and both bases stay put; the
    checkpointed adapters load with plain peft onto their base and give the policy's logits."""
    cfg = load_config(
        overrides=[
            "policies.default.kind=hf",
            f"policies.default.path={large}",
            "policies.small.kind=hf",
            f"policies.small.path={small}",
            "policies.small.lora.r=4",
            "workflow.roles.planner.policy=small",
            "recipe.name=joint",
            "recipe.iterations=1",
            "recipe.roles=[planner,coder]",
            "recipe.sft.demo_episodes=4",
            "recipe.sft.batch_size=8",
            "tasks.heldout_size=2",
            "run.eval_samples=1",
            "algorithm.group_size=2",
            "algorithm.tasks_per_iteration=2",
            "algorithm.ppo_epochs=1",
            "algorithm.minibatches=1",
            "run.progress=false",
        ]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    small_policy, large_policy = trainer.policies["small"], trainer.policies["default"]
    assert small_policy.adapter_names == ["planner"]
    assert large_policy.adapter_names == ["coder", "reviewer", "tester"]
    assert small_policy.base.config.hidden_size == 32 and large_policy.base.config.hidden_size == 64

    rollout = trainer.rollout

    def differing_rewards(tasks, group_size, share=frozenset(), seed_key=None):  # non-zero advantages
        episodes = rollout(tasks, group_size, share, seed_key)
        for ep in episodes:
            ep.rewards = {r: float(ep.group) for r in ep.rewards}
        return episodes

    changed = []
    update = trainer.update

    def spy(episodes, roles):
        before = trainer.fingerprints()
        stats = update(episodes, roles)
        after = trainer.fingerprints()
        changed.append({k for k in before if before[k] != after[k]})
        return stats

    monkeypatch.setattr(trainer, "rollout", differing_rewards)
    monkeypatch.setattr(trainer, "update", spy)
    summary = trainer.fit()

    assert changed == [{"planner", "coder"}]
    small_ids = {id(p) for p in small_policy.model.parameters()}
    large_ids = {id(p) for p in large_policy.model.parameters()}
    optimized = {
        r: {id(p) for g in o.param_groups for p in g["params"]} for r, o in trainer.learner.optimizers.items()
    }
    assert optimized["planner"] <= small_ids and optimized["planner"].isdisjoint(large_ids)
    assert optimized["coder"] <= large_ids and optimized["coder"].isdisjoint(small_ids)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (rl,) = [r for r in rows if "phase" in r]
    assert rl["perf/rollout_tokens_per_s"] > 0 and rl["perf/learner_tokens_per_s"] > 0
    assert summary["evals"][-1]["label"] == "after_rl"

    adapters = tmp_path / "run" / "checkpoint" / "adapters"
    ids = small_policy.tokenizer("def add(a, b):\n    return a + b")["input_ids"]
    for role, policy, base_dir in (("planner", small_policy, small), ("coder", large_policy, large)):
        theirs = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapters / role)
        policy.model.set_adapter(role)
        assert torch.allclose(_logits(policy.model, ids), _logits(theirs, ids), atol=1e-5), role
        bare = AutoModelForCausalLM.from_pretrained(base_dir)
        assert not torch.allclose(_logits(bare, ids), _logits(theirs, ids), atol=1e-3), role
    with pytest.raises(RuntimeError, match="size mismatch"):  # the planner's adapter fits only its model
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(large), adapters / "planner")
