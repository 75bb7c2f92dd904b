"""SIGINT and SIGTERM are handled alike by every command (`cherry.errors.run_boundary`): the step in
flight is abandoned, ``cherry train`` writes its ``--json`` with status ``interrupted``, the last
checkpoint is kept whole (a save is never cut), and the exit status is 128 + the signal. ``cherry
train`` drives `Trainer.fit`: it has no epoch loop of its own."""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cherry.cli import main
from cherry.errors import Interrupted, interrupts_deferred, interrupts_handled, run_boundary
from cherry.execution import Trainer
from cherry.execution.checkpoint import Checkpointer, load_best_model, read_checkpoint
from cherry.spec import make_spec

ROOT = Path(__file__).resolve().parents[2]
SIGNALS = [signal.SIGINT, signal.SIGTERM]


def _train_argv(data_root, tmp_path, epochs=3):
    return ["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16", "--fanouts", "5,5",
            "--batch-size", "200", "--max-steps", "2", "--microbatches", "2", "--seed", "3", "--quiet",
            "--epochs", str(epochs), "--save", str(tmp_path / "ck"), "--json", str(tmp_path / "s.json")]


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_boundary_maps_each_signal_to_128_plus_it(signum, capsys):
    def body():
        os.kill(os.getpid(), signum)
        raise AssertionError("the signal did not interrupt the body")

    before = signal.getsignal(signum)
    assert run_boundary("prog", body) == 128 + signum
    assert capsys.readouterr().err.strip() == f"prog: interrupted ({signal.Signals(signum).name})"
    assert signal.getsignal(signum) is before  # restored


def test_a_deferred_block_is_not_cut():
    done = []
    with interrupts_handled():
        with pytest.raises(Interrupted) as info:
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                done.append("rest of the block")
        assert info.value.signum == signal.SIGTERM and done == ["rest of the block"]
        with interrupts_deferred():  # nothing pending is left over
            done.append("next")
    assert done == ["rest of the block", "next"]


def _kill_at_step(monkeypatch, signum, at_step):
    calls = {"n": 0}
    real = Trainer.step

    def step(self, planned):
        calls["n"] += 1
        if calls["n"] == at_step:
            os.kill(os.getpid(), signum)  # arrives inside the step
        return real(self, planned)

    monkeypatch.setattr(Trainer, "step", step)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_train_interrupted_keeps_its_summary_and_last_checkpoint(signum, data_root, tmp_path, monkeypatch, capsys):
    _kill_at_step(monkeypatch, signum, at_step=3)  # the first step of epoch 1
    assert main(_train_argv(data_root, tmp_path)) == 128 + signum
    err = capsys.readouterr().err
    assert f"interrupted ({signal.Signals(signum).name})" in err.strip().splitlines()[-1]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["status"] == "interrupted" and [e["epoch"] for e in summary["epochs"]] == [0]
    spec = make_spec(dataset="synth-tiny", hidden=16, fanouts=(5, 5), batch_size=200, max_steps_per_epoch=2,
                     num_microbatches=2, seed=3, epochs=3)
    assert read_checkpoint(tmp_path / "ck", spec)["epochs_done"] == 1
    assert not [p for p in (tmp_path / "ck").iterdir() if ".tmp-" in p.name]
    monkeypatch.undo()
    assert main(_train_argv(data_root, tmp_path) + ["--resume", str(tmp_path / "ck")]) == 0  # resumable
    resumed = json.loads((tmp_path / "s.json").read_text())
    assert [e["epoch"] for e in resumed["epochs"]] == [0, 1, 2] and resumed["resumed_epochs"] == 1


def test_a_signal_during_a_save_waits_for_the_save(data_root, tmp_path, monkeypatch, capsys):
    real = Checkpointer._save

    def save(self, trainer, result):
        os.kill(os.getpid(), signal.SIGTERM)  # mid-save: before any file of it is written
        real(self, trainer, result)

    monkeypatch.setattr(Checkpointer, "_save", save)
    assert main(_train_argv(data_root, tmp_path)) == 128 + signal.SIGTERM
    capsys.readouterr()
    directory = tmp_path / "ck"
    index = json.loads((directory / "checkpoint.json").read_text())
    assert index["epochs_done"] == 1 and load_best_model(directory)["epoch"] == 0  # the save completed, vouched


_TERM_CHILD = """
import os, signal, sys
from cherry.cli import main
from cherry.execution import Trainer
real = Trainer.step
calls = [0]
def step(self, planned):
    calls[0] += 1
    if calls[0] == 3:
        print("STEP", flush=True)
        signal.pause() if hasattr(signal, "pause") else None
    return real(self, planned)
Trainer.step = step
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_from_outside_writes_the_summary(data_root, tmp_path):
    """What a scheduler or ``timeout`` does: SIGTERM from another process ends the run with 143."""
    argv = _train_argv(data_root, tmp_path)
    child = subprocess.Popen([sys.executable, "-c", _TERM_CHILD, *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    try:
        for line in child.stdout:
            if line.strip() == "STEP":
                break
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 143, err
    assert err.strip().splitlines()[-1].endswith("interrupted (SIGTERM)"), err
    assert json.loads((tmp_path / "s.json").read_text())["status"] == "interrupted"


def test_the_train_command_has_no_loop_of_its_own():
    tree = ast.parse((ROOT / "cherry" / "cli" / "train.py").read_text())
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and not (isinstance(n.value, ast.Name) and n.value.id == "args")}  # options are no loop
    assert not names & {"run_epoch", "train_epoch", "_resumed", "step", "resume"}, names
    assert "fit" in names
