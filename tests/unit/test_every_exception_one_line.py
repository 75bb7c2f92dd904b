"""The error boundary maps every exception class that can escape to one line and an exit status, and
is entered before the heavy imports; a user layer's wrong shape names the layer and the contract."""
from __future__ import annotations

import builtins
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cherry import plugins
from cherry.cli import main
from cherry.errors import EXIT_BAD_INPUT, EXIT_FAULT, classify, run_boundary

ROOT = Path(__file__).resolve().parents[2]


def _builtin_exceptions():
    for name in sorted(dir(builtins)):
        cls = getattr(builtins, name)
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                yield pytest.param(cls("a message\nwith a second line"), id=name)
            except TypeError:  # UnicodeDecodeError and friends need their own arguments
                continue
    yield pytest.param(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), id="UnicodeDecodeError")
    yield pytest.param(torch.OutOfMemoryError("CUDA out of memory.\nTried to allocate"), id="torch.OutOfMemoryError")
    yield pytest.param(type("PluginsOwnError", (Exception,), {})("raised by user code"), id="a user class")
    yield pytest.param(KeyError("x" * 5_000_000), id="a 5 MB message")


@pytest.mark.parametrize("exc", list(_builtin_exceptions()))
def test_every_exception_class_is_one_line(exc, capsys, monkeypatch):
    monkeypatch.delenv("CHERRY_TRACEBACK", raising=False)

    def body():
        raise exc

    status = run_boundary("prog", body)
    err = capsys.readouterr().err
    assert status in (1, 2, 3, 4) and err.count("\n") == 1 and err.startswith("prog: "), err[:500]
    assert len(err) < 2_000 and "Traceback" not in err


@pytest.mark.parametrize("exc, status, says", [
    (ImportError("No module named 'mine'", name="mine"), EXIT_BAD_INPUT, "No module named 'mine'"),
    (SyntaxError("invalid syntax", ("plug.py", 3, 1, "x = (", 3, 6)), EXIT_BAD_INPUT, "plug.py:3: invalid syntax"),
    (RuntimeError("value cannot be converted to type float without overflow"), EXIT_BAD_INPUT, "too large"),
    (OverflowError("Python int too large to convert to C long"), EXIT_BAD_INPUT, "too large"),
    (ImportError("libtorch_cpu.so: failed to map segment from shared object"), EXIT_FAULT, "out of host memory"),
    (MemoryError(), EXIT_FAULT, "out of host memory"),
    (KeyError("edge_index"), EXIT_FAULT, "internal error: KeyError: 'edge_index' (at "),
    (IndexError("list index out of range"), EXIT_FAULT, "internal error: IndexError"),
])
def test_each_class_gets_its_status(exc, status, says):
    try:
        raise exc
    except BaseException as caught:
        got, line = classify(caught)
    assert got == status and says in line, line


_PLUGINS = {
    "missing-module": ("cherry_no_such_plugin_module", "No module named"),
    "raising-file": ("raising.py", "RuntimeError: the plugin raised"),
    "syntax-file": ("broken.py", "SyntaxError"),
    "missing-file": ("absent.py", "failed to import"),
}


@pytest.mark.parametrize("case", sorted(_PLUGINS))
def test_a_broken_plugin_is_one_line(case, tmp_path, monkeypatch, capsys, data_root):
    entry, says = _PLUGINS[case]
    (tmp_path / "raising.py").write_text("raise RuntimeError('the plugin raised')\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    if entry.endswith(".py"):
        entry = str(tmp_path / entry)
    monkeypatch.setenv("CHERRY_PLUGINS", entry)
    monkeypatch.setattr(plugins, "_loaded", set())
    assert main(["train", "--dataset", "synth-tiny", "--root", str(data_root), "--model", "mine", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and "CHERRY_PLUGINS" in err, err


def test_an_import_under_a_memory_limit_is_one_line():
    """The boundary is entered before torch is imported: an address-space limit that torch's libraries
    do not fit in is one line, not a traceback."""
    script = f"ulimit -v 200000; exec {sys.executable} -m cherry data info synth-tiny"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode < 0 or "bad_alloc" in result.stderr:
        pytest.skip("the interpreter itself did not start under the limit here")
    assert result.returncode == EXIT_FAULT and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and "out of host memory" in result.stderr, result.stderr


def test_the_cli_imports_no_torch_before_the_boundary():
    code = "import sys, cherry.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False", out.stderr


def test_sgd_weight_decay_that_overflows_is_one_line(data_root, capsys):
    argv = ["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16", "--fanouts", "5,5",
            "--batch-size", "200", "--max-steps", "1", "--epochs", "1", "--quiet", "--optimizer", "sgd",
            "--weight-decay", "1e300"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("weight" in err or "too large" in err), err


class _WrongWidth(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.lin = torch.nn.Linear(dims.in_dim, dims.out_dim + 1)  # one column too many

    def forward(self, block, h):
        return self.lin(h[: block.num_dst])


class _WrongRows(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.lin = torch.nn.Linear(dims.in_dim, dims.out_dim)

    def forward(self, block, h):
        return self.lin(h)  # every source row, not the destinations


class _NotATensor(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.lin = torch.nn.Linear(dims.in_dim, dims.out_dim)

    def forward(self, block, h):
        return (h,)


@pytest.mark.parametrize("layer", [_WrongWidth, _WrongRows, _NotATensor], ids=lambda c: c.__name__)
def test_a_user_layer_of_the_wrong_shape_names_layer_and_contract(layer, synth_tiny):
    from cherry.execution import Trainer
    from cherry.models import register_model
    from cherry.models.registry import unregister_model
    from cherry.spec import make_spec

    register_model("wrongshape", layer=layer, replace=True)
    try:
        trainer = Trainer(synth_tiny, make_spec(dataset="synth-tiny", model="wrongshape", hidden=16, fanouts=(5, 5),
                                                batch_size=200, max_steps_per_epoch=1, epochs=1, evaluate=False))
        with pytest.raises(ValueError) as info:
            list(trainer.fit())
        trainer.close()
    finally:
        unregister_model("wrongshape")
    message = str(info.value)
    assert f"layer 0 ({layer.__name__}) returned" in message and "layer(block, h) -> [block.num_dst, out_dim]" in message
    assert "\n" not in message
