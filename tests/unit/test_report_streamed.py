"""The workflow's summary names the subject's steps that streamed their input layer (from the records)."""
import pandas as pd

from cherry.report.summary import streamed_note
from cherry.systems.table import subject_system


def test_the_summary_names_the_subjects_streamed_steps():
    me = subject_system()
    rows = pd.DataFrame({"system": [me, me, "dgl"], "case": ["a", "b", "a"], "k": ["1", "auto", "1"],
                         "streamed_steps": [3, 0, 5], "steps_completed": [6, 6, 6], "warmup_steps": [2, 2, 2]})
    assert streamed_note(rows) == ["", f"{me} streamed its input layer (`stream_inputs`) in a at K 1: "
                                       "3 of 4 measured steps."]
    assert streamed_note(rows[rows["case"] == "b"]) == []  # no step streamed
    assert streamed_note(rows.drop(columns="streamed_steps")) == []  # records from before the field


def _accuracy_cap_rows(streamed: list) -> pd.DataFrame:
    """Two seeds of the subject at its own K and one of plain DGL at its largest batch, under 16 MiB."""
    me = subject_system()
    n = 3
    return pd.DataFrame({
        "experiment": ["accuracy_cap"] * n, "axis": ["own_k", "own_k", "largest_batch"], "system": [me, me, "dgl"],
        "k": ["auto", "auto", "1"], "batch_size": [256, 256, 128], "fanouts": ["5,10"] * n,
        "device_memory_bytes": [16 * 2**20] * n, "dataset": ["photo"] * n, "model": ["sage"] * n,
        "aggr": ["mean"] * n, "num_layers": [2] * n, "hidden": [128] * n, "status": ["ok"] * n,
        "num_microbatches_max": [1, 2, 1], "epoch_valid_acc": [[0.5, 0.8]] * n, "epoch_test_acc": [[0.5, 0.8]] * n,
        "step_times_s": [[0.1] * 4] * n, "streamed_steps": streamed, "steps_completed": [36, 36, 72],
        "warmup_steps": [1, 1, 1], "case": ["photo batch 256"] * 2 + ["photo batch 128"]})


def test_the_accuracy_cap_section_names_the_subjects_streamed_runs():
    from cherry.report.summary import accuracy_cap_section

    me = subject_system()
    lines = accuracy_cap_section(_accuracy_cap_rows([30, 0, 0]))
    # named by the section's case (batch and fanouts left out: a fitted run changes them), seeds summed
    assert lines[-2:] == ["", f"{me} streamed its input layer (`stream_inputs`) in photo sage-mean L2 H128 cap 16 "
                              "MiB at K auto: 30 of 70 measured steps."]
    assert not any("streamed its input layer" in line for line in accuracy_cap_section(_accuracy_cap_rows([0, 0, 0])))
