"""The memory wall's largest-batch search (cherry.bench.capacity, cherry.bench.capacity_run)."""
from __future__ import annotations

import json

import pytest

from cherry.bench.capacity import WALL_REASONS, BatchSearch, search_largest_batch, wall_reason
from cherry.bench.capacity_run import main as capacity_main
from cherry.bench.capacity_run import search_spec


def threshold(largest: int):
    calls = []

    def fits(batch: int) -> bool:
        calls.append(batch)
        return batch <= largest
    return fits, calls


def _check(result: BatchSearch, largest: int, ratio: float = 1.1, seeds: int = 64) -> None:
    batches = [b for b, _ in result.probes]
    assert len(set(batches)) == len(batches)  # each batch probed once
    assert all(fitted == (b <= largest) for b, fitted in result.probes)
    assert (result.largest_fit, True) in result.probes and (result.smallest_oom, False) in result.probes
    assert result.largest_fit == max(b for b, f in result.probes if f)
    assert result.smallest_oom == min(b for b, f in result.probes if not f)
    assert result.largest_fit <= largest < result.smallest_oom
    gap = result.smallest_oom - result.largest_fit
    assert gap <= seeds or result.smallest_oom <= ratio * result.largest_fit


@pytest.mark.parametrize("largest", [1, 2, 63, 256, 700, 1023, 1024, 1025, 5000, 19_000])
@pytest.mark.parametrize("start", [1, 256, 4096])
def test_search_ends_at_a_fitting_batch_whose_failing_neighbour_is_within_tolerance(largest, start):
    fits, _ = threshold(largest)
    result = search_largest_batch(fits, start, limit=19_662)
    _check(result, largest)
    # monotone: the doubling (or halving) phase moves one way, then bisection intervals nest
    lo, hi = None, None
    for b, fitted in result.probes:
        if lo is not None and hi is not None:
            assert lo < b < hi
        if fitted:
            assert lo is None or b > lo
            lo = b
        else:
            assert hi is None or b < hi
            hi = b


def test_exact_tolerance_finds_the_wall_exactly():
    fits, _ = threshold(3_333)
    result = search_largest_batch(fits, 256, 100_000, ratio_tolerance=1 + 1e-9, seed_tolerance=1)
    assert (result.largest_fit, result.smallest_oom) == (3_333, 3_334)


def test_search_is_capped_at_the_training_set():
    fits, calls = threshold(10**9)
    result = search_largest_batch(fits, 1024, limit=19_662)
    assert result.largest_fit == 19_662 and result.smallest_oom is None and result.capped
    assert calls == [1024, 2048, 4096, 8192, 16384, 19_662] and max(calls) <= 19_662
    assert search_largest_batch(threshold(10**9)[0], 50_000, limit=100).probes == ((100, True),)


def test_nothing_fits_and_a_fixed_k_floor():
    result = search_largest_batch(lambda b: False, 256, 1000)
    assert result.largest_fit is None and result.smallest_oom == 1 and [b for b, _ in result.probes][-1] == 1
    floor = search_largest_batch(lambda b: False, 256, 1000, lowest=8)
    assert floor.largest_fit is None and min(b for b, _ in floor.probes) == 8


def test_a_noisy_fits_still_ends_consistently():
    answers = iter([True, True, False, True, False, True, True, True, True, True])
    result = search_largest_batch(lambda b: next(answers), 100, 10_000)
    assert result.largest_fit < result.smallest_oom and len(result.probes) <= 10


@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"start": 0}, ValueError, "start is 0: expected an int >= 1"),
    ({"limit": "many"}, TypeError, "limit has type str"),
    ({"start": True}, TypeError, "start has type bool"),
    ({"ratio_tolerance": 1.0}, ValueError, "ratio_tolerance is 1.0: expected a number > 1"),
    ({"ratio_tolerance": float("nan")}, ValueError, "ratio_tolerance"),
    ({"seed_tolerance": 0}, ValueError, "seed_tolerance is 0"),
    ({"lowest": 8, "start": 4}, ValueError, "start is 4: expected an int >= 8"),
    ({"fits": 3}, TypeError, "fits has type int"),
    ({"fits": lambda b: "yes"}, TypeError, "returned str: expected a bool"),
])
def test_bad_inputs_give_one_line_errors(kwargs, error, fragment):
    args = {"fits": lambda b: True, "start": 256, "limit": 1000, **kwargs}
    with pytest.raises(error) as info:
        search_largest_batch(**args)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def _spec(**changes):
    from cherry.spec import make_spec

    fields = {"system": "cherry", "dataset": "synth-tiny", "batch_size": 128, "num_microbatches": "auto",
              "device_memory_bytes": 12 * 2**20, "steps": 1, "warmup": 0, "experiment": "memory_wall", **changes}
    return make_spec(**fields)


def fake_probe(largest: int, stop_at: int | None = None):
    """A probe runner writing the record a run at that batch size would: ok up to ``largest``."""
    def probe(spec, path):
        b = spec.batch_size
        status = "timeout" if stop_at is not None and b >= stop_at else ("ok" if b <= largest else "oom")
        record = {"status": status, "reason": None if status == "ok" else f"{status} at {b}",
                  "num_microbatches_max": 1 + b // 100 if status == "ok" else None,
                  "peak_tracked_bytes": 1000 * b, "estimated_peak_bytes": None, "step_time_median_s": 0.1,
                  "wall_s": 0.2, "git_sha": "abc", "device_name": "cpu"}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
    return probe


