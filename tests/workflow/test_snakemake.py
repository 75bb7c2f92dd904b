"""The Snakemake workflow end to end on a tiny config, its config checks, lint and the paper plan.

The end-to-end test runs the real Snakefile in a temporary working directory (its own data root and
results) with a matrix on synth-tiny that touches every rule and figure (about 30 runs and 4 setting
searches, 2.5-5 min on two shared cores), then builds the HTML report and checks that a second
invocation has nothing to do.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cherry.bench.experiments import plan_fits, plan_runs, plan_searches
from cherry.bench.phases import figure_sources

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"
FIGURES = tuple(figure_sources())  # the experiment table's figures: the tiny config draws every one


def tiny_config(root: Path) -> dict:
    return {
        "data": {"root": str(root)},
        "threads": 1,
        "run": {"device": "cpu", "aggr": "mean", "hidden": 16, "fanouts": [5, 10], "batch_size": 256,
                "epochs": 0, "warmup": 1, "steps": 2, "evaluate": False, "timeout_s": 120},
        "experiments": {
            # full peaks at ~16 MiB for batch 512 with LSTM: out of memory under 12 MiB; cherry splits
            # the bucketed LSTM: the CPU's step LSTM (auto) fits batch 512 in 12 MiB
            "memory_wall": [{"dataset": "synth-tiny", "device_memory_bytes": "12MiB", "start_batch": 128,
                             "systems": {"cherry": ["auto"], "full": [1], "betty": [2]},
                             "run": {"aggr": "lstm", "lstm_impl": "bucketed", "warmup": 0, "steps": 1}}],
            "epoch_time": [{"dataset": "synth-tiny", "device_memory_bytes": ["8MiB", "64MiB"],
                            "systems": {"cherry": ["auto"], "full": [1]},
                            "run": {"aggr": "lstm", "lstm_impl": "bucketed", "batch_size": 512}}],
            "microbatch_cost": [{"dataset": "synth-tiny", "systems": {"full": [1], "cherry": [2, 4], "betty": [2],
                                                                      "buffalo": [2], "naive": [2]}}],
            "breakdown": [{"dataset": "synth-tiny", "systems": {"full": [1], "cherry": [2], "buffalo": [2]}}],
            "convergence": [{"dataset": "synth-tiny", "systems": {"full": [1], "cherry": [2]},
                             "run": {"epochs": 2, "evaluate": True}}],
            "sensitivity": [{"dataset": "synth-tiny", "systems": {"full": [1], "cherry": ["auto"]},
                             "run": {"budget_bytes": "2MiB"}, "vary": {"aggr": ["mean", "gat"]}}],
            "ablation": [{"dataset": "synth-tiny", "num_microbatches": [2], "variants": [{"pipeline": False}],
                          "repeats": 2, "run": {"steps": 3}}],  # 2 repeats: a ratio with a verdict
            "distributed": [{"dataset": "synth-tiny", "nproc": [2], "num_microbatches": [2]}],
            # plain DGL (~1.5 MiB at batch 512, hidden 64) under 1 MiB: its batch and its fanouts searched
            "accuracy_cap": [{"dataset": "synth-tiny", "device_memory_bytes": "1MiB",
                              "systems": {"dgl": [1], "cherry": ["auto"]}, "fit_steps": 3,
                              "run": {"hidden": 64, "batch_size": 512, "epochs": 2, "evaluate": True}}],
        },
        "verify": [{"name": "sage-mean", "dataset": "synth-tiny", "aggr": "mean", "hidden": 16, "fanouts": [5, 10],
                    "batch_size": 256, "num_microbatches": 2}],
        "planner": {"graphs": ["chung-lu", "synth-tiny"], "num_nodes": 2000, "batch_sizes": [256], "ks": [2, 4],
                    "repeats": 1},
    }


def snakemake(workdir: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A workdir in which the tiny workflow ran to the end (fails the tests using it otherwise)."""
    workdir = tmp_path_factory.mktemp("workflow")
    config = tiny_config(workdir / "data")
    write_config(workdir, config)
    # Nothing here compares the tiny runs' times, so a timed run need not claim both cores and run
    # alone (about a third of the wall time went to timed runs in turn); that claim is checked by
    # test_timed_runs_claim_every_core_and_keep_their_compute_threads.
    result = snakemake(workdir, "--cores", "2", "--max-threads", "1", "--quiet", timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir, config


def test_every_figure_table_summary_and_record_exists(finished):
    workdir, config = finished
    results = workdir / "results"
    for name in FIGURES + ("planner_redundancy",):
        png, pdf = results / "figures" / f"{name}.png", results / "figures" / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert pdf.read_bytes()[:5] == b"%PDF-", name
    runs = plan_runs(config)
    for run, spec in runs.items():
        record = json.loads((results / "records" / "runs" / f"{run}.json").read_text())
        assert record["run_id"] == run and record["experiment"] == spec["experiment"]
        # the spec file reproduces the run by hand: python -m cherry.bench.run --spec ... --out ...
        assert json.loads((results / "specs" / f"{run}.json").read_text()) == spec
    table = pd.read_csv(results / "records" / "runs.csv")
    fitted = plan_fits(config)[1]  # runs named by their spec before the fit: their records hold the fitted spec
    assert sorted(table["run_id"][~table["axis"].isin(["largest_batch", "largest_fanouts"])]) == sorted(runs)
    assert len(table) == len(runs) + len(fitted)
    assert len(pd.read_parquet(results / "records" / "runs.parquet")) == len(runs) + len(fitted)
    assert set(table["status"]) <= {"ok", "oom"}
    assert (table["status"] == "ok").sum() >= len(runs) - 3  # full at 8 MiB (epoch time) is out of memory
    assert table[table["experiment"] == "distributed"]["nproc"].tolist() == [2]
    searches = {s["spec"]["system"]: json.loads((results / "records" / "searches" / f"{i}.json").read_text())
                for i, s in plan_searches(config).items()}
    # full (~16 MiB at batch 512 with LSTM) hits the 12 MiB wall; cherry trains the whole training set
    assert searches["full"]["status"] == "ok" and searches["full"]["largest_fit_batch"] < 512
    assert searches["full"]["smallest_oom_batch"] is not None
    assert searches["cherry"]["capped_at_training_set"] and searches["cherry"]["largest_fit_batch"] == 1200
    epoch = table[table["experiment"] == "epoch_time"].set_index(["system", "device_memory_bytes"])["status"]
    assert epoch[("full", 8 * 2**20)] == "oom" and epoch[("cherry", 8 * 2**20)] == "ok"
    ratios = json.loads((results / "summary.json").read_text())["ratios"]
    assert [r["key"].split(" | ")[-1] for r in ratios] == ["pipeline=false / all on"]
    assert ratios[0]["runs"] == [2, 2] and ratios[0]["verdict"] in ("the technique pays", "within noise",
                                                                    "the technique costs")
    compared = subprocess.run([sys.executable, "-m", "cherry.report.compare_verdicts", str(results / "summary.json"),
                               str(results / "summary.json")], capture_output=True, text=True)
    assert compared.returncode == 0 and "1 of 1 verdicts agree" in compared.stdout, compared.stdout
    summary = (results / "summary.md").read_text()
    assert "1,200 (whole training set)" in summary
    for heading in ("## Step time", "## Peak memory", "## Largest trainable batch", "## Time per epoch",
                    "## Gradient equivalence",
                    "## Memory estimator", "## Convergence", "## Ablation", "## Runs"):
        assert heading in summary
    assert "| sage-mean | 2 | 256 |" in summary and "within" in summary
    planner = json.loads((results / "planner" / "planner.json").read_text())["rows"]
    assert {(r["graph"], r["k"]) for r in planner} == {(g, k) for g in ("chung-lu", "synth-tiny") for k in (2, 4)}


def test_accuracy_under_a_cap_trains_with_the_searched_settings_and_reports_them(finished):
    workdir, config = finished
    results = workdir / "results"
    fits, fitted = plan_fits(config)
    assert sorted(f["knob"] for f in fits.values()) == ["batch_size", "fanouts"]
    found = {f["knob"]: json.loads((results / "records" / "fits" / f"{i}.json").read_text()) for i, f in fits.items()}
    # the run's batch (512) and fanouts (5,10) do not fit 1 MiB at K = 1: both searches went below them
    assert found["batch_size"]["settings"]["batch_size"] < 512
    assert found["batch_size"]["smallest_oom_value"] is not None
    assert found["fanouts"]["largest_fit_value"] is None or found["fanouts"]["largest_fit_value"] < 10
    table = pd.read_csv(results / "records" / "runs.csv")
    rows = table[table["experiment"] == "accuracy_cap"]
    assert len(rows) == len(fitted) + 1 == 3  # dgl once per fitted axis, cherry at its own K
    for run_id, run in fitted.items():  # each fitted run trained with its search's setting
        record = json.loads((results / "records" / "fitted" / f"{run_id}.json").read_text())
        settings = found[fits[run["fit"]]["knob"]]["settings"]
        spec = {"batch_size": record["batch_size"], "fanouts": [int(f) for f in record["fanouts"].split(",")]}
        assert all(spec[key] == value for key, value in settings.items()), (settings, spec)
    summary = (results / "summary.md").read_text()
    section = summary.split("## Accuracy under a fixed device")[1].split("\n## ")[0]
    batch = found["batch_size"]["settings"]["batch_size"]
    assert f"DGL, largest batch that fits: batch {batch}, fanouts 5,10" in section
    assert "Cherry (K=auto), own K: batch 512, fanouts 5,10" in section
    cherry = rows[rows["system"] == "cherry"]
    assert set(cherry["status"]) == {"ok"} and cherry["num_microbatches_max"].min() >= 2


def test_report_builds_and_a_second_run_has_nothing_to_do(finished):
    workdir, _ = finished
    report = workdir / "results" / "report.html"
    result = snakemake(workdir, "--report", str(report))
    assert result.returncode == 0, result.stderr[-3000:]
    assert report.stat().st_size > 10_000
    again = snakemake(workdir, "--cores", "2", "-n")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.parametrize("change, fragment", [
    ({"bogus": 1}, "key (top level): Additional properties are not allowed ('bogus'"),
    ({"run": {"hidden": -3}}, "key run/hidden"),
    ({"experiments": {"breakdown": [{"dataset": "synth-tiny", "systems": {"dgl": [4]}}]}}, "K must be 1"),
    # YAML reads .nan and .inf; no schema bound refuses them (the finiteness rule of every schema does)
    ({"run": {"lr": float("nan")}}, "key run/lr: nan is not a finite number"),
    ({"run": {"timeout_s": float("inf")}}, "key run/timeout_s: inf is not a finite number"),
])
def test_invalid_config_stops_with_one_line_before_any_job(tmp_path, change, fragment):
    config = {**tiny_config(tmp_path / "data"), **change}
    write_config(tmp_path, config)
    result = snakemake(tmp_path, "--cores", "1")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("cherry workflow:")]
    assert len(errors) == 1 and fragment in errors[0], result.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "data").exists()


