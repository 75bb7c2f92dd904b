"""Nothing silent, nothing lost: finite numbers in every schema and option, divergence as a
one-line result, one error boundary for every entry point, finished work kept when a write or a later
step fails. Each case is a row of tests/BAD_INPUTS.md; commands run in-process where they can, so a
traceback fails the test as an exception instead of passing as text.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cherry.bench.run import main as run_main
from cherry.cli import main
from cherry.errors import (EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_FAULT, LossDiverged, ResultKept, check_loss,
                           run_boundary, write_json_keeping)
from cherry.schemas import number_problem, schema_problem
from cherry.spec import SpecError, make_spec

REPO = Path(__file__).resolve().parents[2]
TINY = ["--dataset", "synth-tiny", "--fanouts", "5,10", "--hidden", "16", "--batch-size", "128"]
TINY_SPEC = {"system": "cherry", "dataset": "synth-tiny", "fanouts": [5, 10], "hidden": 16, "batch_size": 128,
             "epochs": 0, "warmup": 0, "steps": 2, "evaluate": False}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and err.count("\n") == 0, err
    return err


def last_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


# -- 1. finite numbers everywhere ---------------------------------------------------------------


@pytest.mark.parametrize("key, value, shown", [
    ("lr", float("nan"), "nan"), ("lr", float("inf"), "inf"), ("dropout", float("nan"), "nan"),
    ("timeout_s", float("inf"), "inf"), ("timeout_s", float("-inf"), "-inf"),
])
def test_non_finite_spec_values_are_refused_naming_the_key(key, value, shown):
    with pytest.raises(SpecError) as info:
        make_spec(dataset="synth-tiny", **{key: value})
    assert f"key {key}: {shown} is not a finite number" in str(info.value)


def test_the_finiteness_rule_is_the_schemas_not_a_keys():
    # any key, at any depth, of any schema: a key added later gets the rule for free
    assert number_problem({"new_key": [1, {"x": float("inf")}]}) == \
        "new_key/1/x: inf is not a finite number (expected a finite number)"
    assert number_problem({"a": 2**63}).startswith("a: 9223372036854775808 does not fit a 64-bit integer")
    assert number_problem({"a": [1.5, -2, True, None, "nan"]}) is None
    problem = schema_problem({"system": "cherry", "dataset": "synth-tiny", "options": {"x": float("nan")}},
                             "run", "run spec")
    assert problem == "invalid run spec: key options/x: nan is not a finite number (expected a finite number)"


@pytest.mark.parametrize("option, text, shown", [
    ("--lr", "nan", "'nan'"), ("--lr", "inf", "'inf'"), ("--lr", "1e400", "'1e400'"),
    ("--timeout-s", "Infinity", "'Infinity'"), ("--dropout", "NaN", "'NaN'"),
    ("--hidden", "99999999999999999999", "does not fit a 64-bit integer"),
])
def test_non_finite_or_oversized_cli_numbers_are_one_line_naming_the_option(option, text, shown, data_root,
                                                                             capsys):
    assert main(["train", *TINY, option, text, "--root", str(data_root)]) == EXIT_BAD_INPUT
    err = one_line_error(capsys)
    assert err.startswith(f"cherry: error: {option}: ") and shown in err, err


@pytest.mark.parametrize("text, key", [('"lr": NaN', "lr"), ('"timeout_s": Infinity', "timeout_s"),
                                       ('"dropout": NaN', "dropout")])
def test_runner_refuses_a_spec_with_json_nan_or_infinity(text, key, tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text('{"system": "cherry", "dataset": "synth-tiny", ' + text + "}")
    out = tmp_path / "record.json"
    assert run_main(["--spec", str(spec), "--out", str(out)]) == EXIT_BAD_INPUT
    assert f"key {key}:" in one_line_error(capsys) and not out.exists()


def test_a_huge_value_is_not_echoed_in_full(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"system": "cherry", "dataset": "synth-tiny", "model": "x" * 5_000_000}))
    assert run_main(["--spec", str(spec), "--out", str(tmp_path / "r.json")]) == EXIT_BAD_INPUT
    err = one_line_error(capsys)
    assert "key model" in err and len(err) < 2000 and "more characters" in err


def test_a_yaml_config_that_repeats_a_key_is_refused(tmp_path):
    from cherry.schemas import load_yaml_strict

    path = tmp_path / "config.yaml"
    path.write_text("run:\n  lr: 0.01\n  hidden: 16\n  lr: 0.5\nthreads: 1\n")
    with pytest.raises(ValueError, match=r"repeats the key 'lr' \(line 4\): expected each key once"):
        load_yaml_strict(str(path))
    path.write_text("run:\n  lr: 0.01\nother:\n  lr: 0.5\n")  # the same key in two mappings is fine
    assert load_yaml_strict(str(path)) == {"run": {"lr": 0.01}, "other": {"lr": 0.5}}


# -- 1. a loss that becomes non-finite ----------------------------------------------------------


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_check_loss_refuses_non_finite_losses_naming_the_step(loss):
    check_loss(1e30, 1)
    with pytest.raises(LossDiverged, match=r"the loss became .* at step 7 \(epoch 2\)"):
        check_loss(loss, 7, 2)


def test_train_stops_at_a_diverged_loss_with_exit_4_and_writes_the_summary(data_root, tmp_path, capsys):
    out = tmp_path / "summary.json"
    code = main(["train", *TINY, "--lr", "1e30", "--max-steps", "6", "--quiet", "--root", str(data_root),
                 "--json", str(out)])
    assert code == EXIT_DIVERGED
    err = last_line(capsys)
    assert err.startswith("cherry: error: training diverged: the loss became") and "at step" in err, err
    summary = json.loads(out.read_text())
    assert summary["status"] == "diverged" and "at step" in summary["reason"]
    assert None in summary["step_losses"]  # strict JSON: the non-finite loss is null


def test_runner_records_a_diverged_run_with_its_step(data_root, tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**TINY_SPEC, "lr": 1e30, "steps": 6, "root": str(data_root)}))
    out = tmp_path / "record.json"
    assert run_main(["--spec", str(spec), "--out", str(out), "--quiet"]) == 0  # a result, like oom
    record = json.loads(out.read_text())
    assert record["status"] == "diverged" and "the loss became" in record["reason"] and "at step" in record["reason"]
    assert "Traceback" not in capsys.readouterr().err


def test_a_huge_finite_timeout_does_not_overflow_the_alarm(data_root, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**TINY_SPEC, "timeout_s": 1e30, "steps": 1, "root": str(data_root)}))
    out = tmp_path / "record.json"
    assert run_main(["--spec", str(spec), "--out", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text())["status"] == "ok"  # was: error, setitimer's OverflowError


def test_report_accepts_the_diverged_status(tmp_path):
    from tests.unit.test_bench_measure import PROVENANCE, SPEC

    from cherry.bench.aggregate import collect_records, to_csv_bytes
    from cherry.bench.record import RunMeasurements, build_record
    from cherry.report import tables
    from cherry.report.summary import render_summary

    reason = "training diverged: the loss became nan at step 2 (epoch 0)"
    spec = SPEC.replace(experiment="sensitivity", axis="hidden")  # text columns a one-row table keeps as text
    record = build_record(spec, RunMeasurements(status="diverged", reason=reason), PROVENANCE)
    (tmp_path / "r.json").write_text(json.dumps(record))
    (tmp_path / "runs.csv").write_bytes(to_csv_bytes(collect_records([tmp_path / "r.json"])))
    text = render_summary(tables.load_table(tmp_path / "runs.csv"), [])
    assert "Outcomes: diverged 1." in text and "| diverged | training diverged: the loss became nan at step 2" in text


# -- 2. one error boundary ----------------------------------------------------------------------


@pytest.mark.parametrize("exc, code, words", [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/full/out.json"), EXIT_FAULT,
     ["'/full/out.json'", "No space left"]),
    (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/ro/x"), EXIT_FAULT, ["'/ro/x'", "Permission denied"]),
    (NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), "/file/sub"), EXIT_FAULT, ["'/file/sub'"]),
    (RecursionError("maximum recursion depth exceeded"), EXIT_FAULT, ["nested too deeply"]),
    (MemoryError(), EXIT_FAULT, ["out of host memory", "--hidden"]),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: not enough memory: you tried "
                  "to allocate 9999999 bytes."), EXIT_FAULT, ["out of host memory", "DefaultCPUAllocator"]),
    (LossDiverged(float("nan"), 3), EXIT_DIVERGED, ["at step 3"]),
    (torch.OutOfMemoryError("emulated device: 2 MiB asked, 1 MiB free\nmore"), 3, ["out of memory"]),
    (ValueError("bad\nvalue"), EXIT_BAD_INPUT, ["bad value"]),
])
def test_the_boundary_makes_each_fault_one_line(exc, code, words, capsys):
    def body():
        raise exc

    assert run_boundary("prog", body) == code
    err = one_line_error(capsys)
    prefix = "prog: out of memory: " if code == 3 else "prog: error: "
    assert err.startswith(prefix) and all(w in err for w in words), err


@pytest.mark.parametrize("hidden", ["35184372088832", "3000000000000000000"])
def test_a_hidden_width_beyond_host_memory_is_one_line(hidden, data_root, capsys):
    # 2**45: an allocation of petabytes (refused at once, whatever the overcommit); 3e18: a size overflow
    assert main(["train", *TINY, "--hidden", hidden, "--quiet", "--root", str(data_root)]) == EXIT_FAULT
    err = last_line(capsys)
    assert err.startswith("cherry: error: out of host memory, cannot allocate (") and "--hidden" in err, err


def test_a_manifest_that_is_a_directory_is_one_line(synth_tiny, data_root, tmp_path, capsys):
    import shutil

    shutil.copytree(data_root / "synth_tiny", tmp_path / "synth_tiny")
    manifest = tmp_path / "synth_tiny" / "cherry" / "manifest.json"
    manifest.unlink()
    manifest.mkdir()
    assert main(["data", "info", "synth-tiny", "--root", str(tmp_path)]) == EXIT_FAULT
    assert one_line_error(capsys) == f"cherry: error: {str(manifest)!r}: Is a directory"


def test_the_boundary_keeps_the_traceback_of_a_bug_on_request(monkeypatch, capsys):
    def body():
        raise RuntimeError("a bug")

    assert run_boundary("prog", body) == EXIT_FAULT  # one line naming the class and where
    assert "internal error: RuntimeError: a bug (at test_nothing_silent.py:" in one_line_error(capsys)
    monkeypatch.setenv("CHERRY_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="a bug"):
        run_boundary("prog", body)


def test_a_deeply_nested_spec_is_one_line(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text('{"system": "cherry", "dataset": "synth-tiny", "options": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert run_main(["--spec", str(spec), "--out", str(tmp_path / "r.json")]) == EXIT_BAD_INPUT
    assert "nested too deeply" in one_line_error(capsys)


def test_python_m_entry_points_share_the_boundary(tmp_path):
    # the aggregation's table under a file: refused before the work (`cherry.outputs`), one line naming
    # the path (every `python -m cherry...` main runs through `cherry.errors.run_boundary`)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = subprocess.run([sys.executable, "-m", "cherry.bench.aggregate", "--out-csv", str(blocker / "runs.csv")],
                            capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            timeout=120)
    assert result.returncode == EXIT_BAD_INPUT and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(blocker) in lines[0], result.stderr


def test_json_empty_path_is_refused_before_training(data_root, capsys):
    assert main(["train", *TINY, "--root", str(data_root), "--json", ""]) == EXIT_BAD_INPUT
    assert "--json '' is empty" in one_line_error(capsys)


@pytest.mark.parametrize("bench", ["engine", "planner"])
def test_bench_json_onto_a_directory_fails_before_the_work(bench, tmp_path, capsys):
    assert main(["bench", bench, "--json", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "is a directory" in one_line_error(capsys)


def test_write_json_keeping_keeps_the_result_and_says_where(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    target = str(tmp_path / "out.json")
    written = {}

    def write(path, obj):
        if path == target:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a full disk's write gives it: no path
        written[path] = obj

    with pytest.raises(ResultKept) as info:
        write_json_keeping(target, {"a": 1}, write)
    kept = info.value.kept_at
    assert written == {kept: {"a": 1}} and kept.startswith(str(tmp_path / "tmp"))
    assert str(info.value) == (f"cannot write the result to {target!r}: No space left on device; "
                               f"it is kept in {kept!r}")


def test_runner_keeps_a_finished_record_it_cannot_write(data_root, tmp_path, monkeypatch, capsys):
    import cherry.io

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    out = tmp_path / "record.json"
    real = cherry.io.write_json_atomic

    def full_disk(path, obj):
        if Path(path) == out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, obj)

    monkeypatch.setattr(cherry.io, "write_json_atomic", full_disk)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**TINY_SPEC, "root": str(data_root)}))
    assert run_main(["--spec", str(spec), "--out", str(out), "--quiet"]) == EXIT_FAULT
    err = last_line(capsys)
    assert f"cannot write the result to {str(out)!r}: No space left on device; it is kept in" in err, err
    kept = err.rsplit("kept in ", 1)[1].strip("'")
    assert json.loads(Path(kept).read_text())["status"] == "ok"


@pytest.fixture
def full_disk(tmp_path):
    """A directory on a 64 KiB tmpfs that is full (needs root and mount; skipped elsewhere)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_train_json_on_a_full_disk_keeps_the_summary(full_disk, data_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    out = full_disk / "summary.json"
    code = main(["train", *TINY, "--max-steps", "2", "--no-eval", "--quiet", "--root", str(data_root),
                 "--json", str(out)])
    assert code == EXIT_FAULT
    err = last_line(capsys)
    assert f"cannot write the result to {str(out)!r}: No space left on device; it is kept in" in err, err
    assert json.loads(Path(err.rsplit("kept in ", 1)[1].strip("'")).read_text())["status"] == "ok"


def test_records_are_written_with_the_umask_mode(tmp_path):
    from cherry.io import write_json_atomic

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "r.json", {})
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


# -- 6. work kept: a failure after finished epochs writes the summary ----------------------------


@pytest.mark.parametrize("fault, status, code", [
    (MemoryError(), "error", EXIT_FAULT),
    (LossDiverged(float("nan"), 9, 1), "diverged", EXIT_DIVERGED),
    (OSError(errno.EIO, os.strerror(errno.EIO), "/dev/x"), "error", EXIT_FAULT),
])
def test_a_failure_after_finished_epochs_writes_them(fault, status, code, data_root, tmp_path, monkeypatch, capsys):
    from cherry.execution import Trainer

    real = Trainer.run_epoch

    def second_epoch_fails(self, epoch, *args, **kwargs):
        if epoch == 1:
            raise fault
        return real(self, epoch, *args, **kwargs)

    monkeypatch.setattr(Trainer, "run_epoch", second_epoch_fails)
    out = tmp_path / "summary.json"
    assert main(["train", *TINY, "--epochs", "2", "--max-steps", "2", "--quiet", "--root", str(data_root),
                 "--json", str(out)]) == code
    assert last_line(capsys).startswith("cherry: error: ")
    summary = json.loads(out.read_text())
    assert summary["status"] == status and len(summary["epochs"]) == 1 and summary["reason"]
