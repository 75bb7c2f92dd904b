"""The README's headline claims come from the memory wall's records: the generator on a fixture, and
the README's generated region against `results/` where a run has left its search records."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cherry.report.headline import BEGIN, END, headline, main, region, replace_region
from cherry.report.tables import SEARCH_COLUMNS, load_searches

ROOT = Path(__file__).resolve().parents[2]
SEARCHES = sorted((ROOT / "results" / "records" / "searches").glob("*.json"))


def _row(system, k, wall_reason, largest, status="ok", recompute=False):
    row = dict.fromkeys(SEARCH_COLUMNS)
    row.update(case="synth-tiny gat L4", system=system, k=k, status=status, wall_reason=wall_reason,
               largest_fit_batch=largest, recompute_at_largest=recompute, device_memory_bytes=9017753,
               capped_at_training_set=wall_reason == "training_set")
    return row


def _fixture() -> pd.DataFrame:
    return pd.DataFrame([_row("naive", "auto", "single_seed", 8), _row("dgl", "1", "training_set", 1200),
                         _row("cherry", "auto", "stopped", 1024, status="timeout", recompute=True)])


def test_headline_says_who_reaches_what():
    text = headline(_fixture())
    assert "under 8.6 MiB" in text
    assert "stopped because one seed did not fit: naive (K=auto) up to 8" in text
    assert "went on with recomputation: cherry (K=auto) up to 1,024" in text
    assert "reached the training set without recomputation: dgl up to 1,200" in text
    assert "a probe timed out, so at least: cherry (K=auto) up to 1,024" in text


def test_region_is_replaced_and_nothing_else(tmp_path):
    page = f"# Title\n\nbefore\n\n{BEGIN}\nold claim\n{END}\n\nafter\n"
    new = replace_region(page, "new claim")
    assert region(new) == "new claim" and new.startswith("# Title\n\nbefore\n\n") and new.endswith(f"{END}\n\nafter\n")
    with pytest.raises(ValueError, match="exactly one region"):
        region(page + BEGIN)


def test_readme_headline_matches_the_records():
    text = (ROOT / "README.md").read_text()
    region(text)  # the README carries its generated region
    if not SEARCHES:
        pytest.skip("no memory-wall records under results/ (make run writes them): the generator is tested on a fixture")
    assert region(text) == headline(load_searches(SEARCHES)), (
        "README.md's headline differs from results/: run `python -m cherry.report.headline --readme README.md "
        "results/records/searches/*.json`")


def test_command_rewrites_a_copy(tmp_path):
    if not SEARCHES:
        pytest.skip("no memory-wall records under results/ (make run writes them)")
    copy = tmp_path / "README.md"
    copy.write_text(f"x\n{BEGIN}\n{END}\n")
    assert main(["--readme", str(copy), *map(str, SEARCHES)]) == 0
    assert region(copy.read_text()) == headline(load_searches(SEARCHES))


REAL_RECORDS = ROOT / "results" / "real" / "results"


def _run(system, axis, k, batch, accs, seed, status="ok"):
    """One accuracy-under-a-cap run record: its valid and test accuracy after each epoch."""
    return {"experiment": "accuracy_cap", "axis": axis, "system": system, "k": k, "seed": seed,
            "device_memory_bytes": 12 * 2**20, "dataset": "amazon-photo", "model": "sage", "aggr": "mean",
            "num_layers": 2, "hidden": 128, "heads": 1, "batch_size": batch, "fanouts": "5,10", "status": status,
            "epoch_valid_acc": list(accs), "epoch_test_acc": list(accs), "step_times_s": [0.1] * len(accs),
            "num_microbatches_max": 4 if k == "auto" else 1, "streamed_steps": 0, "steps_completed": 5,
            "warmup_steps": 1, "case": "amazon-photo"}


def test_real_region_states_accuracy_verdicts_from_the_run_table():
    runs = pd.DataFrame([_run("cherry", "own_k", "auto", 1024, [0.5, 0.6], s) for s in (0, 1)]
                        + [_run("dgl", "largest_batch", "1", 64, [0.8, 0.9 + s / 100], s) for s in (0, 1)]
                        + [_run("pyg", "largest_batch", "1", 16, [0.7], 0, status="timeout")])
    from cherry.report.headline import REGIONS, RegionInputs, accuracy_verdicts, real_headline

    lines = accuracy_verdicts(runs)
    assert len(lines) == 1 and "cap 12 MiB" in lines[0]
    assert "0.600 [0.600, 0.600] over 2 of 2 seeds" in lines[0]
    assert "batch 64, fanouts 5,10: 0.905 [0.900, 0.910] over 2 of 2 seeds (cherry lower)" in lines[0]
    assert "no seed finished" in lines[0]
    text = real_headline(RegionInputs(_fixture(), runs, ()))
    assert "`make run-real`" in text and "went on with recomputation" in text and lines[0] in text
    page = f"{BEGIN}\nwall\n{END}\n{REGIONS['real'].begin}\nreal\n{END}\n"
    assert region(page) == "wall" and region(page, REGIONS["real"].begin) == "real"
    assert region(replace_region(page, "new", REGIONS["real"].begin)) == "wall"


def test_readme_real_region_matches_the_real_records():
    from cherry.report.headline import REGIONS, RegionInputs, real_headline
    from cherry.report.tables import load_table

    begin = REGIONS["real"].begin
    text = (ROOT / "README.md").read_text()
    region(text, begin)  # the README carries the real run's generated region
    searches = sorted((REAL_RECORDS / "records" / "searches").glob("*.json"))
    if not searches or not (REAL_RECORDS / "records" / "runs.csv").exists():
        pytest.skip("no real-graph records under results/real/ (make run-real writes them)")
    inputs = RegionInputs(load_searches(searches), load_table(REAL_RECORDS / "records" / "runs.csv"),
                          tuple(map(str, sorted((REAL_RECORDS / "verify").glob("*.json")))))
    assert region(text, begin) == real_headline(inputs), (
        f"README.md's real-graph region differs from results/real/: run the command in {begin}")


def test_real_region_needs_the_run_table(tmp_path, capsys):
    copy = tmp_path / "README.md"
    copy.write_text("x\n")
    with pytest.raises(SystemExit):
        main(["--region", "real", "--readme", str(copy), "searches.json"])
    assert "needs --table" in capsys.readouterr().err


BUDGET_RECORD = ROOT / "results" / "bench" / "budget.json"


def _budget_row(config, model, peak, k_ratio, jumps=0):
    return {"config": config, "model": model, "user_model": model.startswith("dgl"), "peak_over_budget": peak, "peak_over_capacity": peak - 0.1,
            "k_over_smallest_median": k_ratio, "k_unforced_jumps": jumps}


def test_budget_region_states_the_targets_of_the_bench_record(tmp_path):
    import json

    from cherry.report.headline import REGIONS, budget_headline

    rows = [_budget_row("chung-lu/sage-mean/L2/5,10", "sage", 0.93, 1.0), _budget_row("synth-products/gat", "gat", 1.015, 1.5, 2),
            _budget_row("chung-lu/dgl-gat/L2/5,10/x256", "dgl-gat", 0.92, 1.04)]
    bench = {"rows": rows,
             "summary": {"aborted_steps": 0, "refused_steps": 1, "recompute_rows": 2, "k_over_smallest_median": 1.0,
                         "k_unforced_jumps": 2, "estimator_error_median": 0.016}}
    text = budget_headline(bench)
    assert "| 0 / 1 over 3 configuration-capacity rows; recomputation on 2 rows |" in text
    assert "1.015 (synth-products/gat, 0.915 of the capacity); users' models at most 0.920 |" in text
    assert "1.00 (largest row median 1.50; users' models at most 1.04) |" in text and "2 steps on 1 row |" in text
    record, page = tmp_path / "budget.json", tmp_path / "README.md"
    record.write_text(json.dumps(bench))
    page.write_text(f"{REGIONS['budget'].begin}\nold\n{END}\n")
    assert main(["--region", "budget", "--readme", str(page), str(record)]) == 0
    assert region(page.read_text(), REGIONS["budget"].begin) == text
    record.write_text("[]")
    assert main(["--region", "budget", "--readme", str(page), str(record)]) == 2


def test_readme_budget_region_matches_the_bench_record():
    import json

    from cherry.report.headline import REGIONS, budget_headline

    begin = REGIONS["budget"].begin
    text = (ROOT / "README.md").read_text()
    region(text, begin)  # the README carries the budget benchmark's generated region
    if not BUDGET_RECORD.exists():
        pytest.skip("no results/bench/budget.json (the README's `cherry bench budget` command writes it)")
    assert region(text, begin) == budget_headline(json.loads(BUDGET_RECORD.read_text())), (
        f"README.md's budget region differs from {BUDGET_RECORD}: run the command in {begin}")


@pytest.mark.parametrize("name", ["wall", "real", "budget"])
def test_each_marker_names_a_command_the_parser_reads(name):
    """The command in a region's marker, its globs stood for by two files each, parses into that
    region's records (and, for the real region, its table and `cherry verify` records)."""
    import shlex

    from cherry.report.headline import REGIONS, parser

    command = REGIONS[name].begin.removeprefix("<!-- generated from records: ").removesuffix(" -->")
    tokens = shlex.split(command)
    assert tokens[:3] == ["python", "-m", "cherry.report.headline"]
    argv = [t2 for t in tokens[3:] for t2 in ([t.replace("*", "a"), t.replace("*", "b")] if "*" in t else [t])]
    args = parser().parse_args(argv)
    assert args.region == name and args.records and all("verify" not in r for r in args.records)
    if name == "real":
        assert args.table.endswith("runs.csv") and len(args.verify) == 2
