"""Every output is checked before any work, by one helper (`cherry.outputs`), in every command; a
checkpoint directory is locked while a run writes it, a killed save's temporaries are removed, and a
run of another spec refuses a directory holding a checkpoint unless ``--overwrite``."""
from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cherry.cli import build_parser, main
from cherry.execution import Trainer
from cherry.execution.checkpoint import Checkpointer, CheckpointError, load_best_model, read_checkpoint
from cherry.outputs import DIR, FILE, OUTPUT_DESTS, declared_outputs
from cherry.spec import make_spec

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("cherry", "benchmarks", "workflow") for p in (ROOT / d).rglob("*.py")]
OUTPUT_FLAGS = {"--" + d.replace("_", "-") for d in OUTPUT_DESTS}


CHECKS = {"check_outputs", "parse_checked"}
WRITES = {"write_json_atomic", "write_bytes_atomic", "write_text", "savefig", "to_csv", "to_parquet"}


def _name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def _called(node) -> list[tuple[int, str]]:
    """``(line, name)`` of every call below ``node``, in source order."""
    return sorted((n.lineno, _name(n)) for n in ast.walk(node) if isinstance(n, ast.Call))


def checking_helpers(trees) -> set[str]:
    """The checking calls and every function (of ``trees``) that makes one before any write of its own,
    directly or through another such function: a command may check its outputs through a shared helper."""
    functions = [n for tree in trees for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    checks = set(CHECKS)
    while True:
        found = {f.name for f in functions if f.name not in checks and _checks_before_writing(_called(f), checks)}
        if not found:
            return checks
        checks |= found


def _checks_before_writing(calls, checks) -> bool:
    first_check = min((line for line, name in calls if name in checks), default=None)
    first_write = min((line for line, name in calls if name in WRITES), default=None)
    return first_check is not None and (first_write is None or first_check < first_write)


def output_faults(tree, checks) -> list[str]:
    """Why a module's outputs may be written unchecked: an output option added with a bare
    ``add_argument``, a module that declares outputs and never checks them, or a function that
    writes before its check."""
    faults, declares, checked = [], False, False
    for line, name in _called(tree):
        declares |= name == "add_output"
        checked |= name in checks
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node) == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if OUTPUT_FLAGS & set(flags):
                faults.append(f"{node.lineno}: {flags} via add_argument")
        if isinstance(node, ast.FunctionDef):
            calls = _called(node)
            if any(name in checks for _, name in calls) and not _checks_before_writing(calls, checks):
                faults.append(f"{node.lineno}: {node.name} writes before it checks its outputs")
    if declares and not checked:
        faults.append("declares outputs, never checks them")
    return faults


TREES = {path: ast.parse(path.read_text()) for path in SOURCES}
CHECKING = checking_helpers(TREES.values())


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_output_option_bypasses_the_helper(path):
    """An output option added with a bare ``add_argument`` would not be checked before the work;
    `cherry` commands are checked by `cherry.cli`'s dispatch."""
    if "cherry/cli/" in str(path):
        faults = [f for f in output_faults(TREES[path], CHECKING) if "never checks" not in f]
    else:
        faults = output_faults(TREES[path], CHECKING)
    assert not faults, f"{path.relative_to(ROOT)}: {faults}"


_HELPER = """
def run_checked(args, work):
    check_outputs(args)
    write_json_atomic(args.out, work())
"""
_THROUGH_HELPER = """
def main(argv):
    add_output(parser, "--out")
    return run_checked(parser.parse_args(argv), lambda: 1)
"""
_WRITES_FIRST = """
def run_checked(args, work):
    write_json_atomic(args.out, work())
    check_outputs(args)
"""
_NEVER_CHECKS = """
def main(argv):
    add_output(parser, "--out")
    write_json_atomic(parser.parse_args(argv).out, 1)
"""


def test_the_output_check_follows_helpers_and_catches_a_write_before_the_check():
    good = [ast.parse(_HELPER), ast.parse(_THROUGH_HELPER)]
    assert output_faults(good[1], checking_helpers(good)) == []
    bad = [ast.parse(_WRITES_FIRST), ast.parse(_THROUGH_HELPER)]
    checks = checking_helpers(bad)
    assert output_faults(bad[0], checks) == ["2: run_checked writes before it checks its outputs"]
    assert output_faults(bad[1], checks) == ["declares outputs, never checks them"]
    assert output_faults(ast.parse(_NEVER_CHECKS), CHECKS) == ["declares outputs, never checks them"]
    assert output_faults(ast.parse('p.add_argument("--json")'), CHECKS) == ["1: ['--json'] via add_argument"]


