"""The code's prose stays short and about the code, by construction.

- Every docstring in `cherry/` is made of sentences of at most 60 words. A sentence ends at ``.``,
  ``!`` or ``?`` followed by white space, at a blank line, and before a list item (``- `` or ``* ``).
- No comment or docstring in `cherry/`, `benchmarks/`, `workflow/`, `tests/` or the Snakefile cites
  a tracker issue (the word "issue" or a hash sign before a number) or a commit hash. History belongs to the records a run writes
  and to the version control log, not to the code.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
MAX_SENTENCE_WORDS = 60
SCANNED_FOR_REFERENCES = ("cherry", "benchmarks", "workflow", "tests")
TEXT_SUFFIXES = {".py", ".smk", ".sh", ".yaml", ".yml"}

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n|\n\s*(?=[-*] )")
_ISSUE = re.compile(r"\b(?:issues?|pull request|PR)\s*#?\d+\b|(?<![\w&])#\d{1,5}\b", re.IGNORECASE)
# A commit hash: 7 to 40 hex digits standing alone, with at least one digit and one letter (a plain
# number or an English word such as "defaced" is not one).
_HEX_WORD = re.compile(r"(?<![\w./-])[0-9a-f]{7,40}(?![\w-])")
_COMMENT_IN_LINE = re.compile(r"(?:^|\s)#(.*)$")


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text) if s.strip()]


def word_count(sentence: str) -> int:
    return sum(1 for word in sentence.split() if re.search(r"\w", word))


def docstrings(source: str) -> Iterator[tuple[int, str]]:
    """(line, docstring) of the module and of every class and function of ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=True)
            if text:
                yield getattr(node, "lineno", 1), text


def long_sentences(source: str, where: str) -> list[str]:
    return [f"{where}:{line} ({word_count(s)} words) {' '.join(s.split())[:90]}..."
            for line, text in docstrings(source) for s in sentences(text)
            if word_count(s) > MAX_SENTENCE_WORDS]


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of ``path`` (any ``#`` comment outside Python)."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
        yield from docstrings(source)
        return
    for number, line in enumerate(source.splitlines(), 1):
        match = _COMMENT_IN_LINE.search(line)
        if match:
            yield number, match.group(1)


def references(text: str) -> list[str]:
    """The tracker issue numbers and commit hashes ``text`` cites."""
    found = [m.group(0) for m in _ISSUE.finditer(text)]
    found += [m.group(0) for m in _HEX_WORD.finditer(text)
              if re.search(r"[a-f]", m.group(0)) and re.search(r"\d", m.group(0))]
    return found


def _scanned_files() -> list[Path]:
    files = [ROOT / "Snakefile"] if (ROOT / "Snakefile").is_file() else []
    for folder in SCANNED_FOR_REFERENCES:
        files += [p for p in sorted((ROOT / folder).rglob("*"))
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    return files


def test_no_docstring_sentence_in_cherry_is_over_60_words():
    found = []
    for path in sorted((ROOT / "cherry").rglob("*.py")):
        found += long_sentences(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "docstring sentences over 60 words (split them):\n" + "\n".join(found)


def test_no_comment_or_docstring_cites_an_issue_or_a_commit():
    files = _scanned_files()
    assert len(files) > 100  # the walk found the code
    found = [f"{path.relative_to(ROOT)}:{line}: {ref}"
             for path in files for line, text in prose(path) for ref in references(text)]
    assert not found, "tracker numbers or commit hashes in comments or docstrings:\n" + "\n".join(found)


def test_the_checks_find_what_they_look_for():
    long_one = " ".join(["word"] * 61) + "."
    source = f'"""Short. {long_one}"""\ndef f():\n    """Fine.\n\n    - {long_one}"""\n'
    assert len(long_sentences(source, "toy")) == 2
    assert long_sentences('"""' + " ".join(["word"] * 60) + '. Next."""', "toy") == []
    assert long_sentences('"""' + "- item one\n- " + " ".join(["w"] * 59) + '"""', "toy") == []
    assert references("fixed in issue 33, see #12 and issues 4") == ["issue 33", "#12", "issues 4"]
    assert references("at commit 58b8a5e, full 9f6f8f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8") == [
        "58b8a5e", "9f6f8f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8"]
    assert references('colour "#555555", 0xdeadbeef1, 1234567 rows, a defaced file, sha256 ' + "a1" * 32) == []
