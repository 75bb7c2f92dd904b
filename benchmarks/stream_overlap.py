"""Whether a streamed input layer's chunk copies ran beside its GEMMs on a GPU (`cherry bench stream`).

`measure(dataset, spec)`: one streamed K = 1 step (features read from the host, no staging) after a
warm-up step, under torch.profiler; `overlap_of(trace events)`: from its Chrome trace, the host-to-device
copies and the kernels (each with its stream), and how much copy time lay under a kernel on another
stream. Overlap shows as that time above zero; serial copies and GEMMs give zero.
"""
from __future__ import annotations

import json
import os
import tempfile


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def overlap_of(events: list[dict]) -> dict:
    """``{"copies", "copy_ms", "kernel_ms", "overlap_ms"}`` of a Chrome trace's events (``ts``/``dur``
    in microseconds, ``args.stream``, else ``tid``): host-to-device copies (category ``gpu_memcpy``, ``HtoD`` in the
    name), kernels (category ``kernel``), and the copy time covered by a kernel on another stream."""
    def spans(kind: str, name: str = "") -> list[tuple[float, float, object]]:
        return [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                 (e.get("args") or {}).get("stream", e.get("tid")))
                for e in events if str(e.get("cat", "")).lower() == kind and name in str(e.get("name", ""))]

    copies, kernels = spans("gpu_memcpy", "HtoD"), spans("kernel")
    covered = 0.0
    for stream in {s for _, _, s in copies}:
        others = _merged([(a, b) for a, b, s in kernels if s != stream])
        for a, b, _ in (c for c in copies if c[2] == stream):
            covered += sum(max(0.0, min(b, e) - max(a, s)) for s, e in others)
    total = lambda xs: sum(b - a for a, b, _ in xs) / 1e3  # noqa: E731
    return {"copies": len(copies), "copy_ms": total(copies), "kernel_ms": total(kernels), "overlap_ms": covered / 1e3}


def measure(dataset, spec, blocks) -> dict:
    """`overlap_of` one streamed step of ``blocks`` (a warm-up step first) with the features on the
    host; ``spec`` must stream (``stream_inputs: on``, K = 1, no staging)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cherry.execution import Trainer

    on_gpu = spec.device.startswith("cuda")  # elsewhere (a test on the CPU): no copies, no overlap
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    trainer = Trainer(dataset, spec, construction="host")
    try:
        features, labels = trainer.data.features, trainer.data.labels
        stats = trainer.executor.step(blocks, features, labels)
        if not stats.streamed or features.device.type != "cpu":
            return {"error": f"the step did not stream host rows (streamed {stats.streamed}, features on "
                             f"{features.device})"}
        sync()
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])) as prof:
            trainer.executor.step(blocks, features, labels)
            sync()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path, encoding="utf-8") as f:
                events = json.load(f).get("traceEvents", [])
    finally:
        trainer.close()
    result = overlap_of(events)
    if on_gpu and not result["copies"]:
        return {"error": "the profiler's trace holds no host-to-device copy (no CUDA activity recorded: CUPTI?)"}
    return result


def text(result: dict) -> str:
    """The one line `cherry bench stream` prints."""
    if "error" in result:
        return f"overlap: not measured ({result['error']})"
    share = result["overlap_ms"] / result["copy_ms"] if result["copy_ms"] else 0.0
    return (f"overlap: {result['copies']} host-to-device copies took {result['copy_ms']:.2f} ms, kernels "
            f"{result['kernel_ms']:.2f} ms; {result['overlap_ms']:.2f} ms of the copies ({share:.0%}) ran beside "
            "a kernel on another stream")
