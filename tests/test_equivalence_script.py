"""benchmarks/equivalence.py: its comparison finds a changed figure or fingerprint, and its overrides keep
to what each example's recipe reads."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("equivalence", ROOT / "benchmarks" / "equivalence.py")
assert spec is not None and spec.loader is not None
equivalence = importlib.util.module_from_spec(spec)
sys.modules["equivalence"] = equivalence
spec.loader.exec_module(equivalence)

RECORD = {
    "default": {
        "evals": [{"label": "after_rl", "eval/solved": 0.5, "step": 4}],
        "fingerprints": {"base:default": "aa", "coder": "bb"},
        "seconds": 1.0,
    },
    "gpu.yaml": {"skipped": "needs a GPU"},
}


def _write(path: Path, record: dict) -> Path:
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda r: None, 0),
        (lambda r: r["default"]["evals"][0].update({"eval/solved": 0.5 + 1e-6}), 1),
        (lambda r: r["default"]["fingerprints"].update({"coder": "cc"}), 1),
        (lambda r: r.pop("default"), 1),
    ],
)
def test_compare_finds_any_changed_figure_or_fingerprint(tmp_path: Path, change, code: int) -> None:  # noqa: ANN001
    new = json.loads(json.dumps(RECORD))
    change(new)
    old_file, new_file = _write(tmp_path / "old.json", RECORD), _write(tmp_path / "new.json", new)
    assert equivalence.compare(old_file, new_file) == code


def test_every_example_loads_with_the_overrides_it_gets() -> None:
    from teamrl.config import load_config

    for name, path in equivalence.configs():
        if name not in equivalence.SKIP:
            load_config(path, equivalence.overrides(path))  # an option the recipe does not read would fail
