"""How the native ops load (`cherry.ops.extension`): importing compiles nothing, the status names the
path, the JIT cache is keyed by the source tree, and a JIT build killed mid-way does not hang the next.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cherry.ops.extension import jit_build_dir

REPO = Path(__file__).resolve().parents[2]


def _python(code: str, env: dict, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def _env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CHERRY_NO_EXT", "CHERRY_JIT")}
    env.update(PYTHONPATH=str(REPO), CHERRY_EXT_DIR=str(tmp_path / "ext"), OMP_NUM_THREADS="1", **extra)
    return env


def test_importing_cherry_and_its_ops_compiles_and_loads_nothing(tmp_path):
    code = textwrap.dedent("""
        import sys
        import cherry, cherry.ops
        assert "cherry._C" not in sys.modules, "importing cherry.ops loaded the extension"
        from cherry.ops import extension_status
        print(extension_status())
    """)
    done = _python(code, _env(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    status = done.stdout.strip()
    assert status.startswith("native extension loaded (installed build") or "not built" in status, status
    assert not (tmp_path / "ext").exists(), "the installed path wrote a JIT cache"
    assert "building" not in done.stderr


def test_the_status_names_the_reference_path_when_disabled(tmp_path):
    done = _python("from cherry.ops import extension_available, extension_status as s; "
                   "print(extension_available(), s())", _env(tmp_path, CHERRY_NO_EXT="1"))
    assert done.stdout.strip() == "False disabled by CHERRY_NO_EXT", done.stderr[-2000:]


def test_the_jit_cache_is_keyed_by_the_source_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("CHERRY_EXT_DIR", str(tmp_path))
    one, other = tmp_path / "a" / "csrc", tmp_path / "b" / "csrc"
    assert jit_build_dir(False, one) == jit_build_dir(False, one)
    assert jit_build_dir(False, one) != jit_build_dir(False, other)
    assert jit_build_dir(False, one) != jit_build_dir(True, one)
    assert jit_build_dir(False, one).parent == tmp_path


TOY_OP = """
#include <ATen/ATen.h>
#include <torch/library.h>
TORCH_LIBRARY(cherry_toy, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(cherry_toy, CPU, m) { m.impl("twice", [](const at::Tensor& x) { return x * 2; }); }
"""


@pytest.mark.slow
def test_a_killed_jit_build_leaves_a_lock_the_next_build_removes(tmp_path):
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (csrc / "toy.cpp").write_text(TOY_OP)
    build_dir = tmp_path / "build"
    code = textwrap.dedent(f"""
        import torch
        from pathlib import Path
        from cherry.ops.extension import jit_build
        csrc = Path({str(csrc)!r})
        jit_build([csrc / "toy.cpp"], Path({str(build_dir)!r}), csrc, name="cherry_toy_ops")
        print(torch.ops.cherry_toy.twice(torch.ones(2)).tolist())
    """)
    env = _env(tmp_path)
    first = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    torch_lock = build_dir / "lock"
    deadline_s = time.monotonic() + 120
    while not torch_lock.exists() and first.poll() is None and time.monotonic() < deadline_s:
        time.sleep(0.05)
    assert torch_lock.exists(), f"the build never took torch's lock: {first.communicate()[1][-2000:]}"
    os.killpg(first.pid, signal.SIGKILL)  # the build and its compilers, as a killed terminal would
    _, first_err = first.communicate()
    assert "building the native ops" in first_err  # it said that it was building
    assert torch_lock.exists(), "a killed build should leave torch's lock behind"

    second = _python(code, env, timeout_s=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.strip() == "[2.0, 2.0]"
    lines = second.stderr.splitlines()
    assert sum("removed a stale build lock" in line for line in lines) == 1, second.stderr
    assert any(line.startswith("cherry: building the native ops took") for line in lines), second.stderr
    assert not torch_lock.exists()