def test_a_config_repeating_a_key_stops_with_one_line(tmp_path):
    write_config(tmp_path, tiny_config(tmp_path / "data"))
    path = tmp_path / "config" / "config.yaml"
    path.write_text(path.read_text() + "threads: 2\n")  # YAML would keep the last one silently
    result = snakemake(tmp_path, "--cores", "1")
    errors = [line for line in result.stderr.splitlines() if line.startswith("cherry workflow:")]
    assert result.returncode != 0 and len(errors) == 1 and "repeats the key 'threads'" in errors[0], result.stderr
    assert not (tmp_path / "results").exists()


def test_lint_is_clean():
    result = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Lints for" not in result.stdout + result.stderr


def test_paper_config_plans(tmp_path):
    # Without the OGB files a dry run still plans (a user sees the plan before placing the data), with a
    # warning naming the dataset; a real run stops before any job with one line naming it
    paper = str(REPO / "config" / "paper.yaml")
    absent = snakemake(tmp_path, "-n", "--configfile", paper, "--cores", "1")
    assert absent.returncode == 0, absent.stderr[-2000:]
    warnings = [line for line in absent.stderr.splitlines() if line.startswith("cherry workflow: warning:")]
    assert len(warnings) == 1 and "dataset ogbn-arxiv" in warnings[0], absent.stderr[-2000:]
    assert "run_benchmark" in absent.stdout + absent.stderr
    refused = snakemake(tmp_path, "--configfile", paper, "--cores", "1")
    errors = [line for line in refused.stderr.splitlines() if line.startswith("cherry workflow:")]
    assert refused.returncode != 0 and len(errors) == 1 and "dataset ogbn-arxiv" in errors[0], refused.stderr[-2000:]
    assert not (tmp_path / "results").exists()
    # With the files in place (stubs: a dry run reads none of them) every job plans
    import yaml

    from cherry.data.ogb_io import check_ogb_files

    root = tmp_path / "ogb"
    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    config["data"] = {"root": str(root)}
    for name, directory in (("ogbn-arxiv", "ogbn_arxiv"), ("ogbn-products", "ogbn_products"),
                            ("ogbn-papers100M", "ogbn_papers100M")):
        (root / directory).mkdir(parents=True)
        while True:
            try:
                check_ogb_files(name, root / directory)
                break
            except FileNotFoundError as exc:
                for rel in str(exc).split("missing ", 1)[1].split(", "):
                    (root / directory / rel).parent.mkdir(parents=True, exist_ok=True)
                    (root / directory / rel).write_text("")
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "-n", "--configfile", str(path), "--cores", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert "run_benchmark" in out and "verify_gradient" in out


