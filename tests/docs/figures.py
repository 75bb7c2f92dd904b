"""Where the figures quoted in README.md and docs/*.md come from.

A **figure** is a number with a unit of memory (B, KiB, MiB, GiB, KB, MB, GB), time (us, ms, s, min,
minutes, seconds, hours) or share (%), a multiplier (``x1.49``, ``1.4x``) or an interval
(``[1.38, 1.58]``), in prose, a table or an output block. A **passage** is a paragraph, a table, a
list item or a fenced block. A figure is sourced when its passage, the passage just before it, or
the heading of its section names the command that produces it (`COMMAND`: ``cherry ...``, ``make ...``, ``snakemake ...``,
``python -m ...``, ``python script.py ...`` in backticks, a code block, or an output block with a line
starting with the command) or, for a constant, the source file that holds it (``refine_groups.cu``), or when it lies in a region generated from records,
between ``<!-- generated from records: ... -->`` and ``<!-- /generated -->``. Shell and Python blocks
are commands themselves and data blocks (JSON, YAML) are specs: the sizes they give are inputs, not
figures. A confidence level ("95% interval") is not a figure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

UNIT = r"(?:[KMGT]i?B|B|us|µs|ms|s|min|minutes|seconds|hours|%)"
FIGURE = re.compile(
    rf"(?<![\w.\-/])\d[\d,]*(?:\.\d+)?(?:-\d[\d,]*(?:\.\d+)?)?\s?{UNIT}(?![\w/])"  # 22 MiB, 384.7 ms, 8-9%
    r"|(?<![\w.])x\d+(?:\.\d+)?(?![\w.])"                 # x1.49
    r"|(?<![\w.])\d+(?:\.\d+)?x(?![\w])"                  # 1.4x
    r"|\[\d+(?:\.\d+)?, \d+(?:\.\d+)?\]"                  # [1.38, 1.58]
)
COMMAND = re.compile(r"`(?:[A-Z_]+=\S+ )*(?:sudo )?(?:cherry|make|snakemake|\.venv/bin/snakemake|python -m|python \S+\.py|bash \S+\.sh) [^`]*`"
                     r"|`make [a-z-]+`"
                     r"|`[\w./-]+\.(?:py|cu|cpp|h|sh|yaml)`")  # a constant's source file: the figure is its value
GENERATED_OPEN = re.compile(r"<!-- generated from records: .+ -->")
GENERATED_CLOSE = "<!-- /generated -->"
SHELL_OR_PYTHON = ("bash", "sh", "shell", "console", "python", "py")
DATA = ("json", "yaml", "toml", "csv")  # a spec or config shown: its sizes are inputs, like a command's
CONFIDENCE = re.compile(r"\s(?:bootstrap |confidence )?interval")  # "95% interval" is a level, not a figure


@dataclass(frozen=True)
class Passage:
    """A run of lines: ``kind`` is "prose", "code" (a shell or Python block) or "shown" (any other block)."""

    start_line: int
    kind: str
    text: str
    generated: bool


def passages(text: str) -> list[Passage]:
    """The page's passages in order; a fence's lines stay in one passage, a blank line ends prose."""
    out, lines, i, generated = [], text.split("\n"), 0, False
    current: list[str] = []
    start = 0

    def flush():
        if current:
            out.append(Passage(start + 1, "prose", "\n".join(current), generated))
            current.clear()

    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^ *(`{3,}|~{3,})(.*)$", line)
        if fence:
            flush()
            lang = (fence[2].strip().split() or [""])[0].lower()
            j = i + 1
            while j < len(lines) and not re.match(rf"^ *{fence[1][0]}{{{len(fence[1])},}}\s*$", lines[j]):
                j += 1
            out.append(Passage(i + 2, "code" if lang in SHELL_OR_PYTHON + DATA else "shown",
                               "\n".join(lines[i + 1:j]), generated))
            i = j + 1
            continue
        if GENERATED_OPEN.search(line):
            flush()
            generated = True
        elif GENERATED_CLOSE in line:
            flush()
            generated = False
        elif not line.strip() or re.match(r"^\s*[-*] |^\s*\d+\. ", line):
            flush()  # a blank line or a new list item starts a passage
            if line.strip():
                start, current = i, [line]
        else:
            if not current:
                start = i
            current.append(line)
        i += 1
    flush()
    return out


OUTPUT_HEADER = re.compile(r"^\s*(?:\$ )?(?:cherry|make|snakemake|python -m) ", re.M)


def names_command(passage: Passage) -> bool:
    """A code block is a command; an output block whose line names its command (``cherry bench ...:``)
    sources itself and what follows; prose names one in backticks."""
    if passage.kind == "code":
        return True
    if passage.kind == "shown":
        return bool(OUTPUT_HEADER.search(passage.text))
    return bool(COMMAND.search(passage.text))


def unsourced_figures(text: str, page: str) -> list[str]:
    """``page:line: figure`` for every figure whose passage and the one before it name no command."""
    found, previous, section_names_one = [], None, False
    for passage in passages(text):
        if passage.kind == "prose" and passage.text.startswith("#"):
            section_names_one = names_command(passage)  # a heading naming its command sources its section
        if passage.kind != "code" and not passage.generated and not names_command(passage) \
                and not section_names_one and not (previous is not None and names_command(previous)):
            for figure in FIGURE.finditer(passage.text):
                if figure.group(0).endswith("%") and CONFIDENCE.match(passage.text, figure.end()):
                    continue
                line = passage.start_line + passage.text.count("\n", 0, figure.start())
                found.append(f"{page}:{line}: {figure.group(0)}")
        previous = passage
    return found
