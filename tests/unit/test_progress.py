"""Progress on long work (`cherry.progress`): a bar with a count, a rate and an estimate on an
interactive terminal, nothing per task elsewhere (one line per epoch from `cherry train`), nothing at
all where no caller turned it on."""
from __future__ import annotations

import io
import sys
import time

import pytest

from cherry import progress


class Terminal(io.StringIO):
    """A stream that says it is an interactive terminal."""

    def isatty(self) -> bool:
        return True


BAR = ("\r", "|", "█")  # what a bar leaves in a stream


def test_a_terminal_shows_a_bar_with_rate_and_estimate():
    stream = Terminal()
    with progress.shown(stream), progress.task("epoch 0", 3, "step") as shown:
        for _ in range(3):
            time.sleep(0.15)  # tqdm redraws at most every 0.1 s
            shown.advance(1, loss="0.5000")
    text = stream.getvalue()
    assert "epoch 0" in text and "3/3" in text and "step/s" in text and "<" in text and "loss=0.5000" in text


def test_a_log_gets_no_bar():
    stream = io.StringIO()
    with progress.shown(stream), progress.task("epoch 0", 3, "step") as shown:
        shown.advance(3)
    assert stream.getvalue() == ""


def test_nothing_is_shown_unless_asked(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    with progress.task("epoch 0", 3) as shown:
        shown.advance(3)
    assert sys.stderr.getvalue() == "" and capsys.readouterr().out == ""


def test_a_bar_is_removed_when_its_task_ends_however_it_ends():
    stream = Terminal()
    with progress.shown(stream), pytest.raises(KeyError):
        with progress.task("evaluate", 10, "node") as shown:
            shown.advance(4)
            raise KeyError("stop")
    assert stream.getvalue().rstrip(" ").endswith("\r")  # tqdm's leave=False clears its line


TRAIN = ["train", "--dataset", "synth-tiny", "--hidden", "16", "--fanouts", "4,4", "--batch-size", "512",
         "--epochs", "2", "--max-steps", "2"]


@pytest.mark.parametrize("terminal", [True, False])
def test_cherry_train_bars_on_a_terminal_and_one_line_per_epoch_otherwise(terminal, synth_tiny, data_root,
                                                                       monkeypatch, capsys):
    from cherry.cli import main

    stream = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    assert main([*TRAIN, "--root", str(data_root)]) == 0
    out, err = capsys.readouterr().out, stream.getvalue()
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("epoch ")] == ["epoch 0", "epoch 1"]
    if terminal:  # the steps of each epoch, then each layer of its evaluation
        for what in ("epoch 0", "epoch 1", "evaluate layer 1/2", "evaluate layer 2/2", "step/s", "node/s"):
            assert what in err, what
    else:
        assert not any(mark in err for mark in BAR), err
        assert not any(mark in out for mark in BAR[1:]), out


def test_whole_model_evaluation_shows_its_progress(synth_tiny):
    """A model without a layer-wise form is evaluated in chunks of seeds, shown as one task."""
    import torch

    from cherry.execution.block_inference import evaluate_blocks

    class Mean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(synth_tiny.features.shape[1], synth_tiny.num_classes)

        def forward(self, blocks, x):
            return self.fc(x[: blocks.num_seeds])

    stream = Terminal()
    with progress.shown(stream):
        evaluate_blocks(Mean(), synth_tiny, 1, seeds_per_chunk=512)
    assert "evaluate" in stream.getvalue() and "node/s" in stream.getvalue()
