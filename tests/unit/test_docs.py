"""The documentation: a strict MkDocs build (broken links and missing API references fail), the
generated results page, and the README as a short front door without commit hashes."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cherry.report.results_page import render_results_page, write_results_page

ROOT = Path(__file__).resolve().parents[2]
# a word of 7-40 hex digits with at least one digit and one letter: how a commit is cited
HASH = re.compile(r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def _nav_pages() -> set[str]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def walk(entry):
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, list):
            for e in entry:
                yield from walk(e)
        elif isinstance(entry, dict):
            for e in entry.values():
                yield from walk(e)

    return set(walk(config["nav"]))


def test_docs_build_strictly(tmp_path):
    """`mkdocs build --strict` succeeds (no broken link, every `::: module` resolves) and renders the
    API reference and the results page (here without results: the page says how to make them)."""
    env = {**os.environ, "CHERRY_RESULTS_DIR": str(tmp_path / "no-results")}
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'id="cherry.spec.make_spec"' in (site / "api" / "index.html").read_text()
    assert "No results yet" in (site / "results" / "index.html").read_text()


def _fake_results(root: Path) -> Path:
    (root / "figures").mkdir(parents=True)
    (root / "planner").mkdir()
    (root / "summary.md").write_text("# Benchmark summary\n\n## Peak memory\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n")
    (root / "summary.json").write_text(json.dumps({"ratios": [
        {"key": "betty/cherry K=4", "section": "speedup", "value": 1.43, "low": 1.24, "high": 1.6,
         "verdict": "cherry faster"}]}))
    (root / "planner" / "planner.json").write_text(json.dumps({"args": {}, "rows": [
        {"graph": "geometric", "batch_size": 1024, "k": 2, "system": s, "redundancy_input": r, "plan_ms": 1.0}
        for s, r in (("cherry", 1.031), ("betty", 1.042))]}))
    (root / "figures" / "memory_wall.png").write_bytes(b"\x89PNG fake")
    return root


def test_results_page_restates_the_outputs(tmp_path):
    results = _fake_results(tmp_path / "results")
    captions = tmp_path / "captions"
    captions.mkdir()
    (captions / "memory_wall.rst").write_text("**Memory wall.** Each ``system``\nat its own K.\n")
    page = render_results_page(results, captions)
    assert page.startswith("# ") and "\n## Benchmark summary\n" in page and "\n### Peak memory\n" in page
    assert "| betty/cherry K=4 | 1.43 | [1.24, 1.60] | cherry faster |" in page
    assert "| graph | batch | K | cherry | betty |" in page  # the systems in the JSON's order
    assert "| geometric | 1024 | 2 | 1.031 | 1.042 |" in page
    assert "![memory_wall](figures/memory_wall.png)" in page and "Each `system` at its own K." in page
    out = write_results_page(results, tmp_path / "out", captions)
    assert out.read_text() == page and (tmp_path / "out" / "figures" / "memory_wall.png").read_bytes() == b"\x89PNG fake"


def test_results_page_without_results_invents_nothing(tmp_path):
    page = render_results_page(tmp_path)
    assert "make run" in page and not re.search(r"\d\.\d", page)


def test_readme_is_a_short_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    assert not HASH.findall(text), HASH.findall(text)
    assert "../" not in text  # nothing outside the repository
    nav = _nav_pages()
    for target in re.findall(r"\]\(([^)#]+)", text):
        if "://" in target:
            continue
        page = target.removeprefix("docs/")
        assert (ROOT / target).exists() or page in nav, f"README links to {target}, which does not exist"


def _docstrings(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield getattr(node, "name", path.name), doc


@pytest.mark.parametrize("package", ["cherry", "baselines"])
def test_no_commit_hashes_in_docstrings(package):
    found = [f"{path.relative_to(ROOT)}:{name}: {HASH.findall(doc)}"
             for path in sorted((ROOT / package).rglob("*.py")) for name, doc in _docstrings(path) if HASH.search(doc)]
    assert not found, found


def test_hash_pattern_finds_commits_only():
    assert HASH.findall("at cb6fa5e (5.6 ms), and 6de579d") == ["cb6fa5e", "6de579d"]
    assert not HASH.findall("0x9E3779B97F4A7C15 deadbeef 1234567 run-b95716 ratio_tolerance")
