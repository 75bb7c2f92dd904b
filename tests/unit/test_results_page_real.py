"""The docs' results page restates the real-graph run (`make run-real`, results/real/results) after
the default run's, its figures shipped in their own folder (the two runs draw figures of one name)."""
from __future__ import annotations

from cherry.report.results_page import render_results_page, write_results_page


def test_results_page_shows_the_default_and_the_real_graph_run(tmp_path):
    results = tmp_path / "results"
    real = results / "real" / "results"
    for folder, text in ((results, "default numbers"), (real, "real-graph numbers")):
        (folder / "figures").mkdir(parents=True)
        (folder / "summary.md").write_text(f"# Benchmark summary\n\n{text}\n")
        (folder / "figures" / "memory_wall.png").write_bytes(text.encode())
    page = render_results_page(results)
    assert page.index("default numbers") < page.index("# Real graphs") < page.index("real-graph numbers")
    assert "![memory_wall](figures/memory_wall.png)" in page
    assert "![memory_wall](figures-real/memory_wall.png)" in page and "`results/real/results/figures/`" in page
    out = tmp_path / "out"
    write_results_page(results, out)
    assert (out / "figures-real" / "memory_wall.png").read_bytes() == b"real-graph numbers"
    assert (out / "figures" / "memory_wall.png").read_bytes() == b"default numbers"


def test_without_a_real_graph_run_the_page_says_which_command_makes_it(tmp_path):
    (tmp_path / "summary.md").write_text("# Benchmark summary\n\nx\n")
    page = render_results_page(tmp_path)
    assert "Run `make run-real` (the workflow on `config/real.yaml`" in page
