"""The README's headline claims come from the memory wall's records: the generator on a fixture, and
the README's generated region against `results/` where a run has left its search records."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cherry.report.headline import BEGIN, END, headline, main, region, replace_region
from cherry.report.tables import SEARCH_COLUMNS, load_searches

ROOT = Path(__file__).resolve().parents[2]
SEARCHES = sorted((ROOT / "results" / "records" / "searches").glob("*.json"))


def _row(system, k, wall_reason, largest, status="ok", recompute=False):
    row = dict.fromkeys(SEARCH_COLUMNS)
    row.update(case="synth-tiny gat L4", system=system, k=k, status=status, wall_reason=wall_reason,
               largest_fit_batch=largest, recompute_at_largest=recompute, device_memory_bytes=9017753,
               capped_at_training_set=wall_reason == "training_set")
    return row


def _fixture() -> pd.DataFrame:
    return pd.DataFrame([_row("naive", "auto", "single_seed", 8), _row("dgl", "1", "training_set", 1200),
                         _row("cherry", "auto", "stopped", 1024, status="timeout", recompute=True)])


def test_headline_says_who_reaches_what():
    text = headline(_fixture())
    assert "under 8.6 MiB" in text
    assert "stopped because one seed did not fit: naive (K=auto) up to 8" in text
    assert "went on with recomputation: cherry (K=auto) up to 1,024" in text
    assert "reached the training set without recomputation: dgl up to 1,200" in text
    assert "a probe timed out, so at least: cherry (K=auto) up to 1,024" in text


def test_region_is_replaced_and_nothing_else(tmp_path):
    page = f"# Title\n\nbefore\n\n{BEGIN}\nold claim\n{END}\n\nafter\n"
    new = replace_region(page, "new claim")
    assert region(new) == "new claim" and new.startswith("# Title\n\nbefore\n\n") and new.endswith(f"{END}\n\nafter\n")
    with pytest.raises(ValueError, match="exactly one region"):
        region(page + BEGIN)


def test_readme_headline_matches_the_records():
    text = (ROOT / "README.md").read_text()
    region(text)  # the README carries its generated region
    if not SEARCHES:
        pytest.skip("no memory-wall records under results/ (make run writes them): the generator is tested on a fixture")
    assert region(text) == headline(load_searches(SEARCHES)), (
        "README.md's headline differs from results/: run `python -m cherry.report.headline --readme README.md "
        "results/records/searches/*.json`")


def test_command_rewrites_a_copy(tmp_path):
    if not SEARCHES:
        pytest.skip("no memory-wall records under results/ (make run writes them)")
    copy = tmp_path / "README.md"
    copy.write_text(f"x\n{BEGIN}\n{END}\n")
    assert main(["--readme", str(copy), *map(str, SEARCHES)]) == 0
    assert region(copy.read_text()) == headline(load_searches(SEARCHES))