def _subparsers(parser, prefix=()):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield prefix + (name,), sub
                yield from _subparsers(sub, prefix + (name,))


def test_every_cherry_command_declares_its_outputs():
    seen = 0
    for path, sub in _subparsers(build_parser()):
        declared = declared_outputs(sub)
        for action in sub._actions:
            if action.dest in OUTPUT_DESTS:
                assert action.dest in declared, f"cherry {' '.join(path)} {action.option_strings}: not declared"
                seen += 1
    assert seen >= 9  # train --json/--save, bench ... --json, --figure, --out-dir


TRAIN = ["train", "--dataset", "synth-tiny", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "200",
         "--max-steps", "1", "--epochs", "1", "--quiet"]
# (argv, module and function that does the work, the output option, its kind)
COMMANDS = {
    "train-json": (TRAIN, "cherry.cli.train", "train", "--json", FILE),
    "train-save": (TRAIN, "cherry.cli.train", "train", "--save", DIR),
    "engine-json": (["bench", "engine"], "benchmarks.engine", "run", "--json", FILE),
    "planner-json": (["bench", "planner"], "benchmarks.planner", "run", "--json", FILE),
    "interop-json": (["bench", "interop"], "benchmarks.interop", "run", "--json", FILE),
    "budget-json": (["bench", "budget", "--quick"], "benchmarks.budget", "run", "--json", FILE),
    "cache-json": (["bench", "cache"], "benchmarks.feature_cache", "run", "--json", FILE),
    "cache-figure": (["bench", "cache"], "benchmarks.feature_cache", "run", "--figure", FILE),
    "systems-out-dir": (["bench", "systems"], "benchmarks.systems", "run", "--out-dir", DIR),
}


def _bad_paths(tmp_path: Path, kind: str) -> dict:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    (tmp_path / "a-dir").mkdir()
    wrong = blocker if kind == DIR else tmp_path / "a-dir"
    return {"wrong-kind": (str(wrong), "is a " + ("file" if kind == DIR else "directory")),
            "under-a-file": (str(blocker / "x" / "out"), "is not a directory"),
            "empty": ("", "is empty"),
            "nul-byte": (str(tmp_path / "a\0b"), "NUL byte"),
            "name-too-long": (str(tmp_path / ("x" * 300)), "at most 255")}


