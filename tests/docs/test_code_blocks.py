"""Docs are tests: every shell command and Python block of README.md, docs/*.md and examples/*.md runs
as written (tests/docs/blocks.py says how a block declares itself and how it is marked not to run).

A page runs in page order in one process (tests/docs/run_page.py): its Python blocks in one namespace,
its shell commands one by one with `cherry` and `python` on the PATH. It runs in a scratch directory
that links the repository's files (so `config/...` reads them, while what a command writes stays out
of the repository), with datasets under a scratch `$CHERRY_DATA` that all pages share.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.docs.blocks import PYTHON, ROOT, SHELL, SHOWN, all_blocks, shell_commands

BLOCKS = all_blocks()
PAGE_TIMEOUT_S = 600
# what a command must not find in its scratch directory: outputs and the environment
NOT_LINKED = {".git", ".venv", "results", "data", "site", ".snakemake", ".pytest_cache"}


def _pages_with_code():
    return [pytest.param(p, id=p) for p in dict.fromkeys(b.page for b in BLOCKS if b.lang in SHELL | PYTHON)]


@pytest.fixture(scope="session")
def docs_env(tmp_path_factory) -> dict:
    """The environment of every block: the `cherry` shim first on the PATH, this checkout importable,
    a scratch data root shared by all pages (a dataset is prepared once)."""
    base = tmp_path_factory.mktemp("docs-blocks")
    shims = base / "bin"
    shims.mkdir()
    cherry = shims / "cherry"
    cherry.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cherry "$@"\n')
    cherry.chmod(0o755)
    path = os.pathsep.join([str(shims), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "CHERRY_DATA": str(base / "data"),
            "CHERRY_DOCS_BASE": str(base)}


def _workdir(env: dict, page: str) -> Path:
    """The page's scratch directory, linking every top-level entry of the repository but outputs."""
    work = Path(env["CHERRY_DOCS_BASE"]) / page.replace("/", "_")
    if not work.exists():
        work.mkdir()
        for entry in ROOT.iterdir():
            if entry.name not in NOT_LINKED:
                (work / entry.name).symlink_to(entry)
    return work


def test_every_block_declares_what_it_is(capsys):
    """A block says whether it runs (shell, Python), is shown only (output, data), or must not run and
    why; the counts are printed so that what is skipped is seen."""
    known = SHELL | PYTHON | SHOWN
    undeclared = [f"{b.where} ({b.lang or 'no info string'})" for b in BLOCKS if b.lang not in known]
    assert not undeclared, ("blocks must say what they are (```bash, ```python, ```text ...): "
                            + ", ".join(undeclared))
    marked = [(b.where, b.no_test) for b in BLOCKS if b.lang in SHELL | PYTHON and b.no_test]
    commands = [c for b in BLOCKS if b.lang in SHELL and not b.no_test for c in shell_commands(b)]
    marked += [(c.block.where, c.no_test) for c in commands if c.no_test]
    counts = Counter(b.lang in SHELL and "shell" or b.lang in PYTHON and "python" or "shown" for b in BLOCKS)
    with capsys.disabled():
        print(f"\ndocs blocks: {counts['shell']} shell ({sum(not c.no_test for c in commands)} commands run), "
              f"{counts['python']} python, {counts['shown']} shown only; {len(marked)} marked not to run:")
        for where, why in marked:
            print(f"  {where}: {why}")
    assert len(BLOCKS) > 20 and counts["shell"] and counts["python"]  # the collector finds the pages


def _items(page: str) -> list[dict]:
    """What runs of one page, in page order: each Python block, each shell command not marked."""
    items = []
    for b in BLOCKS:
        if b.page != page or b.no_test or b.lang not in SHELL | PYTHON:
            continue
        if b.lang in PYTHON:
            items.append({"where": b.where, "kind": "python", "text": b.text, "status": 0})
        else:
            items += [{"where": b.where, "kind": "shell", "text": c.text, "status": c.expected_status}
                      for c in shell_commands(b) if not c.no_test]
    return items


@pytest.mark.parametrize("page", _pages_with_code())
def test_page_runs_as_written(page, docs_env):
    items = _items(page)
    if not items:
        pytest.skip(f"{page}: every block is marked no-test")
    work = _workdir(docs_env, page)
    script = work / "_blocks.json"
    script.write_text(json.dumps(items))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "docs" / "run_page.py"), str(script)], cwd=work,
                          env=docs_env, capture_output=True, text=True, timeout=PAGE_TIMEOUT_S)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
