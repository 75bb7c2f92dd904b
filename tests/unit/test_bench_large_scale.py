"""`python -m benchmarks.large_scale` skips in one line where no memory limit can be set."""
from __future__ import annotations

from benchmarks import large_scale


def test_skips_in_one_line_without_root(monkeypatch, capsys):
    monkeypatch.setattr(large_scale.os, "geteuid", lambda: 1000)
    assert large_scale.cgroup_unavailable() == "not root (creating a cgroup needs root)"
    assert large_scale.main(["--scale", "0.001"]) == 0
    out = capsys.readouterr().out
    assert out == "large_scale: skipped: not root (creating a cgroup needs root)\n"


def test_skips_without_a_memory_controller(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(large_scale.os, "geteuid", lambda: 0)
    monkeypatch.setattr(large_scale, "V1_ROOT", tmp_path / "memory")  # neither v1 ...
    monkeypatch.setattr(large_scale, "V2_ROOT", tmp_path)  # ... nor a v2 memory controller
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    assert large_scale.main([]) == 0
    assert capsys.readouterr().out.startswith("large_scale: skipped: no cgroup memory controller")


def test_sizes_parse():
    assert large_scale._bytes("640MiB") == 640 << 20 and large_scale._bytes("1G") == 1 << 30
    assert large_scale._bytes("4096") == 4096