def test_search_record_holds_every_probe_and_the_result():
    record = search_spec(_spec(), limit=1200, probe_run=fake_probe(700))
    assert record["status"] == "ok" and record["largest_fit_batch"] <= 700 < record["smallest_oom_batch"]
    assert [p["batch_size"] for p in record["probes"]][:4] == [128, 256, 512, 1024]
    best = next(p for p in record["probes"] if p["batch_size"] == record["largest_fit_batch"])
    assert best["status"] == "ok" and best["num_microbatches_max"] == 1 + best["batch_size"] // 100
    assert record["training_set_size"] == 1200 and not record["capped_at_training_set"]
    assert record["search_id"].startswith("memory_wall-cherry-synth-tiny-b128-kauto")
    capped = search_spec(_spec(), limit=1200, probe_run=fake_probe(10**6))
    assert capped["capped_at_training_set"] and capped["largest_fit_batch"] == 1200


def test_a_probe_that_times_out_stops_the_search_with_a_lower_bound():
    record = search_spec(_spec(), limit=5000, probe_run=fake_probe(10**6, stop_at=1024))
    assert record["status"] == "timeout" and record["largest_fit_batch"] == 512
    assert record["probes"][-1]["batch_size"] == 1024 and record["smallest_oom_batch"] is None


def test_cli_rejects_bad_options_with_one_line(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec().to_dict()))
    assert capacity_main(["--spec", str(spec), "--out", str(tmp_path / "o.json"), "--ratio-tolerance", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cherry.bench.capacity_run: ratio_tolerance is 0.5") and "\n" not in err
    assert not (tmp_path / "o.json").exists()


def test_cli_searches_a_real_run_on_synth_tiny(synth_tiny, data_root, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec(system="full", num_microbatches=1, aggr="lstm", hidden=16, fanouts=[5, 10],
                                     root=str(data_root)).to_dict()))
    out = tmp_path / "search.json"
    assert capacity_main(["--spec", str(spec), "--out", str(out), "--quiet"]) == 0
    record = json.loads(out.read_text())
    assert record["status"] == "ok" and record["training_set_size"] == 1200
    statuses = {p["status"] for p in record["probes"]}
    assert statuses <= {"ok", "oom"}
    fitted = [p["batch_size"] for p in record["probes"] if p["status"] == "ok"]
    assert record["largest_fit_batch"] == (max(fitted) if fitted else None)


def _probe(batch: int, status: str, single: bool | None = None) -> dict:
    return {"batch_size": batch, "status": status, "oom_single_seed": single}


@pytest.mark.parametrize("status, largest, oom, probes, reason", [
    ("ok", 1200, None, [_probe(600, "ok"), _probe(1200, "ok")], "training_set"),
    ("ok", 32, 64, [_probe(64, "oom", True), _probe(32, "ok")], "single_seed"),
    ("ok", None, 1, [_probe(2, "oom", True), _probe(1, "oom", True)], "single_seed"),
    # a K=1 system: its failing batch was not at one seed per micro-batch
    ("ok", 4, 8, [_probe(8, "oom", False), _probe(4, "ok")], "capacity"),
    # the earlier failing probe was of one seed, the wall's own (smallest failing) probe was not
    ("ok", 32, 40, [_probe(64, "oom", True), _probe(32, "ok"), _probe(40, "oom", False)], "capacity"),
    # a record from before oom_single_seed existed
    ("ok", 32, 64, [{"batch_size": 64, "status": "oom"}, _probe(32, "ok")], "capacity"),
    ("timeout", 512, None, [_probe(512, "ok"), _probe(1024, "timeout")], "stopped"),
])
def test_wall_reason_reads_the_smallest_failing_probe(status, largest, oom, probes, reason):
    assert wall_reason(status, largest, oom, 1200, probes) == reason
    assert reason in WALL_REASONS


def test_search_record_says_what_stopped_it_and_whether_the_largest_batch_recomputed():
    def probe(spec, path):  # fits up to 100 seeds, recomputing above 50; above 100 one seed does not fit
        b = spec.batch_size
        ok = b <= 100
        record = {"status": "ok" if ok else "oom", "reason": None if ok else "one seed", "num_microbatches_max": 1,
                  "peak_tracked_bytes": b, "estimated_peak_bytes": None, "step_time_median_s": 0.1, "wall_s": 0.1,
                  "recompute_steps": int(ok and b > 50), "oom_single_seed": None if ok else True}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)

    record = search_spec(_spec(batch_size=16), limit=1200, ratio_tolerance=1.01, seed_tolerance=1, probe_run=probe)
    assert record["largest_fit_batch"] == 100 and record["smallest_oom_batch"] == 101
    assert record["wall_reason"] == "single_seed" and record["recompute_at_largest"]
    assert all(p["oom_single_seed"] for p in record["probes"] if p["status"] == "oom")
    below = search_spec(_spec(batch_size=16), limit=40, probe_run=probe)
    assert below["wall_reason"] == "training_set" and not below["recompute_at_largest"]
