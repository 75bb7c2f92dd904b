"""The chunks of a streamed input layer's rows, in order, each one's copy beside the previous one's use.

`chunks(load, ranges, copy_stream)` yields ``(start, stop, rows)`` for each ``(start, stop)`` of
``ranges``, ``rows = load(start, stop)``. Without a copy stream (the CPU, an emulated device, rows
already on the device) each range is loaded when it is asked for, on the current stream: a plain loop.

With a copy stream (a CUDA device reading rows of a host table through pinned buffers), the consumer
queues its work on chunk i (the GEMMs) on the compute stream and asks for chunk i + 1, whose load
(the host gather into a pinned buffer and the non-blocking copy) is queued on the copy stream. The copy
stream never waits for the compute stream, so that copy runs beside chunk i's GEMMs, and the host
gather runs while the device works. Order and reuse, with no host wait on the compute stream:
- the compute stream waits for an event recorded after chunk i + 1's copy before the chunk is yielded;
- the chunk is `record_stream`-ed on the compute stream: its block goes back to the copy stream's pool
  only after the compute stream's work on it, so two chunks are live on the device at a time;
- a pinned buffer is overwritten only after the event of the copy that last read it
  (`cherry.execution.transfer.PinnedRows`, two in rotation: double buffering).
A load must not read what the compute stream writes: the host table does not change during a step.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional

import torch


def chunk_ranges(num_rows: int, chunk_rows: int) -> list[tuple[int, int]]:
    """``[(0, c), (c, 2c), ...]`` up to ``num_rows``, ``c = chunk_rows``."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    return [(start, min(start + chunk_rows, num_rows)) for start in range(0, num_rows, chunk_rows)]


def chunks(load: Callable[[int, int], torch.Tensor], ranges: Iterable[tuple[int, int]],
           copy_stream: Optional["torch.cuda.Stream"] = None) -> Iterator[tuple[int, int, torch.Tensor]]:
    """``(start, stop, load(start, stop))`` per range, in order (see module docstring)."""
    if copy_stream is None:
        for start, stop in ranges:
            yield start, stop, load(start, stop)
        return
    compute = torch.cuda.current_stream(copy_stream.device)
    for start, stop in ranges:
        with torch.cuda.stream(copy_stream):
            rows = load(start, stop)
            ready = copy_stream.record_event()
        compute.wait_event(ready)
        rows.record_stream(compute)
        yield start, stop, rows
        del rows  # the consumer's reference is the last one: the block frees after its compute work
