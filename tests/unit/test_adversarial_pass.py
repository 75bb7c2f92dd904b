"""A held-out pass of adversarial inputs, as a new user would try them, run by ``make test``.

Each case is a command line (and what it finds on disk) that must end in one of the expected exit
statuses with every error on one line naming what was wrong: never a traceback, never a silent
acceptance of what does not apply, never a result lost after the work. The cases were designed apart
from the mechanism tests (`test_values_parsed_once.py`, `test_outputs_checked_first.py`,
`test_every_exception_one_line.py`, `test_interrupts.py`, `test_loads_run_no_code.py`,
`test_options_apply.py`), which prove each mechanism; this pass probes inputs those did not name.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pytest

from cherry import plugins
from cherry.cli import main

TRAIN = ["train", "--dataset", "synth-tiny", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "200",
         "--max-steps", "1", "--epochs", "1", "--quiet", "--no-eval"]


@dataclass(frozen=True)
class Case:
    argv: Callable[[Path], list]  # given the case's directory (a copy of synth-tiny's OGB layout in ``dir``)
    status: tuple  # the exit statuses allowed
    says: str = ""  # in the last stderr line (an error) or, for status 0, nothing required
    setup: Optional[Callable[[Path], None]] = None
    env: dict = field(default_factory=dict)


def _gz(rel: str, edit: Callable[[list], list]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / "dir" / rel
        if "{split}" in rel:
            path = root / "dir" / rel.format(split=next((root / "dir" / "split").iterdir()).name)
        rows = gzip.decompress(path.read_bytes()).decode().splitlines()
        path.write_bytes(gzip.compress(("\n".join(edit(rows)) + "\n").encode()))
    return apply


def _write(rel: str, data: bytes | str | None) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            path.unlink()
        elif data == "<dir>":
            path.unlink(missing_ok=True)
            path.mkdir()
        else:
            path.write_bytes(data.encode() if isinstance(data, str) else data)
    return apply


def _npz_layout(drop: str = "", labels: bool = True, objects: bool = False) -> Callable[[Path], None]:
    """Turn the case's directory into OGB's binary layout (raw/data.npz, raw/node-label.npz), less
    member ``drop``; ``labels`` False: an empty label archive; ``objects``: edges as an object array."""
    import numpy as np

    def apply(root: Path) -> None:
        raw = root / "dir" / "raw"
        edges = np.array([[0, 1, 2], [1, 2, 0]], dtype=object if objects else np.int64)
        arrays = {"edge_index": edges, "node_feat": np.zeros((2000, 2), np.float32),
                  "num_nodes_list": np.array([2000])}
        arrays.pop(drop, None)
        np.savez(raw / "data.npz", **arrays)
        np.savez(raw / "node-label.npz", **({"node_label": np.zeros((2000, 1))} if labels else {}))
    return apply


def _prepare(root: Path) -> list:
    return ["data", "prepare", str(root / "dir")]


def _train(*extra) -> Callable[[Path], list]:
    return lambda root: TRAIN + ["--root", str(root / "data")] + list(extra)


def _train_at(*extra) -> Callable[[Path], list]:
    """Train with ``{root}`` in ``extra`` replaced by the case's directory."""
    return lambda root: TRAIN + ["--root", str(root / "data")] + [str(e).format(root=root) for e in extra]


