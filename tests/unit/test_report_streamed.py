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
