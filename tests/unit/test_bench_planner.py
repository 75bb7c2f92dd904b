"""`cherry bench planner` on tiny graphs: every planner's rows, its JSON, the figure drawn from it;
the degree-law generators' contracts."""
from __future__ import annotations

import json

import pytest
import torch

from cherry.report.planner_figure import check_rows, draw_redundancy_per_degree_law, render
from cherry.cli import main
from cherry.data.degree_laws import DEGREE_LAWS, degree_law_graph


@pytest.mark.parametrize("law", DEGREE_LAWS)
def test_degree_laws_are_simple_undirected_and_deterministic(law):
    g = degree_law_graph(law, 3000, seed=5)
    dst = torch.repeat_interleave(torch.arange(g.num_nodes), g.indptr[1:] - g.indptr[:-1])
    keys = g.indices * g.num_nodes + dst
    assert torch.unique(keys).numel() == keys.numel()  # no duplicate edges
    assert not bool((g.indices == dst).any())  # no self-loops
    assert torch.equal(torch.sort(keys).values, torch.sort(dst * g.num_nodes + g.indices).values)  # symmetric
    assert 5 < g.num_edges / g.num_nodes < 15
    assert torch.equal(degree_law_graph(law, 3000, seed=5).indices, g.indices)


def test_heavy_tails_where_promised():
    deg = {law: (lambda g: g.indptr[1:] - g.indptr[:-1])(degree_law_graph(law, 20000)) for law in DEGREE_LAWS}
    assert int(deg["geometric"].max()) < 40
    assert int(deg["barabasi-albert"].max()) > 150 and int(deg["chung-lu"].max()) > 150


def test_bad_law_is_refused():
    with pytest.raises(ValueError, match="degree law must be one of"):
        degree_law_graph("erdos", 100)
    with pytest.raises(ValueError, match="exponent must be > 2"):
        degree_law_graph("chung-lu", 100, exponent=1.5)


def test_bench_planner_rows_json_and_figure(tmp_path, capsys):
    out = tmp_path / "planner.json"
    rc = main(["bench", "planner", "--graphs", "geometric,chung-lu", "--num-nodes", "3000", "--batch-sizes", "200",
               "--ks", "2,4", "--fanouts", "5,10", "--repeats", "1", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "chung-lu" in text and "betty" in text
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2 * 2 * 5
    assert {r["system"] for r in rows} == {"cherry", "contiguous", "random", "betty", "buffalo"}
    for row in rows:
        assert row["redundancy_input"] >= 1.0 and row["plan_ms"] > 0
    by = {(r["graph"], r["k"], r["system"]): r["redundancy_input"] for r in rows}
    for graph in ("geometric", "chung-lu"):
        for k in (2, 4):
            assert by[(graph, k, "cherry")] <= by[(graph, k, "contiguous")]
    png = tmp_path / "fig.png"
    render(rows, png=str(png))
    assert png.stat().st_size > 1000
    fig = draw_redundancy_per_degree_law(rows)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 5


def test_figure_refuses_bad_rows():
    with pytest.raises(ValueError, match="non-empty list"):
        check_rows([])
    with pytest.raises(ValueError, match="lacks plan_ms"):
        check_rows([{"graph": "g", "batch_size": 1, "k": 2, "system": "cherry", "redundancy_input": 1.0}])