CASES = {
    # a dataset directory's files, edited as a user might
    "label-inf": Case(_prepare, (2,), "holds inf at row 3", _gz("raw/node-label.csv.gz", lambda r: r[:3] + ["inf"] + r[4:])),
    "label-minus-two": Case(_prepare, (2,), "label -2", _gz("raw/node-label.csv.gz", lambda r: ["-2"] + r[1:])),
    "label-hex": Case(_prepare, (2,), "0x10", _gz("raw/node-label.csv.gz", lambda r: ["0x10"] + r[1:])),
    "label-blank-line": Case(_prepare, (0, 2), "", _gz("raw/node-label.csv.gz", lambda r: r[:5] + [""] + r[5:])),
    "label-one-short": Case(_prepare, (2,), "labels", _gz("raw/node-label.csv.gz", lambda r: r[:-1])),
    "label-two-columns": Case(_prepare, (2,), "has rows of 2 columns", _gz("raw/node-label.csv.gz", lambda r: [x + ",0" for x in r])),
    "split-minus-one": Case(_prepare, (2,), "-1", _gz("split/{split}/train.csv.gz", lambda r: ["-1"] + r[1:])),
    "split-beyond-nodes": Case(_prepare, (2,), "99999", _gz("split/{split}/valid.csv.gz", lambda r: ["99999"] + r[1:])),
    "split-nan": Case(_prepare, (2,), "holds nan at row 0", _gz("split/{split}/test.csv.gz", lambda r: ["nan"] + r[1:])),
    "split-empty-train": Case(_prepare, (2,), "train", _write("dir/split/{split}/train.csv.gz", gzip.compress(b""))),
    "split-text": Case(_prepare, (2,), "'first'", _gz("split/{split}/train.csv.gz", lambda r: ["first"] + r[1:])),
    "edge-one-column": Case(_prepare, (2,), "", _gz("raw/edge.csv.gz", lambda r: r[:2] + ["5"] + r[3:])),
    "edge-negative": Case(_prepare, (2,), "-4", _gz("raw/edge.csv.gz", lambda r: ["-4,0"] + r[1:])),
    "edge-beyond-nodes": Case(_prepare, (2,), "2000", _gz("raw/edge.csv.gz", lambda r: ["2000,0"] + r[1:])),
    "edge-exponent": Case(_prepare, (2,), "1e3", _gz("raw/edge.csv.gz", lambda r: ["1e3,0.5"] + r[1:])),
    "edge-crlf": Case(_prepare, (0,), "", _gz("raw/edge.csv.gz", lambda r: [x + "\r" for x in r])),
    "feature-nan": Case(_prepare, (2,), "finite", _gz("raw/node-feat.csv.gz", lambda r: [",".join(["nan"] + r[0].split(",")[1:])] + r[1:])),
    "feature-text": Case(_prepare, (2,), "", _gz("raw/node-feat.csv.gz", lambda r: [",".join(["abc"] + r[0].split(",")[1:])] + r[1:])),
    "feature-short-row": Case(_prepare, (2,), "", _gz("raw/node-feat.csv.gz", lambda r: [r[0].split(",")[0]] + r[1:])),
    "num-nodes-fraction": Case(_prepare, (2,), "holds 2000.5 at row 0", _write("dir/raw/num-node-list.csv.gz", gzip.compress(b"2000.5\n"))),
    "labels-not-gzip": Case(_prepare, (2,), "node-label.csv.gz", _write("dir/raw/node-label.csv.gz", "0\n1\n")),
    "labels-missing": Case(_prepare, (2,), "lacks raw/node-label.csv.gz", _write("dir/raw/node-label.csv.gz", None)),
    "edges-a-directory": Case(_prepare, (1, 2), "edge.csv.gz", _write("dir/raw/edge.csv.gz", "<dir>")),
    "path-is-a-file": Case(lambda r: ["data", "prepare", str(r / "dir" / "raw" / "edge.csv.gz")], (2,), "edge.csv.gz"),
    "path-trailing-slash": Case(lambda r: ["data", "info", str(r / "dir") + "/"], (0,), ""),
    "path-not-a-dataset": Case(lambda r: ["data", "prepare", str(r / "dir" / "raw")], (2,), "expected exactly one split"),
    "path-scale-zero": Case(lambda r: ["data", "info", "synth-tiny", "--root", str(r / "data"), "--scale", "0"], (2,), "scale"),
    "scale-two": Case(lambda r: ["data", "info", "synth-tiny", "--root", str(r / "data"), "--scale", "2"], (2,), "scale"),
    "scale-nan": Case(lambda r: ["data", "info", "synth-tiny", "--root", str(r / "data"), "--scale", "nan"], (2,), "scale"),
    "real-dataset-scale": Case(lambda r: ["data", "info", "ogbn-arxiv", "--scale", "0.5"], (2,), "--scale"),
    "npz-without-node-feat": Case(_prepare, (2,), "has no member 'node_feat'", _npz_layout("node_feat")),
    "npz-without-edges": Case(_prepare, (2,), "has no member 'edge_index'", _npz_layout("edge_index")),
    "npz-empty-labels": Case(_prepare, (2,), "has no member 'node_label'", _npz_layout(labels=False)),
    "npz-object-edges": Case(_prepare, (2,), "data.npz", _npz_layout(objects=True)),
    # training options
    "hidden-zero": Case(_train("--hidden", "0"), (2,), "--hidden"),
    "hidden-negative": Case(_train("--hidden", "-5"), (2,), "--hidden"),
    "hidden-exponent": Case(_train("--hidden", "1e3"), (2,), "--hidden"),
    "batch-zero": Case(_train("--batch-size", "0"), (2,), "--batch-size"),
    "fanouts-empty": Case(_train("--fanouts", ""), (2,), "--fanouts"),
    "fanouts-gap": Case(_train("--fanouts", "5,,5"), (2,), "--fanouts"),
    "fanouts-word": Case(_train("--fanouts", "5,x"), (2,), "--fanouts"),
    "lr-negative": Case(_train("--lr", "-1"), (2,), "lr"),
    "dropout-one": Case(_train("--dropout", "1.0"), (2,), "dropout"),
    "dropout-negative": Case(_train("--dropout", "-0.1"), (2,), "dropout"),
    "epochs-fraction": Case(_train("--epochs", "1.5"), (2,), "--epochs"),
    "microbatches-zero": Case(_train("--microbatches", "0"), (2,), "--microbatches"),
    "microbatches-negative": Case(_train("--microbatches", "-1"), (2,), "--microbatches"),
    "budget-negative": Case(_train("--budget", "-1GiB"), (2,), "--budget"),
    "device-tpu": Case(_train("--device", "tpu"), (2,), "--device"),
    "model-unknown": Case(_train("--model", "transformer9"), (2,), "transformer9"),
    "aggr-unknown": Case(_train("--aggr", "median"), (2,), "median"),
    "layers-zero": Case(_train("--layers", "0"), (2,), "--layers"),
    "seed-negative": Case(_train("--seed", "-1"), (2,), "--seed"),
    "momentum-two": Case(_train("--optimizer", "sgd", "--momentum", "2"), (2,), "momentum"),
    "optimizer-empty": Case(_train("--optimizer", ""), (2,), "optimizer"),
    "nproc-zero": Case(_train("--nproc", "0"), (2,), "--nproc"),
    "ordering-unknown": Case(_train("--ordering", "alphabetical"), (2,), "alphabetical"),
    "max-steps-zero": Case(_train("--max-steps", "0"), (2,), "--max-steps"),
    "dataset-empty": Case(_train("--dataset", ""), (2,), "dataset"),
    "dataset-unknown": Case(_train("--dataset", "cora-but-not"), (2,), "cora-but-not"),
    "device-memory-one-byte": Case(_train("--device-memory", "1B", "--microbatches", "auto"), (2, 3), ""),
    # outputs, checkpoints and plugins
    "json-nul-byte": Case(_train("--json", "out\0.json"), (2,), "--json"),
    "json-name-too-long": Case(_train_at("--json", "{root}/" + "x" * 300 + ".json"), (2,), "--json"),
    "json-a-fifo": Case(_train_at("--json", "{root}/fifo"), (2,), "--json",
                        lambda r: os.mkfifo(r / "fifo")),
    "save-onto-a-file": Case(_train_at("--save", "{root}/f"), (2,), "--save", _write("f", "x")),
    "resume-missing-dir": Case(_train_at("--resume", "{root}/nowhere"), (2,), "no checkpoint"),
    "resume-garbage-index": Case(_train_at("--resume", "{root}/ck"), (2,), "corrupt",
                                 _write("ck/checkpoint.json", "{not json")),
    "resume-index-a-directory": Case(_train_at("--resume", "{root}/ck"), (1, 2), "checkpoint.json",
                                     _write("ck/checkpoint.json", "<dir>")),
    "resume-index-without-last": Case(_train_at("--resume", "{root}/ck"), (2,), "last.pt",
                                      _write("ck/checkpoint.json", json.dumps({"format": "cherry-checkpoint",
                                                                               "format_version": 1,
                                                                               "last": {"sha256": "0" * 64}}))),
    "plugin-a-directory": Case(_train("--model", "mine"), (2,), "CHERRY_PLUGINS", _write("plugdir/x", "x"),
                               env={"CHERRY_PLUGINS": "{root}/plugdir/"}),
    "plugin-exits": Case(_train("--model", "mine"), (2,), "CHERRY_PLUGINS", _write("exits.py", "import sys\nsys.exit(3)\n"),
                         env={"CHERRY_PLUGINS": "{root}/exits.py"}),
    "plugin-empty-entries": Case(_train("--model", "nope9"), (2,), "nope9", env={"CHERRY_PLUGINS": ",, ,"}),
    # benchmark commands
    "bench-num-nodes-zero": Case(lambda r: ["bench", "budget", "--num-nodes", "0"], (2,), "--num-nodes"),
    "bench-engine-ks-zero": Case(lambda r: ["bench", "engine", "--ks", "0", "--root", str(r / "data")], (2,), "--ks"),
    "bench-engine-ks-word": Case(lambda r: ["bench", "engine", "--ks", "two", "--root", str(r / "data")], (2,), "--ks"),
    "bench-engine-aggr-unknown": Case(lambda r: ["bench", "engine", "--aggrs", "median", "--root", str(r / "data")],
                                      (2,), "median"),
    "verify-tolerance-nan": Case(lambda r: ["verify", "--dataset", "synth-tiny", "--tolerance", "nan"], (2,), "--tolerance"),
}


