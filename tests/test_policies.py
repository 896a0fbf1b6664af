"""Policies: tokenizer, embedded build, HFPolicy generation/log-probs/adapters, SFT."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from teamrl.policies import (
    GenerationRequest,
    HFPolicy,
    SFTSettings,
    TinyModelConfig,
    build_embedded_default,
    build_tiny_model,
    sft_train,
    train_tokenizer,
)
from teamrl.policies import tiny as tiny_module
from teamrl.policies.hf import exponential_race, prefill_chunks

torch.set_num_threads(1)  # the other core is busy; two threads make small matmuls far slower

CODE = (
    "def add(a, b):\n"
    "    if a > b:\n"
    "        return a + b  # sum\n"
    "    return {'x': [1, 2]}\n"
    "\n"
    "\tclass  Foo ( object ) :\n"
    '        s = "a , b ; c"\n'
)


def _copy_corpus(n: int = 200, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefgh") for _ in range(3)) for _ in range(n)]
    return [(f"copy: {w} ->", f" {w}") for w in words]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emb") / "default"
    torch.manual_seed(0)
    return build_embedded_default(_copy_corpus(), out, sft=SFTSettings(max_steps=5), progress=False)


def _policy(built: Path, *adapters: str) -> HFPolicy:
    torch.manual_seed(0)
    return HFPolicy.from_pretrained(built, adapters=adapters)


def _perturb(policy: HFPolicy, adapter: str, seed: int) -> None:
    # Fresh LoRA adapters are exact no-ops (B = 0); give them weights so switching is observable.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.adapter_parameters(adapter):
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def test_tokenizer_round_trips_code_and_saves(tmp_path: Path) -> None:
    tok = train_tokenizer([CODE] * 20 + ["copy: abc -> abc"], vocab_size=400)
    for text in (CODE, "    x = 1\n\n        y = 2\n", "  trailing  \n", "naïve → ünïcode"):
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == text
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert (tok.pad_token, tok.bos_token, tok.eos_token) == ("<|pad|>", "<|bos|>", "<|eos|>")
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}) == 3
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert loaded(CODE)["input_ids"] == tok(CODE)["input_ids"]
    assert loaded.decode(loaded(CODE)["input_ids"], skip_special_tokens=True) == CODE
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)


def test_tiny_model_has_a_few_million_parameters() -> None:
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz (){}:=\n    "
    texts = ["".join(rng.choice(alphabet) for _ in range(300)) for _ in range(300)]
    tok = train_tokenizer(texts, vocab_size=1024)
    model = build_tiny_model(TinyModelConfig(), tok)
    assert isinstance(model, LlamaForCausalLM)
    assert model.config.vocab_size == len(tok)
    assert 2_000_000 < sum(p.numel() for p in model.parameters()) < 6_000_000


def test_build_is_loadable_and_cached(built: Path) -> None:
    marker = json.loads((built / tiny_module.BUILD_MARKER).read_text())
    assert marker["sft_stats"]["steps"] == 5
    model = AutoModelForCausalLM.from_pretrained(built, local_files_only=True)
    assert isinstance(model, LlamaForCausalLM)
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert build_embedded_default(_copy_corpus(), built, progress=False) == built
    assert time.perf_counter() - start < 0.5
    assert (built / "model.safetensors").stat().st_mtime_ns == stamp


def test_interrupted_build_leaves_no_out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash_mid_write(self: LlamaForCausalLM, directory: Path, **kwargs: object) -> None:
        (Path(directory) / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(LlamaForCausalLM, "save_pretrained", crash_mid_write)
    out = tmp_path / "default"
    with pytest.raises(KeyboardInterrupt):
        build_embedded_default(_copy_corpus(40), out, sft=SFTSettings(max_steps=1), progress=False)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == [".default.lock"]  # the temp dir is gone too


def test_a_second_builder_waits_for_the_first_and_reuses_its_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs started at once on a fresh machine: the second waits on the first's lock, then finds the
    finished build and trains nothing."""
    out = tmp_path / "default"

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("the waiting builder trained a model")

    monkeypatch.setattr(tiny_module, "sft_train", no_training)
    got: list[Path] = []
    with tiny_module.build_lock(out):  # the first builder, at work
        waiter = threading.Thread(target=lambda: got.append(build_embedded_default(_copy_corpus(10), out)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not got  # waiting, not building
        out.mkdir()  # the first builder's finished build appears
        (out / tiny_module.BUILD_MARKER).write_text("{}")
    waiter.join(10)
    assert got == [out]


def test_existing_foreign_out_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "default").mkdir()
    with pytest.raises(FileExistsError, match="not a finished teamrl build"):
        build_embedded_default(_copy_corpus(10), tmp_path / "default", progress=False)


def test_lora_sft_learns_and_touches_only_its_adapter(built: Path) -> None:
    policy = _policy(built, "coder", "reviewer")
    _perturb(policy, "reviewer", seed=1)
    policy.copy_adapter("coder", "ref_coder")
    before = {name: policy.fingerprint(name) for name in (None, "coder", "reviewer", "ref_coder")}
    assert before["ref_coder"] == before["coder"]
    train = _copy_corpus()[:8]
    greedy_base = [GenerationRequest(p, None, 6, 0.0) for p, _ in train]
    base_out = [g.completion_ids for g in policy.generate(greedy_base)]

    stats = policy.sft("coder", train, SFTSettings(max_steps=80, batch_size=8), progress=False)

    assert stats["steps"] == 80 and stats["final_loss"] < stats["epoch_losses"][0]
    after = {name: policy.fingerprint(name) for name in before}
    assert after["coder"] != before["coder"]
    assert {k: after[k] for k in (None, "reviewer", "ref_coder")} == {
        k: before[k] for k in (None, "reviewer", "ref_coder")
    }
    gens = policy.generate([GenerationRequest(p, "coder", 6, 0.0) for p, _ in train])
    assert [g.text for g in gens] == [c for _, c in train]
    assert all(g.finished and g.completion_ids[-1] == policy.tokenizer.eos_token_id for g in gens)
    # The base (adapters disabled) is untouched by the adapter's training.
    assert [g.completion_ids for g in policy.generate(greedy_base)] == base_out
    # Requires-grad flags are back to the policy's trainable set (ref_coder is a frozen copy).
    assert all(p.requires_grad for p in policy.adapter_parameters("coder"))
    assert not any(p.requires_grad for p in policy.adapter_parameters("ref_coder"))
    assert not any(p.requires_grad for p in policy.base.parameters() if id(p) not in _lora_ids(policy))


def _next_token_kl(teacher: HFPolicy, student: HFPolicy, pairs: list[tuple[str, str]]) -> float:
    """Mean KL(teacher || student) of the next-token distributions over the prompts of ``pairs``."""
    kls = []
    for prompt, _ in pairs:
        ids = torch.tensor([student.tokenizer(prompt)["input_ids"]])
        with torch.no_grad(), teacher._use("teacher"), student._use("student"):
            t = torch.log_softmax(teacher.model(input_ids=ids).logits[0, -1].float(), -1)
            s = torch.log_softmax(student.model(input_ids=ids).logits[0, -1].float(), -1)
        kls.append(float((t.exp() * (t - s)).sum()))
    return sum(kls) / len(kls)


def test_token_level_distillation_moves_the_student_to_the_teacher(built: Path) -> None:
    """sft(..., teacher=(policy, adapter)): the student's adapter learns the teacher's next-token
    distributions (soft targets, not the completions' tokens); another tokenizer is refused."""
    teacher = _policy(built, "teacher")
    _perturb(teacher, "teacher", seed=3)
    with torch.no_grad():  # a teacher whose distributions differ clearly from the base's
        for p in teacher.adapter_parameters("teacher"):
            p.mul_(8.0)
    student = _policy(built, "student")
    pairs = _copy_corpus(seed=5)[:16]
    before = _next_token_kl(teacher, student, pairs)
    settings = SFTSettings(max_steps=60, batch_size=8, lr=3e-3)
    stats = student.sft("student", pairs, settings, progress=False, teacher=(teacher, "teacher"))
    after = _next_token_kl(teacher, student, pairs)
    assert stats["final_loss"] < stats["epoch_losses"][0] and after < before / 2, (before, after)
    assert teacher.fingerprint("teacher") == teacher.fingerprint("teacher")  # the teacher only reads
    teacher.tokenizer = train_tokenizer(["something else entirely"] * 5, vocab_size=300)
    with pytest.raises(ValueError, match="one tokenizer"):
        student.sft("student", pairs, settings, progress=False, teacher=(teacher, "teacher"))


def _lora_ids(policy: HFPolicy) -> set[int]:
    return {id(p) for a in policy.adapter_names for p in policy.adapter_parameters(a)}


def test_generate_keeps_request_order_across_groups(built: Path) -> None:
    policy = _policy(built, "coder", "reviewer")
    _perturb(policy, "coder", seed=2)
    prompts = [p for p, _ in _copy_corpus(9)]
    settings = [("coder", 5, 0.0), (None, 3, 1.0), ("reviewer", 7, 0.7), ("coder", 4, 1.0), (None, 6, 0.0)]
    requests = [GenerationRequest(p, *settings[i % len(settings)]) for i, p in enumerate(prompts)]
    gens = policy.generate(requests)
    eos = policy.tokenizer.eos_token_id
    for req, gen in zip(requests, gens, strict=True):
        assert gen.prompt_ids == policy.tokenizer(req.prompt)["input_ids"]
        assert len(gen.logprobs) == len(gen.completion_ids) >= 1
        assert all(lp <= 0 for lp in gen.logprobs)
        assert gen.finished == (gen.completion_ids[-1] == eos)
        assert eos not in gen.completion_ids[:-1]
        if not gen.finished:
            assert len(gen.completion_ids) == req.max_new_tokens
        assert gen.text == policy.tokenizer.decode(gen.completion_ids, skip_special_tokens=True)
    # Greedy results do not depend on batch composition: alone they come out the same.
    for req, gen in zip(requests, gens, strict=True):
        if req.temperature == 0:
            assert policy.generate([req])[0].completion_ids == gen.completion_ids
    assert policy.generate([]) == []


def test_a_seeded_request_samples_the_same_whatever_its_batch(built: Path) -> None:
    policy = _policy(built, "coder")
    _perturb(policy, "coder", seed=2)
    prompts = [p for p, _ in _copy_corpus(8, seed=5)]
    requests = [GenerationRequest(p, "coder", 8, 1.0, seed=100 + i) for i, p in enumerate(prompts)]
    together = policy.generate(requests)
    torch.manual_seed(123)  # the global generator plays no part in a seeded request
    alone = [policy.generate([r])[0] for r in reversed(requests)][::-1]
    policy.max_batch_size = 3  # other micro-batches, other padding
    mixed = policy.generate([GenerationRequest(prompts[0], "coder", 8, 1.0)] + requests[::-1])[1:][::-1]
    for a, b, c in zip(together, alone, mixed, strict=True):
        assert a.completion_ids == b.completion_ids == c.completion_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    reseeded = policy.generate(
        [GenerationRequest(r.prompt, "coder", 8, 1.0, seed=7 + i) for i, r in enumerate(requests)]
    )
    assert [g.completion_ids for g in reseeded] != [g.completion_ids for g in together]


def test_identical_prompts_are_prefilled_once_and_sample_apart(built: Path) -> None:
    """A group's identical prompts share one prefill (the first forward sees each prompt once); each row
    then samples on its own: seeded rows give what they give alone, unseeded ones differ, greedy ones are
    the single greedy completion."""
    policy = _policy(built, "coder")
    _perturb(policy, "coder", seed=2)
    a, b = [p for p, _ in _copy_corpus(2, seed=9)]
    seen: list[int] = []
    forward = policy.model.forward

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    policy.model.forward = counting  # type: ignore[method-assign]
    try:
        seeded = [GenerationRequest(p, "coder", 8, 1.0, seed=40 + i) for i, p in enumerate([a] * 5 + [b] * 3)]
        together = policy.generate(seeded)
        assert seen[0] == 2  # the prefill: two distinct prompts for eight rows
        seen.clear()
        alone = [policy.generate([r])[0] for r in seeded]
        assert [g.completion_ids for g in together] == [g.completion_ids for g in alone]
        for g, h in zip(together, alone, strict=True):
            assert g.logprobs == pytest.approx(h.logprobs, abs=1e-4)
        free = policy.generate([GenerationRequest(a, "coder", 8, 1.0)] * 6)
        assert len({tuple(g.completion_ids) for g in free}) > 1  # the copies sample apart
        greedy = policy.generate([GenerationRequest(a, "coder", 8, 0.0)] * 3)
        single = policy.generate([GenerationRequest(a, "coder", 8, 0.0)])[0]
        assert all(g.completion_ids == single.completion_ids for g in greedy)
    finally:
        policy.model.forward = forward  # type: ignore[method-assign]


def test_prefill_chunks_bound_the_padding_by_hand() -> None:
    # 4 rows of 10 then 20: a fifth row of 20 would pad 5 x 20 = 100 for 60 real tokens (> 1.25x)
    assert prefill_chunks([10, 10, 10, 10, 20, 20]) == [[0, 1, 2, 3], [4, 5]]
    # alike lengths stay together; a chunk always takes at least 4 rows, however unlike
    assert prefill_chunks([10, 11, 12, 12, 12]) == [[0, 1, 2, 3, 4]]
    assert prefill_chunks([1, 50, 100, 200, 201]) == [[0, 1, 2, 3], [4]]
    assert prefill_chunks([]) == []


def test_prompts_of_unlike_lengths_are_prefilled_in_chunks_with_the_same_result(built: Path) -> None:
    """Short and long prompts in one micro-batch: each chunk of like lengths is prefilled at its own width
    (fewer positions than one left-padded prefill), the caches joined; the completions and log-probs are
    those of one prefill of the whole batch, sampled and greedy."""
    policy = _policy(built, "coder")
    _perturb(policy, "coder", seed=3)
    rng = random.Random(5)
    prompts = [" ".join(p for p, _ in _copy_corpus(rng.choice([1, 2, 6, 12]), seed=i)) for i in range(24)]
    widths: list[int] = []
    forward = policy.model.forward

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if kwargs["input_ids"].shape[1] > 1:  # a prefill, not a decode step
            widths.append(int(kwargs["input_ids"].numel()))
        return forward(*args, **kwargs)

    policy.model.forward = counting  # type: ignore[method-assign]
    try:
        for temperature in (1.0, 0.0):
            requests = [GenerationRequest(p, "coder", 8, temperature, seed=i) for i, p in enumerate(prompts)]
            widths.clear()
            policy.chunk_prefill = False
            whole = policy.generate(requests)
            padded = widths.pop()
            policy.chunk_prefill = True
            chunked = policy.generate(requests)
            assert len(widths) > 1 and sum(widths) < 0.8 * padded  # several chunks, far fewer positions
            for a, b in zip(whole, chunked, strict=True):
                assert a.completion_ids == b.completion_ids
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    finally:
        policy.model.forward = forward  # type: ignore[method-assign]


def test_generation_on_merged_weights_matches_the_adapter_and_restores_the_base_exactly(built: Path) -> None:
    """With merge_for_decode the adapter is merged into the base for a micro-batch's generation: the same
    completions and log-probs as the LoRA forward (which scoring and training keep using), and the base
    weights are bit for bit what they were, with no in-place write, however many micro-batches merged."""
    policy = _policy(built, "coder", "tester")
    _perturb(policy, "coder", seed=4)
    _perturb(policy, "tester", seed=5)
    base = {k: v.detach().clone() for k, v in policy.base.named_parameters()}
    version = policy.weights_version(None)
    prompts = [p for p, _ in _copy_corpus(12, seed=11)]
    requests = [
        GenerationRequest(p, adapter, 8, temperature, seed=i)
        for i, p in enumerate(prompts)
        for adapter in ("coder", "tester", None)
        for temperature in (1.0, 0.0)
    ]
    assert policy.merge_for_decode  # a tiny base: on by default
    merged = policy.generate(requests)
    policy.merge_for_decode = False
    plain = policy.generate(requests)
    for a, b in zip(merged, plain, strict=True):
        assert a.completion_ids == b.completion_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert all(torch.equal(v, base[k]) for k, v in policy.base.named_parameters())
    assert policy.weights_version(None) == version  # no in-place write: a vLLM copy stays valid
    scored, _ = policy.token_logprobs("coder", [merged[0].prompt_ids], [merged[0].completion_ids], 1.0)
    assert scored[0, : len(merged[0].logprobs)].tolist() == pytest.approx(merged[0].logprobs, abs=1e-4)


def test_exponential_race_samples_each_token_with_its_probability() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    n = 20000
    logprobs = probs.log().expand(n, -1)
    tokens = exponential_race(logprobs, [torch.Generator().manual_seed(i) for i in range(n)])[:, 0]
    freq = torch.bincount(tokens, minlength=5).double() / n
    assert freq[4] == 0  # a token of probability 0 is never picked
    assert torch.allclose(freq, probs.double(), atol=0.012)  # 3.5 standard errors at p = 0.5


def test_token_logprobs_match_generation_and_only_adapter_gets_grad(built: Path) -> None:
    policy = _policy(built, "coder", "reviewer")
    _perturb(policy, "coder", seed=3)
    _perturb(policy, "reviewer", seed=4)
    prompts = [p for p, _ in _copy_corpus(12)]
    for adapter in ("coder", "reviewer", None):
        for temperature in (1.0, 0.7, 0.0):
            gens = policy.generate([GenerationRequest(p, adapter, 12, temperature) for p in prompts])
            lp, mask = policy.token_logprobs(
                adapter, [g.prompt_ids for g in gens], [g.completion_ids for g in gens], temperature
            )
            assert lp.shape == mask.shape == (len(gens), max(len(g.completion_ids) for g in gens))
            for row, g in enumerate(gens):
                n = len(g.completion_ids)
                assert mask[row].sum() == n
                expected = torch.tensor(g.logprobs)
                assert torch.allclose(lp[row, :n], expected, atol=1e-4), (adapter, temperature)
                assert torch.all(lp[row, n:] == 0)

    # The adapters really switch: same tokens, different log-probs per adapter.
    gens = policy.generate([GenerationRequest(p, "coder", 8, 1.0) for p in prompts])
    ids = ([g.prompt_ids for g in gens], [g.completion_ids for g in gens])
    scores = {a: policy.token_logprobs(a, *ids)[0] for a in ("coder", "reviewer", None)}
    assert not torch.allclose(scores["coder"], scores["reviewer"], atol=1e-3)
    assert not torch.allclose(scores["coder"], scores[None], atol=1e-3)

    policy.set_trainable(["coder"])
    lp, mask = policy.token_logprobs("coder", *ids)
    (lp * mask).sum().backward()
    coder = policy.adapter_parameters("coder")
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in coder)
    assert any(p.grad.abs().sum() > 0 for p in coder)
    assert all(p.grad is None for p in policy.model.parameters() if id(p) not in {id(q) for q in coder})


