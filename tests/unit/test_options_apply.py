"""An option that does not apply to what it was given is refused in one line, not ignored; every
integer option is bounded (the run schema's ``minimum``, or a bounded argparse type)."""
from __future__ import annotations

import argparse
import shutil

import pytest

from cherry.cli import build_parser, main
from cherry.cli.options import spec_properties


def _actions():
    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, path + (name,))
            elif action.option_strings:
                yield path, action

    yield from walk(build_parser(), ())


def test_no_integer_option_is_unbounded():
    for path, action in _actions():
        assert action.type is not int, f"cherry {' '.join(path)} {action.option_strings[0]}: type=int has no bounds"


def test_every_integer_of_the_run_schema_has_a_minimum():
    def integers(prop):
        if prop.get("type") == "integer" or "integer" in (prop.get("type") or []):
            yield prop
        for branch in prop.get("oneOf", []) + prop.get("anyOf", []):
            yield from integers(branch)

    for key, prop in spec_properties().items():
        for branch in integers(prop):
            assert "minimum" in branch or "exclusiveMinimum" in branch or "enum" in branch, key


TRAIN = ["train", "--dataset", "synth-tiny", "--hidden", "16", "--epochs", "1", "--max-steps", "1", "--quiet"]


@pytest.mark.parametrize("argv, says", [
    (["bench", "budget", "--recompute-steps", "-3"], "--recompute-steps: expected an integer >= 0, got '-3'"),
    (["bench", "budget", "--search-every", "-2"], "--search-every: expected an integer >= 0"),
    (["bench", "budget", "--max-configs", "-1"], "--max-configs: expected an integer >= 0"),
    (["bench", "budget", "--max-configs", "1.5"], "--max-configs: expected an integer >= 0, got '1.5'"),
    (TRAIN + ["--timeout-s", "0.001"], "--timeout-s: the benchmark runner's"),
    (TRAIN + ["--steps", "3"], "--steps: the benchmark runner's"),
    (TRAIN + ["--warmup", "1"], "--warmup: the benchmark runner's"),
])
def test_an_option_that_does_not_apply_or_is_out_of_bounds_is_one_line(argv, says, capsys, monkeypatch):
    import benchmarks.budget
    import cherry.cli.train

    monkeypatch.setattr(benchmarks.budget, "run", lambda *a: pytest.fail("the benchmark ran"))
    monkeypatch.setattr(cherry.cli.train, "train", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit) if argv[0] == "bench" else _nothing():
        status = main(argv)
        assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def user_dir(synth_tiny, data_root, tmp_path):
    target = tmp_path / "my_graph"
    shutil.copytree(data_root / "synth_tiny", target, ignore=shutil.ignore_patterns("cherry", "processed"))
    return target


@pytest.mark.parametrize("verb", ["prepare", "info", "verify"])
@pytest.mark.parametrize("extra, says", [
    (["--scale", "0.5"], "--scale: does not apply to"),
    (["--root", "/tmp"], "--root: does not apply to"),
    (["--root", "/tmp", "--scale", "0.5"], "--root and --scale: do not apply to"),
])
def test_data_commands_refuse_root_and_scale_for_a_directory(verb, extra, says, user_dir, capsys):
    assert main(["data", verb, str(user_dir)] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and "a dataset directory" in err, err
    assert not (user_dir / "cherry").exists()  # refused before any conversion


def test_train_refuses_root_for_a_directory(user_dir, capsys, monkeypatch):
    import cherry.cli.train

    monkeypatch.setattr(cherry.cli.train, "train", lambda *a, **k: pytest.fail("trained"))
    argv = ["train", "--dataset", str(user_dir), "--root", "/tmp", "--epochs", "1", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--root: does not apply to dataset" in err, err


@pytest.mark.parametrize("dataset, scale, expected", [
    ("synth-papers", None, 0.001), ("synth-tiny", None, None), ("synth-tiny", 0.5, 0.5),
    ("ogbn-arxiv", 0.5, "--scale: applies to generated datasets only"), ("{dir}", None, None),
    ("{dir}", 0.5, "--scale: applies to generated datasets only"),
])
def test_bench_cache_scales_only_what_was_asked(dataset, scale, expected, user_dir):
    from benchmarks.feature_cache import _scale

    args = argparse.Namespace(dataset=dataset.format(dir=user_dir), scale=scale)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            _scale(args)
    else:
        assert _scale(args) == expected
