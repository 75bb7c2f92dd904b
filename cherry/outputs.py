"""Every output a command writes, declared on its parser and checked before any work runs.

A command declares each option that names an output with `add_output` (a file: ``--json``,
``--out``, ``--figure``; a directory: ``--save``, ``--out-dir``, with the names the command keeps in
it). `parse_checked` (every ``python -m cherry...`` entry point) and `cherry.cli.main` (every
``cherry`` command) call `check_outputs` on the parsed options before the command's body, so a bad
output stops the command in one line naming the option, the path and what was expected, and a
result is never computed only to be lost:

- a file output must not be empty, nor a directory, and its nearest existing ancestor must be a
  writable directory;
- a directory output must not be a file, and must be creatable and writable;
- two outputs may not name one path, and a file output may not be a name a directory output keeps
  (``--json D/checkpoint.json`` beside ``--save D``).

Standard library only (the workflow's light scripts import it without torch).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Optional, Sequence

FILE, DIR = "file", "dir"
# The option destinations that name an output; a test walks every parser for one not declared here.
OUTPUT_DESTS = ("json", "out", "out_dir", "out_csv", "out_parquet", "figure", "save", "png", "pdf")
_DECLARED = "_cherry_outputs"


def add_output(parser: argparse.ArgumentParser, *flags: str, kind: str = FILE, keeps: Sequence[str] = (),
               **kwargs) -> argparse.Action:
    """``parser.add_argument(*flags, **kwargs)`` for an option naming an output of ``kind`` (`FILE` or
    `DIR`; a directory's ``keeps``: the file names the command writes in it)."""
    if kind not in (FILE, DIR):
        raise ValueError(f"kind must be {FILE!r} or {DIR!r}, got {kind!r}")
    action = parser.add_argument(*flags, **kwargs)
    declared = dict(parser.get_default(_DECLARED) or {})  # a copy: parsers never share the table
    declared[action.dest] = (action.option_strings[0] if action.option_strings else action.dest, kind, tuple(keeps))
    parser.set_defaults(**{_DECLARED: declared})
    return action


def declared_outputs(parser: argparse.ArgumentParser) -> dict:
    """``{dest: (flag, kind, keeps)}`` of the outputs declared on ``parser``."""
    return dict(parser.get_default(_DECLARED) or {})


def check_file(path: str | os.PathLike, flag: str = "output") -> None:
    """Raise ValueError (one line naming ``flag`` and ``path``) unless a file can be written at
    ``path`` atomically (a temporary file beside it, then a rename)."""
    if str(path) == "":
        raise ValueError(f"{flag} '' is empty: expected a file path")
    _check_name(path, flag)
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a directory: expected a file path")
    if path.exists() and not path.is_file():  # a FIFO, a device, a socket: a rename would replace it
        raise ValueError(f"{flag} {str(path)!r} is not a regular file: expected a file path")
    _check_ancestor(path.parent if str(path.parent) else Path("."), path, flag)


def check_dir(path: str | os.PathLike, flag: str = "output directory") -> None:
    """Raise ValueError (one line) unless ``path`` is, or can be created as, a writable directory."""
    if str(path) == "":
        raise ValueError(f"{flag} '' is empty: expected a directory path")
    _check_name(path, flag)
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a file: expected a directory")
    _check_ancestor(path, path, flag)


def _check_name(path: str | os.PathLike, flag: str) -> None:
    """A path the system can hold: no NUL byte, no component longer than a file name may be."""
    text = os.fspath(path)
    if "\0" in text:
        raise ValueError(f"{flag} {text!r} holds a NUL byte: expected a path")
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if longest > 255:
        raise ValueError(f"{flag} {text[:80]!r}... has a component of {longest} bytes: expected at most 255 "
                         "(the file-name limit)")


def _check_ancestor(directory: Path, path: Path, flag: str) -> None:
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {str(path)!r}: {str(existing)!r} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(path)!r}: directory {str(existing)!r} is not writable")


def check_outputs(args: argparse.Namespace) -> None:
    """Check every output declared on the parser that made ``args`` (see the module docstring)."""
    given = []
    for dest, (flag, kind, keeps) in (getattr(args, _DECLARED, None) or {}).items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        (check_file if kind == FILE else check_dir)(value, flag)
        given.append((flag, kind, keeps, Path(os.path.abspath(Path(value).expanduser()))))
    for i, (flag, kind, keeps, path) in enumerate(given):
        for other_flag, other_kind, other_keeps, other in given[i + 1:]:
            if path == other:
                raise ValueError(f"{flag} and {other_flag} both name {str(path)!r}: expected two different paths")
        for other_flag, other_kind, other_keeps, other in given:
            if kind == FILE and other_kind == DIR and path.parent == other and path.name in other_keeps:
                raise ValueError(f"{flag} {str(path)!r} is the {path.name} that {other_flag} {str(other)!r} keeps: "
                                 "expected a file outside it, or another name")


def parse_checked(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, then `check_outputs`: the entry of every ``python -m`` command."""
    args = parser.parse_args(argv)
    check_outputs(args)
    return args
