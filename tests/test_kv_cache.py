"""The decode loop's preallocated KV cache (teamrl.policies.kv_cache): the same keys and values as
transformers' DynamicLayer through any sequence of writes and row selections, and the same generations."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from teamrl.policies import GenerationRequest
from teamrl.policies.kv_cache import PreallocatedLayer, preallocate
from tests.test_policies import _copy_corpus, _perturb, _policy, built  # noqa: F401  (fixture)


def _kv(batch: int, length: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch, 2, length, 4, generator=gen), torch.randn(batch, 2, length, 4, generator=gen)


@pytest.mark.parametrize("room", [0, 3, 40])
def test_a_preallocated_layer_holds_what_a_dynamic_layer_holds(room: int) -> None:
    gen = torch.Generator().manual_seed(room)
    plain, fast = DynamicLayer(), DynamicLayer()
    k, v = _kv(6, 5, gen)
    plain.update(k, v)
    fast.update(k.clone(), v.clone())
    cache = DynamicCache()
    cache.layers = [fast]
    assert preallocate(cache, room) and type(fast) is PreallocatedLayer
    rng = random.Random(room)
    for step in range(25):  # room 0 and 3: the buffer must grow past the room made for it
        if step % 4 == 3 and plain.keys.shape[0] > 1:  # some rows finish
            keep = torch.tensor(sorted(rng.sample(range(plain.keys.shape[0]), plain.keys.shape[0] - 1)))
            plain.batch_select_indices(keep)
            fast.batch_select_indices(keep)
        k, v = _kv(plain.keys.shape[0], 1 + step % 2, gen)
        want = plain.update(k, v)
        got = fast.update(k, v)
        assert fast.get_seq_length() == plain.get_seq_length()
        for a, b in zip(want, got, strict=True):
            assert torch.equal(a, b)


def test_only_plain_dynamic_layers_are_preallocated() -> None:
    class Other(DynamicLayer):
        pass

    cache = DynamicCache()
    layer = Other()
    layer.update(*_kv(2, 3, torch.Generator().manual_seed(0)))
    cache.layers = [layer]
    assert not preallocate(cache, 8) and type(layer) is Other
    cache.layers = [DynamicLayer()]  # not filled yet: nothing to adopt
    assert not preallocate(cache, 8)


def test_generation_with_the_preallocated_cache_is_the_same_bit_for_bit(built: Path) -> None:  # noqa: F811
    """Prompts of unlike lengths, rows finishing at different steps, sampled and greedy: the completions and
    log-probs are exactly those of the cache grown by concatenation, and the decode loop wrote in place."""
    policy = _policy(built, "coder")
    _perturb(policy, "coder", seed=7)
    rng = random.Random(3)
    prompts = [" ".join(p for p, _ in _copy_corpus(rng.choice([1, 3, 8]), seed=i)) for i in range(16)]
    # rows that run several steps and finish at different ones: a few tokens the rows emit end them
    policy._eos_ids = [-1]
    forced = policy.generate(
        [GenerationRequest(p, "coder", 12, t, seed=i) for t in (1.0, 0.0) for i, p in enumerate(prompts)]
    )
    early = {t for g in forced for t in g.completion_ids[:3]}
    later = [t for i, g in enumerate(forced) for t in g.completion_ids[3 + i % 8 :] if t not in early]
    policy._eos_ids = sorted(set(later[:: max(1, len(later) // 8)]))
    updates: list[str] = []
    plain_update, fast_update = DynamicLayer.update, PreallocatedLayer.update

    def spy(kind: str, fn):  # noqa: ANN001, ANN202
        def wrapped(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            updates.append(kind)
            return fn(self, *args, **kwargs)

        return wrapped

    DynamicLayer.update = spy("cat", plain_update)  # type: ignore[method-assign]
    PreallocatedLayer.update = spy("in place", fast_update)  # type: ignore[method-assign]
    try:
        for temperature in (1.0, 0.0):
            requests = [GenerationRequest(p, "coder", 12, temperature, seed=i) for i, p in enumerate(prompts)]
            policy.preallocate_cache = False
            updates.clear()
            grown = policy.generate(requests)
            assert "in place" not in updates
            policy.preallocate_cache = True
            updates.clear()
            fast = policy.generate(requests)
            assert updates.count("in place") > updates.count("cat")  # prefill concatenates, decoding does not
            lengths = {len(g.completion_ids) for g in fast}
            assert max(lengths) > 3 and (len(lengths) > 2 or temperature == 0.0)  # sampled: rows leave
            for a, b in zip(grown, fast, strict=True):
                assert a.completion_ids == b.completion_ids and a.logprobs == b.logprobs
    finally:
        DynamicLayer.update = plain_update  # type: ignore[method-assign]
        PreallocatedLayer.update = fast_update  # type: ignore[method-assign]


def _tiny(arch: str):  # noqa: ANN202
    from transformers import AutoModelForCausalLM, GPT2Config, MistralConfig, Qwen2Config

    configs = {
        "gpt2": lambda: GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64),
        "qwen2": lambda: Qwen2Config(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,  # grouped-query attention: fewer key/value heads than query heads
            intermediate_size=64,
            vocab_size=100,
            max_position_embeddings=64,
        ),
        "mistral": lambda: MistralConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            vocab_size=100,
            max_position_embeddings=64,
            sliding_window=None,
        ),
    }
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(configs[arch]()).eval()


@pytest.mark.parametrize("arch", ["gpt2", "qwen2", "mistral"])
def test_other_architectures_decode_the_same_on_the_preallocated_cache(arch: str) -> None:
    """Checkpoints users bring (other attention code, grouped-query heads): the same logits at every decode
    step, rows dropped midway, as on the cache grown by concatenation."""
    model = _tiny(arch)
    ids = torch.randint(0, 100, (3, 7), generator=torch.Generator().manual_seed(1))
    runs = []
    for room in (None, 6):
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True)
            cache = out.past_key_values
            if room is not None:
                assert preallocate(cache, room)
            token, logits = out.logits[:, -1].argmax(-1, keepdim=True), []
            for step in range(6):
                if step == 3:
                    cache.batch_select_indices(torch.tensor([0, 2]))
                    token = token[[0, 2]]
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                logits.append(out.logits[:, -1].clone())
                token = out.logits[:, -1].argmax(-1, keepdim=True)
        runs.append(logits)
    for grown, fast in zip(*runs, strict=True):
        assert torch.equal(grown, fast)