def test_token_entropy_is_the_next_token_distributions_and_log_probs_are_unchanged(built: Path) -> None:
    policy = _policy(built, "coder")
    _perturb(policy, "coder", seed=5)
    prompts = [p for p, _ in _copy_corpus(6)]
    gens = policy.generate([GenerationRequest(p, "coder", 10, 1.0) for p in prompts])
    ids = ([g.prompt_ids for g in gens], [g.completion_ids for g in gens])
    for temperature in (1.0, 0.5):
        lp, mask = policy.token_logprobs("coder", *ids, temperature)
        lp2, entropy, mask2 = policy.token_logprobs_entropy("coder", *ids, temperature)
        assert torch.equal(lp, lp2) and torch.equal(mask, mask2)
        assert not entropy.requires_grad and torch.all(entropy[mask == 0] == 0)
        for row, g in enumerate(gens):  # scored one token at a time, from the full sequence's logits
            seq = torch.tensor([g.prompt_ids + g.completion_ids])
            with torch.no_grad(), policy._use("coder"):
                logits = policy.model(input_ids=seq).logits[0].float()
            n, start = len(g.completion_ids), len(g.prompt_ids)
            dist = torch.softmax(logits[start - 1 : start - 1 + n] / temperature, dim=-1)
            want = -(dist * dist.clamp_min(1e-30).log()).sum(-1)
            assert torch.allclose(entropy[row, :n], want, atol=1e-4)
        assert (
            entropy[mask != 0].std() > 0.01
        )  # it varies from token to token (an untrained base: near uniform)
    assert [t.shape for t in policy.token_logprobs_entropy("coder", [[1]], [[]])] == [(1, 0)] * 3


