"""Progress of long work (training steps, layer-wise evaluation), on a terminal that shows it.

The engine reports; the command decides. Code that runs long opens a `task` and advances it; nothing
is shown unless a caller turned progress on with `shown` (`cherry train` does, unless ``--quiet``), so
the Python API prints nothing by itself. Inside `shown(stream)`:

- ``stream`` is an interactive terminal (``isatty()`` true): each task is a tqdm bar on it, with its
  count, rate and estimated time left, removed when the task ends;
- otherwise (a log file, a pipe, a batch job): nothing per task, so a log holds no bar characters;
  the command prints its own line per epoch.

Tasks nest (an epoch's steps, then each evaluation layer); each closes before the next opens.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
from typing import Any, Iterator, Optional, TextIO

# The stream a bar is drawn on, None where progress is off or the stream is not a terminal.
_STREAM: contextvars.ContextVar[Optional[TextIO]] = contextvars.ContextVar("cherry_progress_stream", default=None)


def interactive(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


@contextlib.contextmanager
def shown(stream: Optional[TextIO] = None) -> Iterator[None]:
    """Show the progress of the tasks run inside on ``stream`` (default: standard error) where it is
    an interactive terminal; show nothing where it is not."""
    stream = sys.stderr if stream is None else stream
    token = _STREAM.set(stream if interactive(stream) else None)
    try:
        yield
    finally:
        _STREAM.reset(token)


class Task:
    """One piece of long work: `advance` it by the units done, with optional figures to show beside
    (``loss=0.5``); `close` it when done. Does nothing where progress is not shown."""

    def __init__(self, bar=None) -> None:
        self._bar = bar

    def advance(self, done: int = 1, **figures: Any) -> None:
        if self._bar is None:
            return
        if figures:
            self._bar.set_postfix(figures, refresh=False)
        self._bar.update(done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def start(description: str, total: int, unit: str = "it") -> Task:
    """A `Task` of ``total`` units, drawn as a bar until closed where progress is shown."""
    stream = _STREAM.get()
    if stream is None:
        return Task()
    from tqdm import tqdm

    return Task(tqdm(total=total, desc=description, unit=unit, file=stream, leave=False, dynamic_ncols=True))


@contextlib.contextmanager
def task(description: str, total: int, unit: str = "it") -> Iterator[Task]:
    """`start`, closed when the block ends (however it ends)."""
    shown = start(description, total, unit)
    try:
        yield shown
    finally:
        shown.close()