def _planned_jobs(text: str) -> dict[str, dict[str, str]]:
    """run id -> {"threads", "resources", "shell"} of each run_benchmark job in a dry run's output."""
    jobs, current = {}, None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("wildcards: run="):
            current = jobs.setdefault(stripped.split("=", 1)[1], {})
        elif current is not None and stripped.startswith(("threads:", "resources:")):
            key, value = stripped.split(":", 1)
            current[key] = value.strip()
        elif current is not None and stripped.startswith("Shell command:"):
            current["shell"] = stripped
            current = None
    return {run: job for run, job in jobs.items() if "shell" in job and "cherry.bench.run" in job["shell"]}


def test_timed_runs_claim_every_core_and_keep_their_compute_threads(tmp_path):
    # Nothing runs beside a timed run (it claims all of --cores), but it computes on `threads` OMP
    # threads like every other run; untimed runs claim only their own threads and fill the cores.
    write_config(tmp_path, tiny_config(tmp_path / "data"))
    result = snakemake(tmp_path, "-n", "-p", "--cores", "3", "--forceall")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = _planned_jobs(result.stdout + result.stderr)
    timed = {run: job for run, job in jobs.items() if "timed_runs=1" in job["resources"]}
    untimed = {run: job for run, job in jobs.items() if "timed_runs=0" in job["resources"]}
    assert timed and untimed, sorted(jobs)
    assert all(job.get("threads") == "3" for job in timed.values()), timed
    assert all(job.get("threads", "1") in ("1", "2") for job in untimed.values()), untimed
    for run, job in jobs.items():
        ranks = 2 if run.startswith("distributed") else 1
        assert f"OMP_NUM_THREADS={ranks} MKL_NUM_THREADS={ranks} python" in job["shell"], (run, job["shell"])


