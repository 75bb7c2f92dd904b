"""The documentation's results page, generated from a workflow run's outputs (never typed by hand).

    python -m cherry.report.results_page [--results results] --out DIR

reads ``<results>/summary.md`` (`cherry.report.summary`), ``<results>/summary.json`` (the timed
verdicts), ``<results>/planner/planner.json`` (`cherry bench planner --json`) and the PNG figures in
``<results>/figures/``, and writes ``DIR/results.md`` plus a copy of each figure under ``DIR/figures/``.
The real-graph run (`make run-real`, ``<results>/real/results/``) follows as a second part of the same
page, its figures under ``DIR/figures-real/``. MkDocs builds the same page at build time (``workflow/scripts/docs_hooks.py`` calls `render_results_page`).
Contract: the page only restates what those files hold; a missing file gives a sentence saying which
command makes it, never an invented number; every figure link points at a figure the page ships.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

PAGE_NAME = "results.md"
FIGURE_DIR = "figures"  # the figures' folder next to the page, in the docs and in --out


@dataclass(frozen=True)
class WorkflowRun:
    """One workflow run the page restates: where its outputs lie under the results folder, where its
    figures go beside the page, and the command and config that make it."""

    title: str
    subdir: str
    figure_dir: str
    command: str
    config: str
    minutes: int


DEFAULT_RUN = WorkflowRun("Results of the benchmark workflow", "", FIGURE_DIR, "make run", "config/config.yaml", 15)
REAL_RUN = WorkflowRun("Real graphs", "real/results", "figures-real", "make run-real", "config/real.yaml", 20)
RUNS = (DEFAULT_RUN, REAL_RUN)


def figure_caption(name: str, captions_dir: Optional[Path]) -> Optional[str]:
    """The report caption of figure ``name`` (``<captions_dir>/<name>.rst``), or None when it has none."""
    if captions_dir is None:
        return None
    path = Path(captions_dir) / f"{name}.rst"
    return " ".join(path.read_text().split()).replace("``", "`") if path.is_file() else None


def figures_of(results_dir: Path) -> list[Path]:
    """The PNG figures of a workflow run, by name."""
    folder = Path(results_dir) / "figures"
    return sorted(folder.glob("*.png")) if folder.is_dir() else []


def _demote(markdown: str) -> list[str]:
    """The summary's lines with every heading one level deeper (the page has its own title)."""
    return [f"#{line}" if line.startswith("#") else line for line in markdown.splitlines()]


def _verdict_lines(summary_json: Path) -> list[str]:
    ratios = json.loads(summary_json.read_text()).get("ratios") or []
    if not ratios:
        return []
    rows = ["| ratio | value | 95% interval | verdict |", "| --- | --- | --- | --- |"]
    for r in ratios:
        interval = "-" if r.get("low") is None else f"[{r['low']:.2f}, {r['high']:.2f}]"
        value = "-" if r.get("value") is None else f"{r['value']:.2f}"
        rows.append(f"| {r['key']} | {value} | {interval} | {r['verdict']} |")
    return ["## Timed verdicts (`results/summary.json`)", "",
            "Compare two runs' verdicts with `python -m cherry.report.compare_verdicts A/summary.json "
            "B/summary.json`.", ""] + rows + [""]


def _planner_lines(planner_json: Path) -> list[str]:
    data = json.loads(planner_json.read_text())
    rows = pd.DataFrame(data.get("rows") or [])
    if rows.empty:
        return []
    red = rows.pivot_table(index=["graph", "batch_size", "k"], columns="system", values="redundancy_input",
                           aggfunc="median", sort=False)
    systems = list(red.columns)
    lines = ["## Input redundancy per degree law (`cherry bench planner`)", "",
             "From `results/planner/planner.json`: summed micro-batch inputs over the batch's inputs "
             "(1 = no duplicated work), one sampled batch per graph.", "",
             "| graph | batch | K | " + " | ".join(systems) + " |", "| --- " * (3 + len(systems)) + "|"]
    for (graph, batch, k), values in red.iterrows():
        lines.append(f"| {graph} | {batch} | {k} | " + " | ".join(f"{values[s]:.3f}" for s in systems) + " |")
    return lines + [""]


def _run_lines(results_dir: Path, run: WorkflowRun, captions_dir: Optional[Path]) -> list[str]:
    """The part of the page for ``run`` (outputs in ``results_dir``), under a title of its own."""
    where = f"results/{run.subdir + '/' if run.subdir else ''}"
    lines = [f"# {run.title}", "",
             f"This part is generated from the workflow's outputs in `{where}` "
             "(`python -m cherry.report.results_page`, or `mkdocs build`, which runs it): nothing on it is "
             f"typed by hand. Regenerate it after `{run.command}`.", ""]
    summary_md = results_dir / "summary.md"
    if not summary_md.is_file():
        lines += ["!!! note \"No results yet\"",
                  f"    `{summary_md.as_posix()}` does not exist. Run `{run.command}` (the workflow on "
                  f"`{run.config}`, about {run.minutes} minutes on 2 cores), then build the docs again.", ""]
    else:
        lines += _demote(summary_md.read_text()) + [""]
    summary_json = results_dir / "summary.json"
    if summary_json.is_file():
        lines += _verdict_lines(summary_json)
    planner_json = results_dir / "planner" / "planner.json"
    if planner_json.is_file():
        lines += _planner_lines(planner_json)
    figures = figures_of(results_dir)
    if figures:
        lines += ["## Figures", "", "Drawn by `python -m cherry.report.figures NAME` from the run table "
                  f"(PDF versions are in `{where}figures/`).", ""]
        for png in figures:
            lines += [f"### {png.stem}", "", f"![{png.stem}]({run.figure_dir}/{png.name})", ""]
            caption = figure_caption(png.stem, captions_dir)
            if caption:
                lines += [caption, ""]
    return lines


def render_results_page(results_dir: Path, captions_dir: Optional[Path] = None) -> str:
    """The results page (Markdown) for the workflow outputs under ``results_dir``: the default run,
    then the real-graph run (``real/results``); figures are linked as ``<figure_dir>/<name>.png`` (the
    caller ships `figures_of` each run's folder there)."""
    results_dir = Path(results_dir)
    lines = [line for run in RUNS for line in _run_lines(results_dir / run.subdir, run, captions_dir)]
    return "\n".join(lines).rstrip() + "\n"


def write_results_page(results_dir: Path, out_dir: Path, captions_dir: Optional[Path] = None) -> Path:
    """Write ``out_dir/results.md`` and copy the figures it links into ``out_dir/figures/``."""
    out_dir = Path(out_dir)
    for run in RUNS:
        (out_dir / run.figure_dir).mkdir(parents=True, exist_ok=True)
        for png in figures_of(Path(results_dir) / run.subdir):
            shutil.copyfile(png, out_dir / run.figure_dir / png.name)
    page = out_dir / PAGE_NAME
    tmp = page.with_suffix(".md.tmp")
    tmp.write_text(render_results_page(results_dir, captions_dir))
    tmp.replace(page)
    return page


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.outputs import DIR, add_output, parse_checked

    parser = argparse.ArgumentParser(prog="python -m cherry.report.results_page", description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=Path("results"), help="the workflow's results folder")
    parser.add_argument("--captions", type=Path, default=None, help="folder of <figure>.rst captions")
    add_output(parser, "--out", kind=DIR, type=Path, required=True, help="folder to write results.md and figures/ into")
    args = parse_checked(parser, argv)
    print(write_results_page(args.results, args.out, args.captions))
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.report.results_page", main))
