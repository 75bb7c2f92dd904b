"""The experiment table (cherry.bench.phases): one row per phase, read by the run matrix, the config
schema, the workflow's timed runs and figures, the figures module, the summary and the captions.

Adding a phase is one row, one figure function and one caption: the toy phase below is registered
that way and must reach the run specs, the figure list, the figures and the summary's sections."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cherry.bench import phases
from cherry.bench.experiments import ConfigError, config_schema, expand_experiments, plan_runs, plan_searches
from cherry.report import figures, summary
from cherry.report import tables as t

REPO = Path(__file__).resolve().parents[2]
CAPTIONS = REPO / "workflow" / "report" / "captions"


def test_every_figure_has_one_draw_function_and_one_caption():
    sources = phases.figure_sources()
    assert set(sources) == set(figures.FIGURES)
    assert {p.stem for p in CAPTIONS.glob("*.rst")} == set(sources)
    for name in sources:
        assert (CAPTIONS / f"{name}.rst").read_text().startswith("**"), name  # a bold title first
    assert not any("{%" in p.read_text() for p in CAPTIONS.glob("*.rst"))  # plain text, no Jinja ladder
    # every figure source is a phase of the table or a system whose runs of every phase it reads
    from cherry.systems import system_names

    assert all(s in phases.PHASES or s in system_names() for s in sources.values())


def test_every_row_names_known_sections_and_case_schemas():
    defs = config_schema()["$defs"]
    for p in phases.PHASES.values():
        assert p.case_schema in defs, p
        assert set(p.summary) <= set(summary.SECTIONS), p
    used = {p.case_schema for p in phases.PHASES.values()}
    assert {name for name in defs if name.endswith("_case")} == used  # no case kind without a phase
    assert list(config_schema()["properties"]["experiments"]["properties"]) == list(phases.PHASES)
    assert set(phases.timed_phases()) < set(phases.PHASES)


@pytest.mark.parametrize("kwargs, error", [
    ({"name": "Toy"}, ValueError), ({"case_schema": "grid case"}, ValueError), ({"expand": 3}, TypeError),
    ({"timed": "yes"}, TypeError), ({"figures": "toy_figure"}, TypeError), ({"summary": ("Step",)}, TypeError),
])
def test_a_bad_row_is_refused_with_one_line(kwargs, error):
    row = {"name": "toy", "case_schema": "grid_case", "expand": phases.expand_grid, "timed": True, **kwargs}
    with pytest.raises(error) as info:
        phases.Phase(**row)
    assert "\n" not in str(info.value)


def test_a_phase_or_figure_is_registered_once():
    with pytest.raises(ValueError, match="already in the table"):
        phases.register_phase(phases.Phase("breakdown", "grid_case", phases.expand_grid, timed=True))
    with pytest.raises(ValueError, match="already drawn"):
        phases.register_phase(phases.Phase("toy", "grid_case", phases.expand_grid, timed=True, figures=("ablation",)))
    assert "toy" not in phases.PHASES
    with pytest.raises(ValueError, match="already registered"):
        figures.register_figure("ablation", lambda frame: None)
    with pytest.raises(ValueError, match="figure name 'Toy'"):
        figures.register_figure("Toy", lambda frame: None)
    with pytest.raises(TypeError, match="summary section toy: got int"):
        summary.register_section("toy", 3, timed=True)
    assert "Toy" not in figures.FIGURES and "toy" not in summary.SECTIONS
    with pytest.raises(ValueError, match="unknown experiment phase 'nope'"):
        phases.phase("nope")


def _toy_expand(case: dict, base: dict):
    """Each system at each K, once at the case's batch size and once at twice it."""
    for system, ks in case["systems"].items():
        for k in ks:
            for scale in (1, 2):
                yield f"x{scale}", {"system": system, "num_microbatches": k,
                                    "batch_size": scale * base.get("batch_size", 256)}


def _draw_toy(frame):
    rows = t.rows_of_figure(frame, "toy_figure")
    fig, axes = figures._grid(1, 1)
    axes[0][0].bar(range(len(rows)), [1.0] * len(rows))
    return fig


def _toy_section(inputs: summary.SummaryInputs) -> list:
    rows = t.rows_of_section(inputs.frame, "toy")
    return ["## Toy", "", f"{len(rows)} toy runs: {', '.join(sorted(set(rows['axis'])))}", ""]


