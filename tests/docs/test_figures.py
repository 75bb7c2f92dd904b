"""Numbers come from records: every figure quoted in README.md and docs/*.md sits beside the command that
produces it or in a region generated from records (the rule: tests/docs/figures.py)."""
from __future__ import annotations

import pytest

from tests.docs.blocks import ROOT
from tests.docs.figures import unsourced_figures

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_figure_names_its_command(page):
    found = unsourced_figures(page.read_text(), str(page.relative_to(ROOT)))
    assert not found, ("figures with no command beside them (name the command that produced them in the "
                       "same paragraph, table or the one before, or generate them from records):\n" + "\n".join(found))


def test_the_rule_on_a_page():
    page = "\n".join([
        "Step time 384.7 ms and an adapter cost of about 1%.",                       # 2 unsourced
        "",
        "`cherry bench interop --steps 20` gives 27 ms per step, 8-9% of it the adapter.",
        "",
        "| step | ms |", "| --- | --- |", "| cherry | 31 ms |",                     # sourced by the paragraph above
        "",
        "The ratio is x1.37 [1.13, 1.51] (95% interval).",                           # 2 unsourced, not the 95%
        "",
        "```bash", "cherry train --device-memory 4MiB", "```",                      # an input
        "",
        "<!-- generated from records: python -m cherry.report.headline -->", "cherry up to 12 MiB", "<!-- /generated -->",
    ])
    assert unsourced_figures(page, "p.md") == ["p.md:1: 384.7 ms", "p.md:1: 1%", "p.md:9: x1.37", "p.md:9: [1.13, 1.51]"]
