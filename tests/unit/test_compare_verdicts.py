"""Comparing the verdicts of two workflow runs' summary.json (cherry.report.compare_verdicts)."""
from __future__ import annotations

import json

from cherry.report.compare_verdicts import compare, load_ratios, main


def ratio(key: str, value: float, low: float, high: float, verdict: str) -> dict:
    return {"section": "step_time", "key": key, "value": value, "low": low, "high": high, "verdict": verdict}


def write(path, ratios) -> str:
    path.write_text(json.dumps({"git_sha": ["x"], "num_runs": 3, "ratios": ratios}))
    return str(path)


def test_agreeing_runs_exit_0_and_print_both_verdicts(tmp_path, capsys):
    a = write(tmp_path / "a.json", [ratio("K=4 | betty/cherry", 1.3, 1.2, 1.45, "cherry faster"),
                                    ratio("K=16 | betty/cherry", 1.0, 0.9, 1.2, "within noise")])
    b = write(tmp_path / "b.json", [ratio("K=16 | betty/cherry", 1.05, 0.95, 1.1, "within noise"),
                                    ratio("K=4 | betty/cherry", 1.4, 1.25, 1.5, "cherry faster")])
    assert main([a, b]) == 0
    out = capsys.readouterr().out
    assert "| K=4 | betty/cherry | 1.3 [1.2, 1.45] cherry faster | 1.4 [1.25, 1.5] cherry faster | yes |" in out
    assert out.strip().endswith("2 of 2 verdicts agree")


def test_a_changed_or_missing_verdict_is_a_disagreement(tmp_path, capsys):
    a = write(tmp_path / "a.json", [ratio("x", 1.3, 1.1, 1.5, "cherry faster"), ratio("only-a", 1, 0.9, 1.1, "within noise")])
    b = write(tmp_path / "b.json", [ratio("x", 1.1, 0.98, 1.2, "within noise"), ratio("only-b", 1, 0.9, 1.1, "within noise")])
    assert main([a, b]) == 1
    out = capsys.readouterr().out
    assert "| x | 1.3 [1.1, 1.5] cherry faster | 1.1 [0.98, 1.2] within noise | NO |" in out
    assert "| only-a | 1 [0.9, 1.1] within noise | missing | NO |" in out
    assert "| only-b | missing |" in out and "0 of 3 verdicts agree" in out
    keys = [c.key for c in compare(load_ratios(a), load_ratios(b))]
    assert keys == ["x", "only-a", "only-b"]


def test_unreadable_inputs_give_one_line_and_exit_2(tmp_path, capsys):
    good = write(tmp_path / "a.json", [])
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    twice = write(tmp_path / "twice.json", [ratio("x", 1, 1, 1, "within noise")] * 2)
    for path, fragment in ((tmp_path / "bad.json", "not valid JSON"), (tmp_path / "other.json", "no 'ratios' list"),
                           (tmp_path / "missing.json", "cannot read"), (twice, "appears twice")):
        assert main([good, str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("cherry.report.compare_verdicts:") and fragment in err and "\n" not in err