@pytest.mark.parametrize("fault", ["wrong-kind", "under-a-file", "empty", "nul-byte", "name-too-long"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_output_stops_every_command_before_its_work(command, fault, tmp_path, data_root, monkeypatch, capsys):
    argv, module, function, flag, kind = COMMANDS[command]
    monkeypatch.setattr(importlib.import_module(module), function,
                        lambda *a, **k: pytest.fail(f"{command} ran its work before checking {flag}"))
    path, says = _bad_paths(tmp_path, kind)[fault]
    if argv[0] == "train":
        argv = argv + ["--root", str(data_root)]
    assert main(argv + [flag, path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and says in err, err


@pytest.mark.parametrize("extra, says", [
    (lambda d: ["--json", str(d), "--save", str(d)], "both name"),
    (lambda d: ["--save", str(d), "--json", str(d / "checkpoint.json")], "is the checkpoint.json that --save"),
    (lambda d: ["--save", str(d), "--json", str(d / "last.pt")], "is the last.pt that --save"),
    (lambda d: ["--json", str(d / "s.json"), "--overwrite"], "--overwrite: applies to --save DIR only"),
])
def test_outputs_that_collide_are_refused_before_training(extra, says, tmp_path, data_root, monkeypatch, capsys):
    import cherry.cli.train as train_cli

    monkeypatch.setattr(train_cli, "train", lambda *a, **k: pytest.fail("trained before checking its outputs"))
    assert main(TRAIN + ["--root", str(data_root)] + extra(tmp_path / "ck")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


@pytest.mark.parametrize("module, argv", [
    ("cherry.bench.aggregate", ["--out-csv", "{dir}"]),
    ("cherry.bench.run", ["--spec", "{spec}", "--out", "{dir}"]),
    ("cherry.bench.capacity_run", ["--spec", "{spec}", "--out", "{dir}"]),
    ("cherry.bench.fit_setting", ["--spec", "{spec}", "--knob", "batch_size", "--out", "{dir}"]),
    ("cherry.report.summary", ["--table", "{file}", "--out", "{dir}"]),
    ("cherry.report.results_page", ["--out", "{file}"]),
])
def test_python_m_entry_points_check_outputs_first(module, argv, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"system": "cherry", "dataset": "synth-tiny", "steps": 1}))
    argv = [a.format(dir=tmp_path / "d", file=tmp_path / "f", spec=spec) for a in argv]
    result = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, cwd=ROOT,
                            timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "expected a" in result.stderr, result.stderr


def _spec(**config):
    base = dict(dataset="synth-tiny", hidden=16, fanouts=(5, 5), batch_size=200, max_steps_per_epoch=1,
                num_microbatches=2, seed=3, epochs=1)
    base.update(config)
    return make_spec(**base)


def test_a_checkpoint_directory_has_one_writer(tmp_path):
    first = Checkpointer(tmp_path, _spec())
    with pytest.raises(CheckpointError, match=r"another run is writing checkpoints to .*; expected one writer"):
        Checkpointer(tmp_path, _spec())
    first.close()
    Checkpointer(tmp_path, _spec()).close()  # released


_HOLD_LOCK = """
import sys, time
from cherry.execution.checkpoint import Checkpointer
from cherry.spec import make_spec
held = Checkpointer(sys.argv[1], make_spec(dataset="synth-tiny"))
open(sys.argv[1] + "/.last.pt.tmp-999999", "w").write("half a save")
print("LOCKED", flush=True)
time.sleep(120)
"""


def test_a_killed_writer_leaves_no_lock_and_its_temporaries_go(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        assert child.stdout.readline().strip() == "LOCKED"
        with pytest.raises(CheckpointError, match="another run is writing"):
            Checkpointer(tmp_path, make_spec(dataset="synth-tiny"))
    finally:
        child.kill()
        child.wait(timeout=60)
    assert (tmp_path / ".last.pt.tmp-999999").exists()
    Checkpointer(tmp_path, make_spec(dataset="synth-tiny")).close()
    assert not (tmp_path / ".last.pt.tmp-999999").exists()


def test_another_spec_refuses_the_directory_unless_overwrite(synth_tiny, tmp_path):
    trainer = Trainer(synth_tiny, _spec())
    list(trainer.fit(save_dir=tmp_path))
    assert load_best_model(tmp_path)["spec"]["hidden"] == 16
    other = Trainer(synth_tiny, _spec(hidden=8))
    with pytest.raises(CheckpointError, match=r"--save: .* another run spec \(key hidden: 16 there, 8 here\).*--overwrite"):
        list(other.fit(save_dir=tmp_path))
    assert read_checkpoint(tmp_path, _spec())["epochs_done"] == 1  # untouched
    list(other.fit(save_dir=tmp_path, overwrite=True, ))
    assert load_best_model(tmp_path)["spec"]["hidden"] == 8
    trainer.close()
    other.close()


def test_a_fresh_run_leaves_nothing_of_the_old_one_vouched_for(synth_tiny, tmp_path):
    trainer = Trainer(synth_tiny, _spec())
    list(trainer.fit(save_dir=tmp_path))
    trainer.close()
    quiet = Trainer(synth_tiny, _spec(evaluate=False))  # the same identity but evaluation: no best.pt of its own
    with pytest.raises(CheckpointError, match="evaluate"):
        list(quiet.fit(save_dir=tmp_path))
    list(quiet.fit(save_dir=tmp_path, overwrite=True))
    quiet.close()
    with pytest.raises(CheckpointError, match="no best-validation model"):
        load_best_model(tmp_path)


def test_cli_refuses_another_specs_directory_before_training(synth_tiny, data_root, tmp_path, monkeypatch, capsys):
    trainer = Trainer(synth_tiny, _spec())
    list(trainer.fit(save_dir=tmp_path / "ck"))
    trainer.close()
    import cherry.cli.train as train_cli

    monkeypatch.setattr(train_cli, "train", lambda *a, **k: pytest.fail("trained before checking --save"))
    argv = TRAIN + ["--root", str(data_root), "--hidden", "8", "--save", str(tmp_path / "ck")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another run spec (key hidden: 16 there, 8 here)" in err, err
