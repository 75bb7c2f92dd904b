"""A workflow config may name a dataset by its directory (OGB layout): the plan prepares that path."""
from __future__ import annotations

import shutil

from cherry.data.ogb_dir import dataset_slug
from tests.workflow.test_snakemake import snakemake, write_config


def test_slug_keeps_plain_names_and_makes_paths_file_safe():
    assert dataset_slug("synth-tiny") == "synth-tiny"
    slug = dataset_slug("/data/my graph/cora")
    assert slug.startswith("path-cora-") and "/" not in slug
    assert dataset_slug("/a/cora") != dataset_slug("/b/cora")


def test_dry_run_plans_a_dataset_given_by_path(synth_tiny, data_root, tmp_path):
    mine = tmp_path / "my_graph"
    shutil.copytree(data_root / "synth_tiny", mine, ignore=shutil.ignore_patterns("cherry", "processed"))
    config = {"data": {"root": str(data_root)}, "threads": 1,
              "run": {"device": "cpu", "hidden": 8, "fanouts": [3, 3], "batch_size": 128, "epochs": 0,
                      "warmup": 0, "steps": 1, "evaluate": False},
              "experiments": {"microbatch_cost": [{"dataset": str(mine), "systems": {"full": [1], "cherry": [2]}}]}}
    write_config(tmp_path / "wf", config)
    result = snakemake(tmp_path / "wf", "-n", "-p", "--cores", "1")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert f"cherry data prepare {mine}" in out and f"results/data/{dataset_slug(str(mine))}/info.json" in out
    assert f"cherry data prepare {mine} --root" not in out  # read where it is: --root does not apply to it
    assert "cherry data prepare synth-tiny" not in out or f"--root {data_root}" in out
    config["experiments"]["microbatch_cost"][0]["dataset"] = str(tmp_path / "absent")
    write_config(tmp_path / "wf", config)
    result = snakemake(tmp_path / "wf", "-n", "--cores", "1")  # a dry run plans without the data, and says so
    assert result.returncode == 0 and "dry run plans anyway" in result.stdout + result.stderr
    result = snakemake(tmp_path / "wf", "--cores", "1")  # a real run stops before any job, in one line
    out = result.stdout + result.stderr
    assert result.returncode != 0 and str(tmp_path / "absent") in out and "Traceback" not in out, out[-3000:]
