"""The one error boundary of every entry point, and the faults it knows.

Every command (``cherry ...``, ``python -m cherry.bench.*``, the workflow's scripts) runs its body
through `run_boundary`, which turns what escapes it into one line on stderr and an exit status, never
a traceback (`classify` maps each exception class):

    2  bad input: ValueError, TypeError, FileNotFoundError (the message names the value or file); an
       ImportError or SyntaxError (a ``$CHERRY_PLUGINS`` module that is missing, raises or does not
       parse; a missing optional package); a number too large for its type (OverflowError, torch's
       "value cannot be converted ... without overflow").
    3  out of device memory: torch.OutOfMemoryError that the command did not turn into a result.
    4  training diverged: `LossDiverged` (the loss became NaN or infinite; the step is named).
    1  an environment fault: any other OSError (disk full, permission, not a directory; the path is
       named), RecursionError (an input nested too deeply), MemoryError or an allocator error (host
       memory exhausted, at import too: enter the boundary first). A result that could not be
       written is kept elsewhere (`write_json_keeping`).
    1  anything else (a KeyError, IndexError, ... escaping a reader): a bug, one line
       ``internal error: <class>: <message> (at <file>:<line> in <function>)``; with
       ``$CHERRY_TRACEBACK`` set, its traceback instead
  128 + N  interrupted by signal N: SIGINT (Ctrl-C, 130) and SIGTERM (what schedulers and ``timeout``
       send, 143) alike. While the body runs both raise `Interrupted` (a KeyboardInterrupt) in the
       main thread, so the step in flight is abandoned, ``finally`` clauses run and a command writes
       what it finished; inside `interrupts_deferred` (a checkpoint being saved) the signal waits
       until the block ends.

Standard library only (the workflow's light scripts import this without torch).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from cherry.extras import NEEDS_EXTRA, missing_extra

EXIT_OK, EXIT_FAULT, EXIT_BAD_INPUT, EXIT_OOM, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
_LINE_CHARS = 1000  # of one error line: a value of 50 MB is cut, not echoed
_ALLOCATOR = re.compile(r"DefaultCPUAllocator|can't allocate memory|Cannot allocate memory|not enough memory|"
                        r"std::bad_alloc|out of memory|Storage size calculation overflowed|failed to map segment", re.IGNORECASE)


class LossDiverged(ArithmeticError):
    """The training loss became NaN or infinite at ``step`` (counted from 1 over the run)."""

    def __init__(self, loss: float, step: int, epoch: Optional[int] = None) -> None:
        self.loss, self.step, self.epoch = float(loss), int(step), epoch
        where = f"step {step}" + (f" (epoch {epoch})" if epoch is not None else "")
        super().__init__(f"training diverged: the loss became {self.loss} at {where}; "
                         "expected a finite loss (lower the learning rate, or check the features for NaN)")


def check_loss(loss: float, step: int, epoch: Optional[int] = None) -> None:
    """Raise `LossDiverged` unless ``loss`` is finite (NaN compares unequal to itself; inf - inf is NaN)."""
    value = float(loss)
    if value - value != 0.0:
        raise LossDiverged(value, step, epoch)


class Interrupted(KeyboardInterrupt):
    """Signal ``signum`` (SIGINT or SIGTERM) arrived while a command ran; its exit status is 128 + signum."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}")


_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_deferring = {"depth": 0, "pending": None}


def _on_signal(signum: int, frame) -> None:
    if _deferring["depth"]:
        _deferring["pending"] = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def interrupts_handled():
    """Within it (in the main thread), SIGINT and SIGTERM raise `Interrupted`; the handlers before it
    are restored after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in _HANDLED_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        _deferring["pending"] = None


@contextlib.contextmanager
def interrupts_deferred():
    """A block that a SIGINT or SIGTERM does not cut (a checkpoint's files and index written
    together): a signal arriving inside raises `Interrupted` when the block ends."""
    _deferring["depth"] += 1
    try:
        yield
    finally:
        _deferring["depth"] -= 1
    pending, _deferring["pending"] = _deferring["pending"], None
    if pending is not None and _deferring["depth"] == 0:
        raise Interrupted(pending)
    if pending is not None:
        _deferring["pending"] = pending


class ResultKept(OSError):
    """A result could not be written where asked after the work was done; it was kept elsewhere
    (``kept_at``, or None if it was printed on stdout) and the message says where."""

    def __init__(self, message: str, kept_at: Optional[str]) -> None:
        super().__init__(message)
        self.kept_at = kept_at


def is_allocator_error(exc: BaseException) -> bool:
    """An allocation that failed for want of host memory (not the emulated device's budget, which
    raises torch.OutOfMemoryError and is a result)."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and type(exc).__name__ != "OutOfMemoryError" \
        and bool(_ALLOCATOR.search(str(exc)))