def test_default_config_plans_the_memory_wall_case_where_k_alone_stops(tmp_path):
    # the default memory wall has a case whose largest single-seed micro-batch exceeds
    # the capacity (a deep all-neighbour GAT); every system of it is one planned search, cherry's with
    # recomputation allowed (options.recompute auto)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["data"] = {"root": str(tmp_path / "data")}
    write_config(tmp_path, config)
    case = {sid: s for sid, s in plan_searches(config).items()
            if s["spec"]["model"] == "gat" and set(s["spec"]["fanouts"]) == {-1}}
    systems = {s["spec"]["system"] for s in case.values()}
    assert {"cherry", "naive", "betty", "buffalo", "dgl", "pyg"} <= systems
    assert all(s["spec"]["device_memory_bytes"] for s in case.values())
    assert next(s for s in case.values() if s["spec"]["system"] == "cherry")["spec"]["options"]["recompute"] == "auto"
    result = snakemake(tmp_path, "-n", "--cores", "2", *(f"results/records/searches/{sid}.json" for sid in case))
    assert result.returncode == 0, result.stderr[-3000:]
    planned = {line.strip().split("=", 1)[1] for line in (result.stdout + result.stderr).splitlines()
               if line.strip().startswith("wildcards: search=")}
    assert planned == set(case)
