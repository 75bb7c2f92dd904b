"""The real-graph config (config/real.yaml, `make run-real`): it plans every job on the four graphs of
its graphs directory, and the same phases run end to end on a tiny gnn-benchmark npz file written here
(a config whose ``data.graphs`` is a temporary folder), drawing every figure and the summary."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from tests.workflow.test_snakemake import REPO, snakemake

REAL = REPO / "config" / "real.yaml"


def test_real_config_plans_every_graph(tmp_path):
    config = yaml.safe_load(REAL.read_text())
    graphs = (REPO / config["data"]["graphs"]).resolve()
    result = snakemake(tmp_path, "-n", "--configfile", str(REAL), "--cores", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    for graph in ("amazon_photo", "amazon_computers", "coauthor_cs", "flickr"):
        assert "run_benchmark" in out and f"-{graph}.npz_split_random_0.6_0.2-" in out, graph
    assert "search_largest_batch" in out and "verify_gradient" in out
    if not (graphs / "flickr.npz").is_file():  # planned anyway, with a warning naming the file
        assert "cherry workflow: warning: dataset" in result.stderr


def _tiny_npz(path: Path, n: int = 600, dim: int = 16, classes: int = 3) -> None:
    """A homophilous random graph in gnn-benchmark's layout: CSR adjacency and binary CSR features."""
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, n)
    src = rng.integers(0, n, 6 * n)
    same = rng.random(src.size) < 0.8
    dst = np.where(same, rng.permutation(n)[src % n], rng.integers(0, n, src.size))
    dst = np.where(same, np.array([rng.choice(np.flatnonzero(labels == labels[s])) for s in src]), dst)
    adj = sp.csr_matrix((np.ones(src.size, np.float32), (src, dst)), shape=(n, n))
    attr = sp.csr_matrix((rng.random((n, dim)) < 0.2 + 0.3 * (np.arange(dim) % classes == labels[:, None]))
                         .astype(np.float32))
    np.savez_compressed(path, adj_data=adj.data, adj_indices=adj.indices.astype(np.int64),
                        adj_indptr=adj.indptr.astype(np.int64), adj_shape=np.array(adj.shape, np.int64),
                        attr_data=attr.data, attr_indices=attr.indices.astype(np.int64),
                        attr_indptr=attr.indptr.astype(np.int64), attr_shape=np.array(attr.shape, np.int64),
                        labels=labels.astype(np.int64))


def _tiny_real_config(graphs: Path, root: Path) -> dict:
    """config/real.yaml's phases and settings on the tiny graph, its capacities scaled to its peaks."""
    config = yaml.safe_load(REAL.read_text())
    name = "tiny.npz?split=random:0.6,0.2"
    config["data"] = {"root": str(root), "graphs": str(graphs)}
    config["run"].update(hidden=16, batch_size=128, steps=2, timeout_s=120)
    config["experiments"] = {
        "memory_wall": [{"dataset": name, "device_memory_bytes": "600KiB", "start_batch": 64,
                         "systems": {"cherry": ["auto"], "full": [1]}, "run": {"warmup": 0, "steps": 1}}],
        "epoch_time": [{"dataset": name, "device_memory_bytes": ["600KiB", "4MiB"],
                        "systems": {"cherry": ["auto"], "full": [1]}}],
        "microbatch_cost": [{"dataset": name, "systems": {"full": [1], "cherry": [2]}}],
        "convergence": [{"dataset": name, "systems": {"full": [1], "cherry": [2]},
                         "run": {"epochs": 2, "evaluate": True}}],
    }
    config["verify"] = [{**config["verify"][0], "dataset": name, "hidden": 16, "batch_size": 128}]
    return config


def test_tiny_real_graph_workflow_draws_every_figure(tmp_path):
    graphs, workdir = tmp_path / "graphs", tmp_path / "work"
    graphs.mkdir()
    workdir.mkdir()
    _tiny_npz(graphs / "tiny.npz")
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(_tiny_real_config(graphs, tmp_path / "data")))
    result = snakemake(workdir, "--configfile", str(path), "--cores", "2", "--quiet", timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    results = workdir / "results"
    for figure in ("memory_wall", "epoch_time", "microbatch_cost", "convergence"):
        assert (results / "figures" / f"{figure}.png").stat().st_size > 0, figure
    runs = pd.read_csv(results / "records" / "runs.csv")
    assert set(runs["dataset"]) == {"tiny.npz?split=random:0.6,0.2"} and "ok" in set(runs["status"]) <= {"ok", "oom"}
    assert (runs[runs["status"] == "ok"]["test_acc"].dropna() > 0).all()
    summary = (results / "summary.md").read_text()
    assert "tiny.npz" in summary
    info = next((results / "data").glob("*/info.json")).read_text()
    assert '"split": "random:0.6,0.2@0"' in info
