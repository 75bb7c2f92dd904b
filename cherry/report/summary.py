"""The headline numbers of a workflow run, as Markdown (``results/summary.md``).

    python -m cherry.report.summary --table runs.csv --out summary.md [--json ratios.json]
        [--searches SEARCH.json ...] [--data-info INFO.json ...] [--] [VERIFY.json ...]

From the run table:
- per-step speedup of the subject (cherry) over every other micro-batcher (same case, same K);
- memory reduction over plain mini-batch training (the whole-batch systems and the libraries'
  baselines; who is which is the systems table's roles, `cherry.systems`);
- time per epoch against the device capacity (each system at its own K; needs the datasets' info for
  the steps per epoch);
- the estimator's error, convergence and ablation tables, and every run that did not finish ok.
 From the memory wall's search records: each system's own K and the largest batch it trains.
From the records of `cherry verify --json` (one per check, `cherry.bench.verify_record`): the
gradient-equivalence error. Ratios use medians of measured steps (warm-up excluded) pooled over
repeats, with the hierarchical interval of `cherry.report.stats`; a missing or failed run leaves its
cell as "-". ``--json`` writes every timed ratio with its interval and verdict
(``{"ratios": [{"key", "section", "value", "low", "high", "verdict", ...}]}``), which
`cherry.report.compare_verdicts` compares between two workflow runs. The sections are `SECTIONS`;
which experiment phases feed each is the experiment table (`cherry.bench.phases`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from cherry.report import tables as t
from cherry.systems.table import WHOLE_BATCH_ROLES, subject_system, system_entry, systems_with_role
from cherry.report.stats import MIN_RUNS, NOISE_MARGIN, median_ratio

def _fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["(no runs)", ""]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _median_time(rows: pd.DataFrame) -> Optional[float]:
    stats = t.step_time_stats(rows)
    return stats[0] if stats else None


def _median_peak_mib(rows: pd.DataFrame) -> Optional[float]:
    stats = t.column_stats(rows, "peak_tracked_bytes")
    return stats[0] / t.MIB if stats else None


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def _time_ratio(numerator: pd.DataFrame, denominator: pd.DataFrame):
    """Median step-time ratio of two groups of runs with its 95% hierarchical bootstrap interval (runs,
    then steps within each run, drawn with replacement; None: too few steps)."""
    return median_ratio(t.measured_step_times_by_run(numerator), t.measured_step_times_by_run(denominator))


def _ratio_entry(section: str, key: str, r, verdict: str) -> dict:
    return {"section": section, "key": key, "value": r.value, "low": r.low, "high": r.high, "verdict": verdict,
            "steps": [r.num_numerator, r.num_denominator], "runs": [r.runs_numerator, r.runs_denominator]}


INTERVAL_TEXT = (f"95% interval from a hierarchical bootstrap (repeats drawn with replacement, then steps "
                 f"within each repeat); a verdict needs {MIN_RUNS} repeats a side and the whole interval "
                 f"beyond 1 +- {NOISE_MARGIN:.0%}, else \"within noise\"")


def _ratio_text(r) -> str:
    return r.text() if r is not None else "-"


def _present(rows: pd.DataFrame, names) -> list[str]:
    """The systems of ``names`` (in the systems table's order) that have rows in ``rows``."""
    found = set(rows["system"])
    return [s for s in names if s in found]


def speedup_section(frame: pd.DataFrame, ratios: Optional[list] = None) -> list[str]:
    """Per case and K: the subject's median step time and every other micro-batcher's time ratio to it
    (the systems table's roles decide who is compared)."""
    rows = t.rows_of_section(frame, "step_time")
    me = subject_system()
    others = _present(rows, systems_with_role("micro_batcher"))
    out, verdicts = [], {s: [] for s in others}
    for (experiment, case, k), group in rows.groupby(["experiment", "case", "k"], sort=False):
        if k in ("1", "auto") or me not in set(group["system"]):
            continue
        mine = group[group["system"] == me]
        cells = [experiment, case, k, _fmt(_median_time(mine))]
        for s in others:
            r = _time_ratio(group[group["system"] == s], mine)
            verdicts[s].append(r.verdict if r is not None else "too few steps")
            if r is not None and ratios is not None:
                ratios.append(_ratio_entry("step_time", f"{experiment} | {case} | K={k} | {s}/{me}", r, r.verdict))
            cells += [_ratio_text(r), r.verdict if r is not None else "-"]
        out.append(cells)
    head = [f"## Step time: {me} vs the other micro-batchers ({_labels(others) or 'none'}; same batch, same K)", "",
            f"Ratio = other / {me} of median step times (per-step times pooled over repeats, warm-up "
            f"excluded), {INTERVAL_TEXT}.", ""]
    counts = []
    for s, v in verdicts.items():
        tally = ", ".join(f"{word} {v.count(word)}" for word in ("cherry faster", "within noise", "cherry slower",
                                                                 "too few runs")
                          if v.count(word))
        counts.append(f"{s}: {tally or 'no rows'}")
    head += ["Verdicts over the rows below: " + "; ".join(counts) + ".", ""]
    header = ["experiment", "case", "K", f"{me} s"] + [c for s in others for c in (f"{s}/{me}", "verdict")]
    return head + _table(header, out)


def _labels(names: list[str]) -> str:
    """"Betty, Buffalo and naive": the systems' display labels (systems table) in words."""
    labels = [system_entry(n).label for n in names]
    return " and ".join(filter(None, [", ".join(labels[:-1]), labels[-1]])) if labels else ""


def memory_section(frame: pd.DataFrame) -> list[str]:
    """Per case: each whole-batch system's peak (plain mini-batch and the libraries', by the systems
    table's roles) against the subject's at each of its K."""
    rows = t.rows_of_section(frame, "memory")
    me = subject_system()
    plain = _present(rows, systems_with_role(*WHOLE_BATCH_ROLES))
    out = []
    for (experiment, case), group in rows.groupby(["experiment", "case"], sort=False):
        refs = {s: _median_peak_mib(group[group["system"] == s]) for s in plain}
        for k, sub in group[group["system"] == me].groupby("k", sort=False):
            mine = _median_peak_mib(sub)
            out.append([experiment, case, k, *(_fmt(refs[s]) for s in plain), _fmt(mine),
                        *(_fmt(_ratio(refs[s], mine)) for s in plain)])
    head = [f"## Peak memory: plain mini-batch ({_labels(plain) or 'none'}) vs {me}", "",
            f"Peak tensor memory in MiB; reduction = plain / {me} (> 1: {me} needs less).", ""]
    return head + _table(["experiment", "case", f"{me} K", *(f"{s} MiB" for s in plain), f"{me} MiB",
                          *(f"{s}/{me}" for s in plain)], out) + streamed_note(rows)


def _wall_note(r) -> str:
    """What stopped one search, in words (`cherry.bench.capacity.WALL_REASONS`), with recomputation."""
    from cherry.bench.capacity import WALL_REASONS

    note = WALL_REASONS.get(r.wall_reason, str(r.wall_reason))
    if r.wall_reason == "stopped":
        last = r.probes[-1]["batch_size"] if r.probes else None
        note = (f"{r.status} at batch {last}: a lower bound" if r.status == "timeout"
                else f"{r.status}: {(r.reason or '')[:80]}")
    return note + ("; with recomputation" if r.recompute_at_largest else "")


def wall_verdicts(searches: pd.DataFrame) -> list[str]:
    """Per case, one line: who stopped because one seed did not fit (and at which batch), who went on
    with recomputation, who reached the training set, who ran out of memory at its own K, and whose
    search a timed-out probe stopped (its largest batch a lower bound)."""
    lines = []
    for case, group in searches.groupby("case", sort=False):
        rows = list(group.itertuples())
        single = [r for r in rows if r.wall_reason == "single_seed"]
        recomputed = [r for r in rows if r.recompute_at_largest]
        whole = [r for r in rows if r.wall_reason == "training_set" and not r.recompute_at_largest]
        parts = []
        if single:
            parts.append(f"stopped because one seed did not fit: {_named(single)}")
        if recomputed:
            parts.append(f"went on with recomputation: {_named(recomputed)}")
        if whole:
            without = " without recomputation" if recomputed else ""
            parts.append(f"reached the training set{without}: {_named(whole)}")
        at_own_k = [r for r in rows if r.wall_reason == "capacity"]
        if at_own_k:
            parts.append(f"ran out of memory at their own K: {_named(at_own_k)}")
        timed_out = [r for r in rows if r.status == "timeout"]
        if timed_out:
            parts.append(f"a probe timed out, so at least: {_named(timed_out)}")
        capacities = group["device_memory_bytes"].dropna()
        under = f" under {_fmt(float(capacities.iloc[0]) / t.MIB, 4)} MiB" if len(capacities) else ""
        if parts:
            lines.append(f"- {case}{under}: " + "; ".join(parts) + ".")
    return lines + ([""] if lines else [])


def _missing(value) -> bool:
    return value is None or pd.isna(value)


def _named(rows) -> str:
    """"system (K) up to N" (its largest batch) of each search row, comma-separated."""
    return ", ".join(f"{t.system_label(r.system, r.k)} "
                     + ("fits no batch" if _missing(r.largest_fit_batch) else f"up to {int(r.largest_fit_batch):,}")
                     for r in rows)


def wall_section(searches: pd.DataFrame) -> list[str]:
    """Per system: its own K at the largest batch it trains under the capacity, found by search, and
    what stopped it (one seed that does not fit, a K that does not fit, the training set)."""
    out = []
    for r in searches.itertuples():
        largest = "-" if _missing(r.largest_fit_batch) else f"{int(r.largest_fit_batch):,}"
        if r.capped_at_training_set:
            largest += " (whole training set)"
        oom = "-" if _missing(r.smallest_oom_batch) else f"{int(r.smallest_oom_batch):,}"
        k = "-" if _missing(r.k_at_largest) else int(r.k_at_largest)
        out.append([r.case, t.system_label(r.system, r.k), k, largest, oom,
                    _fmt(None if r.device_memory_bytes is None else r.device_memory_bytes / t.MIB, 4),
                    r.num_probes, _fmt(r.search_wall_s, 3), _wall_note(r)])
    return ["## Largest trainable batch under the memory wall (search)", "",
            "Per system at its own K: doubling from the start batch up to the training set, then bisection "
            "between the largest fitting and the smallest out-of-memory batch; K is the one the system chose at "
            "its largest batch. \"one seed does not fit\": the smallest failing batch ran out of memory at one "
            "seed per micro-batch, so no K fits it (K alone stops there; cherry then recomputes each layer's "
            "activations in backward). A search stopped by a probe that timed out gives a lower bound.", ""
            ] + wall_verdicts(searches) + _table(
        ["case", "system", "own K", "largest batch", "smallest OOM batch", "capacity MiB", "probes", "search s",
         "stopped by"], out)


def streamed_note(rows: pd.DataFrame) -> list[str]:
    """One line naming the subject's cases whose measured steps streamed their input layer
    (`streamed_steps` of the records: n streamed of the m measured steps of all the case's runs at
    that K, seeds and repeats pooled), or nothing where none did."""
    me = subject_system()
    if "streamed_steps" not in rows:
        return []
    mine = rows[rows["system"] == me]
    streamed = pd.to_numeric(mine["streamed_steps"], errors="coerce").fillna(0)
    steps, warmup = mine["steps_completed"].fillna(0), mine["warmup_steps"].fillna(0)
    measured = steps.where(steps <= warmup, steps - warmup)  # the records count measured steps only
    found = [f"{case} at K {k}: {int(streamed[g.index].sum())} of {int(measured[g.index].sum())} measured steps"
             for (case, k), g in mine.groupby(["case", "k"], sort=False) if streamed[g.index].sum() > 0]
    return ["", f"{me} streamed its input layer (`stream_inputs`) in " + "; ".join(found) + "."] if found else []


def epoch_time_section(frame: pd.DataFrame, sizes: dict[str, int]) -> list[str]:
    """Time per epoch against capacity (median step seconds x steps per epoch), each system at its own K."""
    rows = t.rows_of_section(frame, "epoch_time")
    out = []
    order = {system: i for i, system in enumerate(dict.fromkeys(rows["system"]))}  # the config's order
    groups = rows.groupby(["case", "system", "k", "device_memory_bytes"], sort=False)
    for (case, system, k, capacity), group in sorted(groups, key=lambda g: (g[0][0], order[g[0][1]], g[0][3])):
        size = sizes.get(str(group["dataset"].iloc[0]))
        stats = t.epoch_time_stats(group, size) if size else None
        ks = t.column_stats(group, "num_microbatches_max")
        out.append([case, t.system_label(system, k), _fmt(capacity / t.MIB, 4), _fmt(ks[0] if ks else None),
                    _fmt(stats[0] if stats else None), t.statuses(group)])
    return ["## Time per epoch against the device capacity", "",
            "Median step seconds x steps per epoch (training-set size / batch size), from a few timed steps; "
            "each system at its own K under each capacity.", ""] + _table(
        ["case", "system", "capacity MiB", "K", "s per epoch", "status"], out) + streamed_note(rows)


def verify_section(paths: list[str]) -> list[str]:
    """One row per `cherry verify --json` record (named by its file); an unreadable one says why."""
    from cherry.bench.verify_record import read_verify_record

    out = []
    for path in paths:
        name = Path(path).stem
        try:
            v = read_verify_record(path)
        except ValueError as exc:
            out.append([name, "-", "-", "-", "-", f"unreadable: {exc}"])
            continue
        verdict = f"{'within' if v.within else 'ABOVE'} {v.tolerance:g}"
        if v.parameters_identical is False:
            verdict += "; ranks' parameters DIFFERENT"
        out.append([name, v.num_microbatches, v.num_seeds, _fmt(v.max_rel_diff), _fmt(v.max_abs_diff), verdict])
    return ["## Gradient equivalence (`cherry verify`: K micro-batches vs the whole batch)", ""] + _table(
        ["check", "K", "seeds", "largest relative difference", "largest absolute difference", "tolerance"], out)


def estimator_section(frame: pd.DataFrame) -> list[str]:
    rows = t.estimator_rows(frame)
    if rows.empty:
        return ["## Memory estimator", "", f"(no {subject_system()} runs with an estimate)", ""]
    step = rows["estimator_step_rel_error"].dropna() if "estimator_step_rel_error" in rows else rows.iloc[0:0]
    inner = rows["estimator_median_rel_error"].dropna()
    return ["## Memory estimator", "",
            f"{len(rows)} {subject_system()} runs without evaluation, measured steps only (the warm-up's plans use the "
            f"uncalibrated model): median over runs of |the plan's largest micro-batch estimate - the step's "
            f"largest measured micro-batch peak| / that peak = {_fmt(step.median() if len(step) else None)}; "
            f"per-micro-batch median error reported by the runs: {_fmt(inner.median() if len(inner) else None)}.", ""]


def _last_epoch(rows: pd.DataFrame, column: str) -> Optional[float]:
    """Median over the ok repeats of the last epoch's value of a per-epoch column."""
    values = [list(v)[-1] for v in t.ok_rows(rows)[column] if len(v) and list(v)[-1] is not None]
    return float(pd.Series(values).median()) if values else None


def convergence_section(frame: pd.DataFrame) -> list[str]:
    rows = t.rows_of_section(frame, "convergence")
    out = []
    for (case, system, k), group in rows.groupby(["case", "system", "k"], sort=False):
        acc, loss = _last_epoch(group, "epoch_valid_acc"), _last_epoch(group, "epoch_losses")
        out.append([case, t.system_label(system, k), _fmt(acc, 4), _fmt(loss, 5), t.statuses(group)])
    return ["## Convergence (last epoch)", ""] + _table(["case", "system", "valid acc", "loss", "status"],
                                                        out) + streamed_note(rows)


def ablation_section(frame: pd.DataFrame, ratios: Optional[list] = None) -> list[str]:
    rows = t.rows_of_section(frame, "ablation")
    out = []
    for (case, k), group in rows.groupby(["case", "k"], sort=False):
        base = group[group["variant"] == "all on"]
        base_peak = _median_peak_mib(base)
        for variant, sub in group.groupby("variant", sort=False):
            peak = _median_peak_mib(sub)
            red = t.column_stats(sub, "redundancy_input")
            r = _time_ratio(sub, base) if variant != "all on" else None
            verdict = "-" if variant == "all on" or r is None else r.verdict_as("the technique pays",
                                                                                 "the technique costs")
            if r is not None and ratios is not None:
                ratios.append(_ratio_entry("ablation", f"ablation | {case} | K={k} | {variant} / all on", r, verdict))
            out.append([case, k, variant, _fmt(_median_time(sub)), _ratio_text(r), verdict, _fmt(peak),
                        _fmt(_ratio(peak, base_peak)), _fmt(red[0] if red else None)])
    return ["## Ablation (each technique off in turn)", "",
            "Time vs all on = variant / all-on median step time: above 1 the technique pays (turning it off is "
            f"slower), below 1 it costs on this device; {INTERVAL_TEXT}. Peak memory and redundancy are "
            "deterministic.", ""] + _table(
        ["case", "K", "variant", "step s", "time vs all on", "verdict", "peak MiB", "peak vs all on", "redundancy"],
        out)


def status_section(frame: pd.DataFrame) -> list[str]:
    counts = frame["status"].value_counts().to_dict()
    lines = ["## Runs", "", "Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".", ""]
    others = frame[frame["status"] != "ok"]
    rows = [[f"{r.experiment}/{r.axis}" if r.axis else r.experiment, t.system_label(r.system, r.k), r.dataset,
             r.batch_size, r.status, (r.reason or "")[:110]] for r in others.itertuples()]
    return lines + (_table(["experiment", "system", "dataset", "batch", "status", "reason"], rows) if rows else [])


def accuracy_cap_section(frame: pd.DataFrame) -> list[str]:
    """The summary table: per case and setting, seeds, final best-validation test accuracy (mean and
    min-max over seeds), training seconds, status, and the verdict against the subject."""
    from cherry.report.accuracy_cap import MIN_SEEDS, final_stats, settings, verdict, wall_mean

    found = settings(frame)
    subject = {case: final_stats(rows) for case, _, rows in found
               if rows.iloc[0]["system"] == subject_system() and rows.iloc[0]["axis"] == "own_k"}
    out = []
    for case, label, rows in found:
        stats = final_stats(rows)
        acc = "-" if stats is None else f"{stats[0]:.4f} [{stats[1]:.4f}, {stats[2]:.4f}]"
        is_subject = rows.iloc[0]["system"] == subject_system() and rows.iloc[0]["axis"] == "own_k"
        out.append([case, label, f"{0 if stats is None else stats[3]}/{len(rows)}", acc, _fmt(wall_mean(rows)),
                    t.statuses(rows), "-" if is_subject else verdict(stats, subject.get(case))])
    streamed = _accuracy_cap_streamed(found)
    return ["## Accuracy under a fixed device", "",
            "Each system under one capacity with the settings it can fit: a plain system at the largest batch "
            "that fits (the run's fanouts) and at the run's batch with the largest fanouts that fit; the others "
            "at the run's batch and fanouts with their own K. Test accuracy at the best validation epoch, mean "
            f"[min, max] over seeds; a verdict against {subject_system()} only with {MIN_SEEDS}+ seeds a side and "
            "disjoint spreads. Training seconds: step time summed over the epochs (evaluation excluded), "
            "mean over seeds.", ""] + _table(
        ["case", "setting", "seeds ok", "best-valid test acc", "train s", "status", "verdict"], out) + streamed


def _accuracy_cap_streamed(found: list) -> list[str]:
    """`streamed_note` of the accuracy-under-a-cap settings, each row named by its table's case."""
    return streamed_note(pd.concat([rows.assign(case=case) for case, _, rows in found])) if found else []


@dataclass(frozen=True)
class SummaryInputs:
    """What a section reads: the run table, the memory wall's searches, each dataset's training-set
    size, the `cherry verify --json` records, and the list that collects every timed ratio (or None)."""

    frame: pd.DataFrame
    searches: pd.DataFrame
    sizes: dict
    verify_paths: list
    ratios: Optional[list]


@dataclass(frozen=True)
class Section:
    """One section of the summary: under "Timed results" (``timed``) or "Deterministic results";
    ``write(inputs)`` returns its Markdown lines. A section fed by experiment phases (a phase's
    ``summary`` names it, `cherry.bench.phases`) reads their rows with `tables.rows_of_section`."""

    timed: bool
    write: Callable[[SummaryInputs], list]


# Every section, in the summary's order within its group (timed, then deterministic).
SECTIONS: dict[str, Section] = {
    "step_time": Section(True, lambda i: speedup_section(i.frame, i.ratios)),
    "ablation": Section(True, lambda i: ablation_section(i.frame, i.ratios)),
    "epoch_time": Section(True, lambda i: epoch_time_section(i.frame, i.sizes)),
    "memory": Section(False, lambda i: memory_section(i.frame)),
    "memory_wall": Section(False, lambda i: wall_section(i.searches)),
    "verify": Section(False, lambda i: verify_section(i.verify_paths)),
    "estimator": Section(False, lambda i: estimator_section(i.frame)),
    "convergence": Section(False, lambda i: convergence_section(i.frame)),
    "accuracy_cap": Section(False, lambda i: accuracy_cap_section(i.frame)),
    "runs": Section(False, lambda i: status_section(i.frame)),
}


def register_section(name: str, write: Callable[[SummaryInputs], list], *, timed: bool) -> None:
    """Add section ``name`` (the name a phase's ``summary`` lists) after the others of its group.
    ValueError if the name is taken, TypeError if ``write`` is not callable."""
    from cherry.bench.phases import check_new_entry

    check_new_entry("summary section", name, SECTIONS, write)
    SECTIONS[name] = Section(bool(timed), write)


def render_summary(frame: pd.DataFrame, verify_paths: list[str], searches: Optional[pd.DataFrame] = None,
                   sizes: Optional[dict[str, int]] = None, ratios: Optional[list] = None) -> str:
    """The whole summary as Markdown; every timed ratio is appended to ``ratios`` if given."""
    searches = t.load_searches([]) if searches is None else searches
    inputs = SummaryInputs(frame, searches, sizes or {}, list(verify_paths), ratios)
    sha = ", ".join(sorted(set(str(s)[:10] for s in frame["git_sha"].dropna()))) or "unknown"
    devices = ", ".join(sorted(set(str(d) for d in frame["device_name"].dropna()))) or "unknown"
    lines = ["# Cherry benchmark summary", "",
             f"{len(frame)} runs from the workflow's run table and {len(searches)} memory-wall searches; "
             f"commit {sha}; device {devices}.", ""]
    lines += ["# Timed results", "",
              "Timed runs never overlap (the workflow's `timed_runs` resource) and repeats are interleaved "
              "across systems; every ratio carries its 95% interval from a bootstrap over repeats and steps.", ""]
    for section in SECTIONS.values():
        if section.timed:
            lines += section.write(inputs)
    lines += ["# Deterministic results", "", "Memory peaks, K, redundancy and gradient error: no repeats needed.", ""]
    for section in SECTIONS.values():
        if not section.timed:
            lines += section.write(inputs)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.io import write_bytes_atomic
    from cherry.outputs import add_output, parse_checked

    parser = argparse.ArgumentParser(prog="python -m cherry.report.summary", description=__doc__.splitlines()[0])
    parser.add_argument("verify", nargs="*", help="records of `cherry verify --json` (one per check)")
    t.add_report_inputs(parser)
    add_output(parser, "--out", required=True, help="Markdown file to write")
    add_output(parser, "--json", default=None, help="also write every timed ratio and its verdict here")
    args = parse_checked(parser, argv)
    try:
        frame, searches, sizes = t.read_report_inputs(args)
    except ValueError as exc:
        print(f"cherry.report.summary: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    ratios: list = []
    text = render_summary(frame, args.verify, searches, sizes, ratios)
    write_bytes_atomic(args.out, text.encode())
    if args.json:
        sha = sorted(set(str(s) for s in frame["git_sha"].dropna()))
        payload = {"git_sha": sha, "num_runs": len(frame), "ratios": ratios}
        write_bytes_atomic(args.json, (json.dumps(payload, indent=1) + "\n").encode())
    print(text, file=sys.stderr)
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.report.summary", main))
