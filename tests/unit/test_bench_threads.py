"""Every benchmark that sets torch's threads from ``--threads`` gives the caller's setting back,
however it ends (`benchmarks.threads.keeps_threads`)."""
from __future__ import annotations

import importlib

import pytest
import torch

from cherry.cli import build_parser


class _Stopped(Exception):
    pass


@pytest.mark.parametrize("name, module", [("cache", "benchmarks.feature_cache"), ("interop", "benchmarks.interop"),
                                          ("budget", "benchmarks.budget"), ("stream", "benchmarks.stream")])
def test_a_benchmark_restores_the_callers_threads(name, module, monkeypatch):
    before = torch.get_num_threads()
    wanted = 2 if before != 2 else 1
    real, calls = torch.set_num_threads, []

    def set_then_stop(n: int) -> None:  # the run sets --threads, then stops there; the restore goes through
        real(n)
        calls.append(n)
        if len(calls) == 1:
            raise _Stopped

    args = build_parser().parse_args(["bench", name, "--threads", str(wanted)])
    monkeypatch.setattr(torch, "set_num_threads", set_then_stop)
    try:
        with pytest.raises(_Stopped):
            importlib.import_module(module).run(args)
    finally:
        monkeypatch.undo()
        after = torch.get_num_threads()
        torch.set_num_threads(before)
    assert calls[0] == wanted and after == before, (calls, after, before)
