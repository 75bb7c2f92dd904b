"""Nothing the project reads executes code: every reader of a pickled file loads it as data.

The mechanism is checked twice: the sources are walked for every way of unpickling (each ``torch.load``
must say ``weights_only=True``, no ``pickle.load``, no ``allow_pickle=True``, no switch that turns
torch's guard off), and one crafted pickle that creates a file when unpickled is fed to every reader
of a pickled file (checkpoints, cached tensors, OGB's processed files): each refuses it in one line
and the file is never created.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cherry.cli import main
from cherry.execution import Trainer
from cherry.execution.checkpoint import CheckpointError, load_best_model, read_checkpoint
from cherry.io import cached_tensor
from cherry.safe_load import UnsafeFileError, load_arrays, load_tensors
from cherry.spec import make_spec

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("cherry", "benchmarks", "baselines", "workflow") for p in (ROOT / d).rglob("*.py")]


class _Payload:
    """Unpickling it calls ``open(target, "w")``: a file appears where nothing should run."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


def crafted_pickle(target: Path, around=None) -> bytes:
    """A ``torch.save`` file whose loading with ``weights_only=False`` creates ``target``."""
    buf = io.BytesIO()
    payload = _Payload(target)
    torch.save(payload if around is None else around(payload), buf)
    return buf.getvalue()


def test_the_payload_really_runs_code_when_unpickled(tmp_path):
    """The fixture can fail: an unguarded load of it creates the file (in a child process)."""
    path, target = tmp_path / "evil.pt", tmp_path / "created"
    path.write_bytes(crafted_pickle(target))
    subprocess.run([sys.executable, "-c", f"import torch; torch.load({str(path)!r}, weights_only=False)"],
                   check=False, capture_output=True)
    assert target.exists()


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
            yield node, owner, name


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_source_unpickles_without_the_guard(path):
    text = path.read_text()
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in text, f"{path} turns torch's weights_only guard off"
    for node, owner, name in _calls(ast.parse(text)):
        keywords = {k.arg: k.value for k in node.keywords}
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        if owner == "torch" and name == "load":
            flag, module = keywords.get("weights_only"), keywords.get("pickle_module")
            restricted = isinstance(module, ast.Name) and module.id == "_ARRAYS_ONLY"  # cherry.safe_load's
            assert restricted or (isinstance(flag, ast.Constant) and flag.value is True), \
                f"{where}: torch.load without weights_only=True or the restricted unpickler"
        if owner in ("pickle", "cPickle", "dill", "joblib") and name in ("load", "loads", "Unpickler"):
            raise AssertionError(f"{where}: {owner}.{name} unpickles arbitrary objects")
        flag = keywords.get("allow_pickle")
        assert not (isinstance(flag, ast.Constant) and flag.value is True), f"{where}: allow_pickle=True"


def _spec(**config):
    base = dict(dataset="synth-tiny", hidden=16, fanouts=(5, 5), batch_size=200, max_steps_per_epoch=1,
                num_microbatches=2, seed=3, epochs=1)
    base.update(config)
    return make_spec(**base)


def _vouch(directory: Path, name: str, data: bytes) -> None:
    """Replace ``name`` by ``data`` and rewrite the index's sha256 to match (the same hand wrote both)."""
    (directory / name).write_bytes(data)
    index = json.loads((directory / "checkpoint.json").read_text())
    index["last" if name == "last.pt" else "best"]["sha256"] = hashlib.sha256(data).hexdigest()
    (directory / "checkpoint.json").write_text(json.dumps(index))


@pytest.fixture(scope="module")
def checkpoint_dir(synth_tiny, tmp_path_factory):
    directory = tmp_path_factory.mktemp("ck")
    trainer = Trainer(synth_tiny, _spec())
    list(trainer.fit(save_dir=directory))
    trainer.close()
    return directory


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


AROUND = {"bare": None, "in-a-dict": lambda p: {"format": "cherry-checkpoint", "model": p},
          "in-a-list": lambda p: [torch.zeros(2), p]}


@pytest.mark.parametrize("around", sorted(AROUND))
@pytest.mark.parametrize("name", ["last.pt", "best.pt"])
def test_a_crafted_checkpoint_is_refused_unexecuted(checkpoint_dir, tmp_path, name, around):
    directory, target = _copy(checkpoint_dir, tmp_path / "ck"), tmp_path / "created"
    _vouch(directory, name, crafted_pickle(target, AROUND[around]))
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(directory, _spec()) if name == "last.pt" else load_best_model(directory)
    message = str(info.value)
    assert "is refused" in message and name in message and "\n" not in message, message
    assert not target.exists()


