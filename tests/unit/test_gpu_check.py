"""`make gpu-check` (workflow/scripts/gpu_check.sh) proven on the CPU against the GPU machine's packages.

The allow-list hook (tests/hidden_packages/sitecustomize.py with CHERRY_ONLY_PACKAGES) lets a process
import only the standard library, the project and the distributions of gpu_machine_packages.txt (kept
equal to ../shared/notes/gpu_machine_packages.txt where that is present); `gpu_check.sh --on-cpu` runs
every section of the check under it, so a module that a section imports and the GPU machine lacks fails
here. The check leaves at most 8 files (three) in $OUT, summary.txt printed last.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_TIMES = importlib.util.spec_from_file_location("gpu_check_times", REPO / "workflow" / "scripts" / "gpu_check_times.py")
section_seconds = importlib.util.module_from_spec(_TIMES)
_TIMES.loader.exec_module(section_seconds)
section_seconds = section_seconds.section_seconds  # the summary.txt reader of the docs' timing table
HOOK = REPO / "tests" / "hidden_packages"
PACKAGES = HOOK / "gpu_machine_packages.txt"
SHARED_LIST = Path(os.environ.get("CHERRY_GPU_PACKAGES_NOTE", REPO.parent / "shared" / "notes" / "gpu_machine_packages.txt"))
SECTIONS = ("build", "cache-gather", "verify", "syncs", "engine-b1024", "gpu-tests-1", "gpu-tests-2", "memory-wall",
            "bench-kernels", "bench-stream", "engine-b65536")
MAX_FILES = 8  # what comes back from a GPU run's output folder


def _restricted(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{HOOK}{os.pathsep}{REPO}", "CHERRY_ONLY_PACKAGES": str(PACKAGES)}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_kept_list_is_the_gpu_machines():
    if not SHARED_LIST.is_file():
        pytest.skip(f"no {SHARED_LIST} here to compare with")
    assert PACKAGES.read_text() == SHARED_LIST.read_text()


def test_only_listed_packages_import():
    """Unlisted: refused as a missing package is (ModuleNotFoundError; find_spec None), also in the
    metadata; listed under another import name (pyyaml, nvidia-ml-py), vendored inside a listed one
    (setuptools' jaraco), the standard library and the project: importable."""
    proc = _restricted("""
import importlib.metadata as md, importlib.util as u
for name in ("jsonschema", "referencing", "snakemake", "dgl", "ogb", "pymetis"):
    assert u.find_spec(name) is None, name
    try:
        __import__(name)
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit(name + " imported")
names = {d.metadata["Name"].lower() for d in md.distributions()}
assert "jsonschema" not in names and "torch" in names, sorted(names)
import yaml, pynvml, setuptools, scipy, sqlite3, sysconfig
assert sysconfig.get_config_vars()  # imports the platform module _sysconfigdata_*
import cherry, benchmarks, baselines
print("ok")
""")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_summary_lines_are_read_back():
    summary = ("gpu-check --on-cpu: budget 530s, used 99s, status 1\nbuild          ok                  11s   120s\n"
               "    extension: loaded\nsyncs          timeout(SIGINT)     31s    30s\n")
    assert section_seconds(summary) == {"build": ("ok", 11, 120), "syncs": ("timeout(SIGINT)", 31, 30)}


def test_a_bad_argument_is_one_line():
    proc = subprocess.run(["bash", str(REPO / "workflow" / "scripts" / "gpu_check.sh"), "--fast"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == "gpu_check.sh: unknown argument '--fast' (expected --on-cpu or nothing)\n"


@pytest.mark.parametrize("name, value", [("GPU_CHECK_BUDGET_S", "9m"), ("GPU_CHECK_LIMIT_SCALE", "0")])
def test_a_bad_limit_is_one_line(name, value):
    proc = subprocess.run(["bash", str(REPO / "workflow" / "scripts" / "gpu_check.sh"), "--on-cpu"],
                          env={**os.environ, name: value, "OUT": "/nonexistent/never-made"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"gpu_check.sh: {name}='{value}' is not a positive whole number of seconds or times\n"


@pytest.mark.slow
def test_the_check_runs_on_the_cpu_under_the_gpu_machines_packages(tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("CHERRY_DATA", "CHERRY_HIDE_PACKAGES")}
    env.update(OUT=str(out), PYTHON=sys.executable, TMPDIR=str(tmp_path))
    proc = subprocess.run(["bash", "workflow/scripts/gpu_check.sh", "--on-cpu"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, summary + proc.stdout[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["device.txt", "gpu-check.tar.gz", "summary.txt"]
    assert len(list(out.iterdir())) <= MAX_FILES
    assert proc.stdout.rstrip().endswith(summary.rstrip())  # the digest comes last
    sections = section_seconds(summary)
    assert list(sections) == list(SECTIONS), summary  # each section once, in the check's order
    assert all(status == "ok" for status, _, _ in sections.values()), summary
    assert sum(budget for _, _, budget in sections.values()) < int(summary.split("budget ")[1].split("s")[0]) < 540
    device = (out / "device.txt").read_text()
    assert "jsonschema: absent" in device and "pymetis: absent" in device and "torch " in device, device
    with tarfile.open(out / "gpu-check.tar.gz") as archive:
        names = {Path(n).name for n in archive.getnames()}
    assert {f"{s}.txt" for s in SECTIONS} | {"engine-b1024.json", "syncs.json", "summary.txt"} <= names, names
    assert not list(tmp_path.glob("gpu-check.*")), "the scratch folder is removed"
