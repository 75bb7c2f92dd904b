"""The three examples/ scripts run: automatic K under an emulated capacity equals K = 1."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(name: str, argv: list[str]) -> dict:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def _check_auto_equals_k1(out: dict) -> None:
    auto, k1 = out["auto"], out["k1"]
    assert max(e.max_microbatches for e in auto) > 1  # the capacity forced a split
    assert all(e.max_microbatches == 1 for e in k1)
    assert [e.loss for e in auto] == pytest.approx([e.loss for e in k1], rel=1e-5)
    assert [e.valid_acc for e in auto] == pytest.approx([e.valid_acc for e in k1], abs=2e-3)


def test_own_arrays_and_own_gin_layer():
    out = _run("own_arrays_gin", ["--epochs", "1"])
    assert out["num_classes"] == 7
    _check_auto_equals_k1(out)


@pytest.mark.parametrize("name", ["dgl_model", "pyg_model"])
def test_dgl_and_pyg_models(name, synth_tiny, data_root):
    from cherry.compat import dgl_available, pyg_available

    ok, reason = (dgl_available() if name == "dgl_model" else pyg_available())
    if not ok:
        pytest.skip(f"{name}: {reason}")
    out = _run(name, ["--epochs", "1", "--root", str(data_root)])
    _check_auto_equals_k1(out)
    assert out["report"].ok