CONFIG = {
    "run": {"hidden": 8, "fanouts": [3, 4], "batch_size": 64, "epochs": 0, "steps": 3, "warmup": 1,
            "evaluate": False},
    "experiments": {"toy": [{"dataset": "synth-tiny", "systems": {"full": [1], "cherry": [2], "betty": [2]}}],
                    "breakdown": [{"dataset": "synth-tiny", "systems": {"full": [1]}}]},
}


@pytest.fixture
def toy(tmp_path):
    """The toy phase as a newcomer adds one: a row, a figure function, a caption (and a section)."""
    row = phases.register_phase(phases.Phase("toy", "grid_case", _toy_expand, timed=True,
                                             figures=("toy_figure",), summary=("step_time", "toy")))
    figures.register_figure("toy_figure", _draw_toy)
    summary.register_section("toy", _toy_section, timed=False)
    caption = tmp_path / "captions"
    caption.mkdir()
    (caption / "toy_figure.rst").write_text("**Toy.** One bar per toy run.\n")
    try:
        yield row, caption
    finally:
        phases.unregister_phase("toy")
        figures.FIGURES.pop("toy_figure", None)
        summary.SECTIONS.pop("toy", None)


def test_an_unregistered_phase_is_not_a_config_key():
    with pytest.raises(ConfigError) as info:
        expand_experiments(CONFIG)
    assert "'toy' was unexpected" in str(info.value) and "\n" not in str(info.value)


def _fake_table(tmp_path: Path, specs: dict) -> Path:
    """A run table of ``specs`` with made-up, deterministic measurements (no run is trained)."""
    from cherry.bench.aggregate import collect_records, to_csv_bytes
    from cherry.bench.measure import PHASES, StepTiming
    from cherry.bench.record import RunMeasurements, build_record, provenance
    from cherry.spec import spec_from_dict

    prov = provenance("cpu")
    paths = []
    for i, (run, spec) in enumerate(specs.items()):
        steps = tuple(StepTiming(total_s=0.1 * (1 + i % 3) + 0.01 * j, phases_s={p: 0.01 for p in PHASES})
                      for j in range(4))
        m = RunMeasurements(status="ok", warmup_steps=1, step_timings=steps, peak_tracked_bytes=2**20 * (1 + i))
        record = build_record(spec_from_dict(spec), m, prov)
        path = tmp_path / f"{run}.json"
        path.write_text(json.dumps(record))
        paths.append(path)
    table = tmp_path / "runs.csv"
    table.write_bytes(to_csv_bytes(collect_records(paths)))
    return table


def test_a_toy_phase_flows_into_specs_figures_and_summary(toy, tmp_path):
    from cherry.report.results_page import figure_caption

    row, captions = toy
    # run specs: the row's expansion, validated by the config schema that now has a `toy` key
    runs = plan_runs(CONFIG)
    toy_runs = {r: s for r, s in runs.items() if s["experiment"] == "toy"}
    assert len(toy_runs) == 3 * 2 and all(r.startswith("toy.x") for r in toy_runs)
    assert sorted({s["batch_size"] for s in toy_runs.values()}) == [64, 128]
    assert {s["axis"] for s in toy_runs.values()} == {"x1", "x2"}
    assert not plan_searches(CONFIG)
    with pytest.raises(ConfigError, match="experiments/toy/0"):
        expand_experiments({**CONFIG, "experiments": {"toy": [{"dataset": "synth-tiny", "systems": {"full": [2]}}]}})
    # the workflow's lists: timed (its CPU runs never overlap) and the figure it draws
    assert "toy" in phases.timed_phases()
    assert phases.figure_sources()["toy_figure"] == "toy"
    assert figure_caption("toy_figure", captions) == "**Toy.** One bar per toy run."
    # the figure and the summary read the toy's rows through the table
    frame = t.load_table(_fake_table(tmp_path, runs))
    assert len(t.rows_of_figure(frame, "toy_figure")) == 6 and len(t.rows_of_section(frame, "toy")) == 6
    assert set(t.rows_of_section(frame, "step_time")["experiment"]) == {"breakdown", "toy"}
    assert set(t.rows_of_section(frame, "convergence")["experiment"]) == set()
    png = tmp_path / "toy.png"
    figures.render("toy_figure", frame, str(png), None)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ratios: list = []
    text = summary.render_summary(frame, [], ratios=ratios)
    assert "6 toy runs: x1, x2" in text
    assert text.index("## Toy") > text.index("# Deterministic results")  # registered as deterministic
    step_rows = [line for line in text.splitlines() if line.startswith("| toy |")]
    assert len(step_rows) == 2  # cherry at K=2 against betty, once per batch size (one case each)
    assert {r["key"].split(" | ")[0] for r in ratios} == {"toy"}
