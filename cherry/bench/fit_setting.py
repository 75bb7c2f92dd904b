"""``python -m cherry.bench.fit_setting --spec SPEC.json --knob KNOB --out FIT.json``: the largest setting
of one knob that trains under the spec's device capacity.

The accuracy-under-a-cap experiment trains a plain system (one batch, K = 1) with what a user facing an
out-of-memory error would change: the batch size at the run's fanouts (knob ``batch_size``), or the
fanouts at the run's batch (knob ``fanouts``: every layer's fanout clipped to one cap ``c``,
``min(f, c)``). Both are searched by `cherry.bench.capacity.search_largest_batch`, each probe a short
run of the spec (`cherry.bench.capacity_run.make_fits`): the batch from the spec's batch up to the
training set, the cap from the spec's largest fanout down to 1, exactly (tolerance one).

The fit record (JSON, written atomically) holds the spec, the knob, every probe, the result
(``largest_fit_value``, ``smallest_oom_value``) and ``settings``: the spec keys a training run
replaces (`apply_fit`), empty when nothing fits (the run then keeps the spec's settings and is
out of memory, which its record says). Exit status: 0 for every search outcome, 2 for a bad
spec or option, 1 for a probe that errored.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Mapping, Optional

from cherry.bench.capacity import RATIO_TOLERANCE, SEED_TOLERANCE, check_tolerances, search_largest_batch

# The experiment's fitted axes (a run spec's ``axis``) and the knob each searches.
FIT_AXES = {"largest_batch": "batch_size", "largest_fanouts": "fanouts"}
KNOBS = tuple(FIT_AXES.values())


def clip_fanouts(fanouts, cap: int) -> list[int]:
    """Every layer's fanout clipped to ``cap`` (all fanouts positive: checked when the run is planned)."""
    return [min(int(f), int(cap)) for f in fanouts]


def check_knob(knob: object, fanouts=None) -> str:
    """``knob`` if it is one of `KNOBS` (and, for ``fanouts``, every fanout is positive), else ValueError."""
    if knob not in KNOBS:
        raise ValueError(f"knob {knob!r}: expected one of {', '.join(KNOBS)}")
    if knob == "fanouts" and fanouts is not None and any(int(f) < 1 for f in fanouts):
        raise ValueError(f"fanouts {list(fanouts)}: the largest fanouts that fit need positive fanouts "
                         "(-1, all neighbours, has no smaller setting to search)")
    return knob


def fit_search_spec(spec: Mapping[str, Any], steps: int) -> dict:
    """The probe spec of a training run ``spec`` (a dict): ``steps`` optimizer steps, no evaluation,
    seed and repeat 0 (memory, not accuracy, is measured: one search serves every seed)."""
    return {**dict(spec), "epochs": 0, "warmup": 0, "steps": int(steps), "evaluate": False, "seed": 0,
            "repeat": 0}


def apply_fit(spec: Mapping[str, Any], fit: Mapping[str, Any]) -> dict:
    """``spec`` (a dict) with the fit record's ``settings`` (ValueError naming a settings key that the
    knob does not own)."""
    settings = dict(fit.get("settings") or {})
    extra = [key for key in settings if key != fit.get("knob")]
    if extra or fit.get("knob") not in KNOBS:
        raise ValueError(f"fit record settings {settings} (knob {fit.get('knob')!r}): expected only the knob's key")
    return {**dict(spec), **settings}


def _search_range(spec, knob: str, limit: Optional[int]) -> tuple[int, int, int, Callable[[int], Any]]:
    """(start, limit, lowest, spec_at) of the search of ``knob``."""
    if knob == "fanouts":
        top = max(int(f) for f in spec.fanouts)
        return top, top, 1, lambda cap: spec.replace(fanouts=tuple(clip_fanouts(spec.fanouts, cap)))
    if limit is None:
        from cherry.data import load_dataset

        limit = int(load_dataset(spec.dataset, spec.root).train_idx.numel())
    lowest = spec.num_microbatches or 1
    return min(spec.batch_size, limit), limit, lowest, lambda b: spec.replace(batch_size=b)


def fit_setting(spec, knob: str, ratio_tolerance: float = RATIO_TOLERANCE, seed_tolerance: int = SEED_TOLERANCE,
                limit: Optional[int] = None, probe_run: Optional[Callable[[Any, str], None]] = None,
                log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Search the largest ``knob`` setting of ``spec`` (a `cherry.spec.RunSpec`) that fits and return
    the fit record (module docstring). ``limit`` (batch only) defaults to the training-set size;
    ``probe_run`` as in `cherry.bench.capacity_run.search_spec`."""
    from cherry.bench.capacity_run import ProbeStopped, _probe_in_process, _probe_in_subprocess, make_fits
    from cherry.spec import RunSpec, run_id

    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec has type {type(spec).__name__}: expected a cherry.spec.RunSpec")
    check_knob(knob, spec.fanouts)
    check_tolerances(ratio_tolerance, seed_tolerance)
    if knob == "fanouts":
        seed_tolerance = 1  # a fanout is a small integer: search it exactly
    start, limit, lowest, spec_at = _search_range(spec, knob, limit)
    if probe_run is None:
        probe_run = _probe_in_subprocess if spec.device == "cuda" else _probe_in_process
    started = time.monotonic()
    fits, probes, first_record = make_fits(spec_at, knob, probe_run, log)
    status, reason = "ok", None
    try:
        result = search_largest_batch(fits, start, limit, ratio_tolerance, seed_tolerance, lowest)
        largest, smallest_oom = result.largest_fit, result.smallest_oom
    except ProbeStopped as exc:
        status, reason = exc.status, exc.reason
        ok = [p[knob] for p in probes if p["status"] == "ok"]
        largest, smallest_oom = (max(ok) if ok else None), None
    settings: dict[str, Any] = {}
    if largest is not None:
        settings = {knob: clip_fanouts(spec.fanouts, largest) if knob == "fanouts" else largest}
    return {"fit_id": run_id(spec), "knob": knob, "status": status, "reason": reason, "spec": spec.to_dict(),
            "system": spec.system, "dataset": spec.dataset, "device_memory_bytes": spec.device_memory_bytes,
            "start": start, "limit": limit, "probes": probes, "largest_fit_value": largest,
            "smallest_oom_value": smallest_oom, "settings": settings, "search_wall_s": time.monotonic() - started,
            "git_sha": first_record.get("git_sha"), "device_name": first_record.get("device_name")}


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.bench.capacity_run import add_search_options, run_search_command
    from cherry.outputs import add_output

    parser = argparse.ArgumentParser(prog="python -m cherry.bench.fit_setting", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="run spec: its batch and fanouts start the search")
    parser.add_argument("--knob", required=True, help=f"what to search: {' or '.join(KNOBS)}")
    add_output(parser, "--out", required=True, help="where to write the fit record (JSON)")
    add_search_options(parser, scope="batch: ")
    args = parser.parse_args(argv)
    return run_search_command(
        args, "cherry.bench.fit_setting",
        lambda spec, log: fit_setting(spec, args.knob, args.ratio_tolerance, args.seed_tolerance, log=log),
        lambda record: f"largest {args.knob}: {record['settings'] or 'none fits'} ({record['status']})",
        check=lambda spec: check_knob(args.knob, spec.fanouts))


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.bench.fit_setting", main))