def cut(text: str, limit: int = _LINE_CHARS) -> str:
    """``text`` on one line, at most about ``limit`` characters."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def os_error_line(exc: OSError) -> str:
    """``'<path>': <reason>`` (both paths of a rename), or the reason alone when there is no path."""
    if isinstance(exc, ResultKept) or not exc.strerror:
        return cut(str(exc) or type(exc).__name__)
    paths = [p for p in (exc.filename, exc.filename2) if p is not None]
    where = " -> ".join(repr(os.fsdecode(p)) for p in paths)
    return cut(f"{where}: {exc.strerror}" if where else exc.strerror)


def fault_line(exc: BaseException) -> Optional[str]:
    """The one line of an environment fault (OSError, RecursionError, MemoryError, allocator error),
    or None for anything else."""
    if isinstance(exc, FileNotFoundError) and not exc.strerror:
        return None  # a bad-input message of cherry's own
    if isinstance(exc, OSError):
        return os_error_line(exc)
    if isinstance(exc, RecursionError):
        return "an input is nested too deeply to read (RecursionError); expected a shallower structure"
    if is_allocator_error(exc):
        detail = cut(str(exc).split("\n")[0], 200) or type(exc).__name__
        return (f"out of host memory, cannot allocate ({detail}); expected sizes this machine can hold: "
                "lower --hidden, --batch-size, --fanouts or --num-layers")
    return None


def run_boundary(prog: str, body: Callable[[], Optional[int]]) -> int:
    """Run ``body`` and return its exit status; what escapes it becomes one line on stderr (see the
    module docstring for the statuses). Enter it before any heavy import: an import that fails for
    want of memory is one line too."""
    try:
        with interrupts_handled():
            return int(body() or 0)
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        status, line = classify(exc)
        if status is None:
            raise
        print(f"{prog}: {line}", file=sys.stderr)
        return status


def classify(exc: BaseException) -> tuple[Optional[int], str]:
    """``(exit status, the line after "<prog>: ")`` for ``exc``, or ``(None, "")`` to re-raise (a bug,
    with ``$CHERRY_TRACEBACK`` set)."""
    if isinstance(exc, LossDiverged):
        return EXIT_DIVERGED, f"error: {cut(str(exc))}"
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", signal.SIGINT)
        return 128 + signum, f"interrupted ({signal.Signals(signum).name})"
    if type(exc).__name__ == "OutOfMemoryError":  # torch's: the (emulated) device, not the host
        return EXIT_OOM, f"out of memory: {cut(str(exc).split(chr(10))[0], 300)}"
    if isinstance(exc, ImportError) and _ALLOCATOR.search(str(exc)):  # a library mapped under `ulimit -v`
        return EXIT_FAULT, (f"error: out of host memory while importing ({cut(first_line(exc), 200)}); expected "
                            "an address-space limit (ulimit -v) the libraries fit in")
    if isinstance(exc, (ImportError, SyntaxError)):  # a plugin, a missing optional package
        return EXIT_BAD_INPUT, f"error: {import_line(exc)}"
    if isinstance(exc, (ValueError, TypeError, FileNotFoundError)):
        line = fault_line(exc) if isinstance(exc, FileNotFoundError) else None
        return EXIT_BAD_INPUT, f"error: {line or cut(str(exc))}"
    if _is_overflow(exc):
        return EXIT_BAD_INPUT, (f"error: a number is too large for the type it is stored in "
                                f"({cut(first_line(exc), 200)}); expected values a float32/int64 can hold "
                                "(check --lr, --weight-decay, --momentum and sizes)")
    line = fault_line(exc)
    if line is not None:
        return EXIT_FAULT, f"error: {line}"
    if os.environ.get("CHERRY_TRACEBACK"):
        return None, ""
    return EXIT_FAULT, f"internal error: {type(exc).__name__}: {cut(first_line(exc), 300)} {_where(exc)}; " \
                       "a bug (in Cherry or a plugin): rerun with CHERRY_TRACEBACK=1 for the traceback"


def first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def import_line(exc: BaseException) -> str:
    """One line for an ImportError or SyntaxError: the module or file and line at fault."""
    if isinstance(exc, SyntaxError) and not isinstance(exc, ImportError):
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else "a module"
        return cut(f"{where}: {exc.msg} (SyntaxError); expected valid Python", 600)
    name = getattr(exc, "name", None)
    detail = first_line(exc)
    if name and name not in detail:
        detail = f"{detail} (module {name})"
    install = missing_extra(exc)
    if install is not None:  # an optional part of the install, not a broken one
        return cut(detail if NEEDS_EXTRA in detail else f"{detail}; {NEEDS_EXTRA}: {install}", 600)
    return cut(f"{detail}; expected an importable module (check $CHERRY_PLUGINS and the installed packages)", 600)


def _is_overflow(exc: BaseException) -> bool:
    if isinstance(exc, OverflowError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("without overflow" in text or "value cannot be converted" in text)


def _where(exc: BaseException) -> str:
    """``(at <file>:<line> in <function>)`` of the innermost frame of ``exc``'s traceback."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"(at {os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name})"


def write_json_keeping(path: str | os.PathLike, obj: Any, write: Optional[Callable[[str, Any], None]] = None) -> None:
    """Write ``obj`` as JSON at ``path`` (atomically, by ``write``); if that fails after the work was
    done, keep it in the temporary directory, else the home directory, else print it on stdout, and
    raise `ResultKept` saying where (one line)."""
    if write is None:
        from cherry.io import write_json_atomic as write
    try:
        write(path, obj)
        return
    except OSError as exc:
        reason = os_error_line(exc) if exc.filename else f"{str(path)!r}: {exc.strerror or exc}"
    name = f"cherry-kept-{Path(path).name or 'result'}-{os.getpid()}.json"
    for directory in (tempfile.gettempdir(), os.path.expanduser("~")):
        kept = os.path.join(directory, name)
        try:
            write(kept, obj)
        except OSError:
            continue
        raise ResultKept(f"cannot write the result to {reason}; it is kept in {kept!r}", kept)
    print(json.dumps(obj, sort_keys=True, default=str))
    raise ResultKept(f"cannot write the result to {reason}; nowhere else was writable either, "
                     "so it was printed on stdout", None)


__all__ = ["EXIT_BAD_INPUT", "EXIT_DIVERGED", "EXIT_FAULT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_OOM",
           "Interrupted", "LossDiverged", "interrupts_deferred", "interrupts_handled", "ResultKept", "check_loss", "cut", "fault_line", "is_allocator_error", "run_boundary",
           "write_json_keeping"]