def test_adapter_bookkeeping(built: Path) -> None:
    policy = _policy(built, "coder", "reviewer")
    assert policy.adapter_names == ["coder", "reviewer"]
    assert _policy(built, "coder").fingerprint("coder") == policy.fingerprint("coder")  # seeded init
    assert policy.fingerprint("coder") != policy.fingerprint("reviewer")
    assert {id(p) for p in policy.adapter_parameters("coder")}.isdisjoint(
        id(p) for p in policy.adapter_parameters("reviewer")
    )
    # An optimizer built on an adapter's parameters stays valid when more adapters are added.
    coder_ids = [id(p) for p in policy.adapter_parameters("coder")]
    policy.copy_adapter("coder", "ref_coder")
    policy.add_adapter("critic")
    assert [id(p) for p in policy.adapter_parameters("coder")] == coder_ids
    assert policy.fingerprint("ref_coder") == policy.fingerprint("coder")
    policy.set_trainable(["reviewer"])
    policy.generate([GenerationRequest("copy: abc ->", "coder", 2)])  # peft's set_adapter flips flags
    trainable = {id(p) for p in policy.model.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in policy.adapter_parameters("reviewer")}
    with pytest.raises(KeyError, match="no adapter 'judge'"):
        policy.set_trainable(["judge"])