@pytest.fixture
def case_root(synth_tiny, data_root, tmp_path, monkeypatch):
    shutil.copytree(data_root / "synth_tiny", tmp_path / "dir", ignore=shutil.ignore_patterns("cherry", "processed"))
    (tmp_path / "data").symlink_to(data_root)  # training reads the session's prepared synth-tiny
    monkeypatch.setattr(plugins, "_loaded", set())
    monkeypatch.delenv("CHERRY_PLUGINS", raising=False)
    monkeypatch.delenv("CHERRY_TRACEBACK", raising=False)
    return tmp_path


def test_the_pass_has_at_least_sixty_cases():
    assert len(CASES) >= 60


@pytest.mark.parametrize("name", sorted(CASES))
def test_adversarial_case(name, case_root, capsys, monkeypatch):
    case = CASES[name]
    if case.setup is not None:
        case.setup(case_root)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.format(root=case_root))
    try:
        status = main(case.argv(case_root))
    except SystemExit as exc:  # argparse's one-line errors
        status = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    assert status in case.status, f"{name}: exit {status}, expected {case.status}: {err[-2000:]}"
    if status != 0:
        errors = [line for line in err.splitlines() if line.startswith("cherry")]
        assert len(errors) == 1, f"{name}: {err[-2000:]}"
        assert case.says in errors[0], f"{name}: {errors[0]!r} lacks {case.says!r}"
