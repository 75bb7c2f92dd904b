"""The fenced code blocks of README.md, docs/*.md and examples/*.md, and how the tests run them.

Every block declares its kind in its info string: a shell block (``bash``, ``sh``, ``shell``,
``console``) or a Python block (``python``, ``py``) is executed as written; an output, synopsis or
data block (``text``, ``json``, ``yaml``, ``toml``, ``csv``) is shown only. A block without an info
string is an error, so a new block cannot escape the tests by saying nothing.

A block that must not run says why in its first line, visible to every reader: ``# no-test: WHY``.
In a shell block, one command may say the same in its trailing comment. A shell command expected to
fail says its status in its trailing comment (``# ... exit status 3 ...``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = frozenset({"bash", "sh", "shell", "console"})
PYTHON = frozenset({"python", "py"})
SHOWN = frozenset({"text", "json", "yaml", "toml", "csv"})
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
NO_TEST = re.compile(r"#\s*no-test:\s*(?P<why>\S.*)$")
EXIT_STATUS = re.compile(r"#.*\bexit status (?P<status>\d+)")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its page (relative to the repository), the line of its opening fence (1-based),
    its info string's first word (``""`` when absent) and its text without the fences."""

    page: str
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def no_test(self) -> str | None:
        """The reason on the block's first line (``# no-test: WHY``), or None."""
        first = self.text.lstrip("\n").split("\n", 1)[0]
        found = NO_TEST.match(first.strip())
        return found["why"].strip() if found else None


@dataclass(frozen=True)
class ShellCommand:
    """One command of a shell block (continuation lines joined), with its expected exit status and
    the reason it is not run, if its trailing comment gives one."""

    block: CodeBlock
    text: str
    expected_status: int
    no_test: str | None


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose blocks are tests: README.md, docs/*.md, examples/*.md (a new page is included)."""
    found = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "examples").glob("*.md"))]
    return [p for p in found if p.is_file()]


def parse_blocks(text: str, page: str) -> list[CodeBlock]:
    """The fenced blocks of one Markdown text, in order. An unclosed fence is a ValueError."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise ValueError(f"{page}:{i + 1}: the fence {fence!r} is never closed")
        info = opening["info"].strip().split()
        blocks.append(CodeBlock(page, i + 1, info[0].lower() if info else "", "\n".join(body)))
        i = j + 1
    return blocks


def all_blocks(root: Path = ROOT) -> list[CodeBlock]:
    """Every block of every page, pages in `pages` order."""
    return [b for p in pages(root) for b in parse_blocks(p.read_text(), str(p.relative_to(root)))]


def shell_commands(block: CodeBlock) -> list[ShellCommand]:
    """The commands of a shell block: comment-only and blank lines dropped, ``\\`` continuations joined."""
    commands, pending = [], ""
    for raw in block.text.split("\n"):
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        command, pending = pending + line, ""
        found = NO_TEST.search(command)
        status = EXIT_STATUS.search(command)
        commands.append(ShellCommand(block, command.strip(), int(status["status"]) if status else 0,
                                     found["why"].strip() if found else None))
    if pending:
        raise ValueError(f"{block.where}: the block ends inside a continued line")
    return commands