def test_sft_of_the_base_leaves_adapters_alone(built: Path) -> None:
    policy = _policy(built, "coder")
    _perturb(policy, "coder", seed=6)
    base, coder = policy.fingerprint(None), policy.fingerprint("coder")
    policy.sft(None, _copy_corpus(16), SFTSettings(max_steps=2, batch_size=8), progress=False)
    assert policy.fingerprint(None) != base
    assert policy.fingerprint("coder") == coder
    assert {id(p) for p in policy.model.parameters() if p.requires_grad} == {
        id(p) for p in policy.adapter_parameters("coder")
    }


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # inside peft
def test_save_and_load_adapter_round_trip(built: Path, tmp_path: Path) -> None:
    policy = _policy(built, "coder")
    _perturb(policy, "coder", seed=5)
    target = tmp_path / "adapters" / "coder"
    policy.save_adapter("coder", target)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {f.name for f in target.iterdir()}
    policy.save_adapter("coder", target)  # overwriting an existing save works too
    assert [f.name for f in target.parent.iterdir()] == ["coder"]

    other = _policy(built, "coder", "reviewer")
    other.load_adapter("reviewer", target)  # overwrite an existing adapter
    other.load_adapter("critic", target)  # or create a new one
    assert other.fingerprint("reviewer") == other.fingerprint("critic") == policy.fingerprint("coder")
    assert other.fingerprint("coder") != policy.fingerprint("coder")

    # peft alone loads it onto the plain base and computes the same log-probs.
    ids = policy.tokenizer("copy: abc -> abc")["input_ids"]
    prompt, completion = ids[:4], ids[4:]
    ours = policy.token_logprobs("coder", [prompt], [completion])[0][0]
    assert not torch.allclose(ours, policy.token_logprobs(None, [prompt], [completion])[0][0], atol=1e-3)
    base = AutoModelForCausalLM.from_pretrained(built, local_files_only=True)
    peft_model = PeftModel.from_pretrained(base, target)
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([ids])).logits[0, len(prompt) - 1 : -1]
    theirs = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_clear_errors(built: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        HFPolicy.from_pretrained(tmp_path / "nowhere")
    policy = _policy(built, "coder")
    with pytest.raises(FileNotFoundError, match="not a saved adapter"):
        policy.load_adapter("coder", tmp_path)
    with pytest.raises(KeyError, match="no adapter 'critic'"):
        policy.generate([GenerationRequest("x", "critic")])
    with pytest.raises(ValueError, match="already has an adapter"):
        policy.add_adapter("coder")
    with pytest.raises(ValueError, match="exceeds the model's 512 positions"):
        policy.generate([GenerationRequest("x", None, max_new_tokens=600)])
    (long,) = policy.generate([GenerationRequest("word " * 2000, None, max_new_tokens=12)])
    assert len(long.prompt_ids) == 512 - 12 and long.prompt_ids[0] == policy.tokenizer.bos_token_id


def test_measure_throughput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Measured, not asserted: generate and SFT tokens/s on the default tiny config."""
    rng = random.Random(0)
    words = ["x", "return", "a + b", "\n    ", "def", "(y)", "if", ":"]
    examples = [
        (CODE[: rng.randint(20, 60)], " ".join(rng.choice(words) for _ in range(40))) for _ in range(64)
    ]
    tok = train_tokenizer([CODE] * 10 + [c for _, c in examples], vocab_size=1024)
    torch.manual_seed(0)
    # Untrained weights almost never pick EOS, so every row really produces 48 tokens.
    build_tiny_model(TinyModelConfig(), tok).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    policy = HFPolicy.from_pretrained(tmp_path, adapters=["coder"])
    requests = [GenerationRequest(p, "coder", 48, 1.0) for p, _ in examples]
    policy.generate(requests[:2])  # warm-up
    start = time.perf_counter()
    gens = policy.generate(requests)
    gen_s = time.perf_counter() - start
    produced = sum(len(g.completion_ids) for g in gens)
    stats = policy.sft("coder", examples, SFTSettings(max_steps=2, batch_size=32), progress=False)
    full = sft_train(policy.base, tok, examples, SFTSettings(max_steps=2, batch_size=32), progress=False)
    with capsys.disabled():
        print(
            f"\n[policies] generate (LoRA) batch 64 x 48: {produced / gen_s:.0f} tok/s ({produced} tokens); "
            f"SFT LoRA {stats['tokens_per_s']:.0f} tok/s, full {full['tokens_per_s']:.0f} tok/s"
        )
    assert produced > 0
