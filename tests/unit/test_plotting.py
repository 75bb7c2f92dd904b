"""`cherry.report.plotting.label_row`: one call labels a row of panels the way every figure does."""
from __future__ import annotations

import pytest

from cherry.report.plotting import grid, label_row, pyplot


def test_label_row_labels_each_panel_and_the_first_legend():
    fig, axes = grid(1, 2)
    for ax in axes[0]:
        ax.plot([0, 1], [0, 1], label="cherry")
    label_row(axes[0], "synth-tiny", ("seconds", "epoch"), "accuracy", legend_fontsize=6)
    assert [ax.get_xlabel() for ax in axes[0]] == ["seconds", "epoch"]
    assert [ax.get_ylabel() for ax in axes[0]] == ["accuracy", "accuracy"]
    assert [ax.get_title() for ax in axes[0]] == ["synth-tiny", "synth-tiny"]
    assert axes[0][0].get_legend() is not None and axes[0][1].get_legend() is None
    assert axes[0][0].get_legend().get_texts()[0].get_fontsize() == 6
    with pytest.raises(ValueError):
        label_row(axes[0], "synth-tiny", ("seconds",), "accuracy")  # one label per panel
    pyplot().close(fig)