def test_resume_from_a_crafted_checkpoint_is_one_line(checkpoint_dir, data_root, tmp_path, capsys):
    directory, target = _copy(checkpoint_dir, tmp_path / "ck"), tmp_path / "created"
    _vouch(directory, "last.pt", crafted_pickle(target))
    argv = ["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16", "--fanouts", "5,5",
            "--batch-size", "200", "--max-steps", "1", "--microbatches", "2", "--seed", "3", "--epochs", "1",
            "--quiet", "--resume", str(directory)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is refused" in err, err
    assert not target.exists()


def test_a_crafted_cached_tensor_is_recomputed_unexecuted(tmp_path):
    path, target = tmp_path / "cache.pt", tmp_path / "created"
    path.write_bytes(crafted_pickle(target))
    assert torch.equal(cached_tensor(path, lambda: torch.arange(3)), torch.arange(3))
    assert not target.exists()
    assert torch.equal(load_tensors(path, "cache"), torch.arange(3))  # the recomputed value was stored


def test_load_tensors_names_the_object_and_keeps_tensors(tmp_path):
    with pytest.raises(UnsafeFileError, match=r"^thing\.pt is refused: .*GLOBAL io\.open"):
        load_tensors(crafted_pickle(tmp_path / "created"), "thing.pt")
    data = {"w": torch.ones(2), "n": 3, "names": ["a"], "pair": (1.5, None)}
    buf = io.BytesIO()
    torch.save(data, buf)
    assert load_tensors(buf.getvalue(), "ok")["pair"] == (1.5, None)
    assert not (tmp_path / "created").exists()


@pytest.mark.parametrize("rel", ["processed/data_processed", "split/time/split_dict.pt"])
def test_a_crafted_ogb_processed_file_is_refused_unexecuted(tmp_path, rel):
    pytest.importorskip("ogb")
    from cherry.data.ogb_io import read_ogb
    from tests.unit.fake_ogb import write_fake_arxiv

    directory, target = write_fake_arxiv(tmp_path / "ogbn_arxiv"), tmp_path / "created"
    (directory / rel).parent.mkdir(parents=True, exist_ok=True)
    (directory / rel).write_bytes(crafted_pickle(target, lambda p: [{"edge_index": p}, None]))
    with pytest.raises(ValueError) as info:
        read_ogb("ogbn-arxiv", directory)
    message = str(info.value)
    assert "is refused" in message and rel.split("/")[-1] in message and "\n" not in message, message
    assert not target.exists()


def test_ogb_processed_file_of_numpy_arrays_still_loads(tmp_path):
    """OGB's own processed file (numeric numpy arrays) is still read: data, not code."""
    pytest.importorskip("ogb")
    from cherry.data.ogb_io import read_ogb
    from tests.unit.fake_ogb import write_fake_arxiv

    directory = write_fake_arxiv(tmp_path / "ogbn_arxiv")
    first = read_ogb("ogbn-arxiv", directory)
    assert (directory / "processed" / "data_processed").exists()  # OGB cached it; the second read loads it
    again = read_ogb("ogbn-arxiv", directory)
    assert (again["edge_index"] == first["edge_index"]).all() and again["num_nodes"] == 6


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_arrays_only_loader_at_every_pickle_protocol(tmp_path, protocol):
    import numpy as np

    good = {"graph": {"edge_index": np.arange(6).reshape(2, 3), "num_nodes": np.int64(3)},
            "labels": np.array([[1.0], [np.nan]], dtype=np.float32), "idx": torch.arange(3)}
    path = tmp_path / "good.pt"
    torch.save(good, path, pickle_protocol=protocol)
    back = load_arrays(path, "good.pt")
    assert (back["graph"]["edge_index"] == good["graph"]["edge_index"]).all() and back["graph"]["num_nodes"] == 3
    assert torch.equal(back["idx"], good["idx"])
    target = tmp_path / "created"
    for bad in (_Payload(target), np.array([_Payload(target)], dtype=object), {"deep": [(1, _Payload(target))]}):
        torch.save(bad, path, pickle_protocol=protocol)
        with pytest.raises(UnsafeFileError, match=r"^bad\.pt is refused: .*GLOBAL"):
            load_arrays(path, "bad.pt")
    assert not target.exists()
