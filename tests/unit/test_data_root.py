"""The datasets root and killed runs: a root that is a file or not writable is a one-line error naming
the path (from --root or $CHERRY_DATA); a killed `data prepare` leaves nothing the next run keeps."""
import os
import signal
import socket
import subprocess
import sys

import pytest

from cherry.cli import main
from cherry.cli import data as data_cli
from cherry.data import dataset_info, load_dataset, prepare_dataset
from cherry.data import datasets as datasets_mod
from cherry.data.registry import resolve_root


def _last_line(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("[") for line in err[:-1])
    return err[-1]


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    return path


@pytest.mark.parametrize("verb", ["prepare", "info", "verify"])
@pytest.mark.parametrize("below", [False, True])
def test_root_that_is_a_file(verb, below, a_file, capsys):
    root = a_file / "sub" if below else a_file
    assert main(["data", verb, "synth-tiny", "--root", str(root)]) == 2
    line = _last_line(capsys)
    assert line.startswith(f"cherry: error: data root '{root}'") and line.endswith("expected a directory")
    assert ("which is a file" if below else "is a file") in line


def test_cherry_data_env_that_is_a_file(a_file, monkeypatch, capsys):
    monkeypatch.setenv("CHERRY_DATA", str(a_file))
    assert main(["data", "prepare", "synth-tiny"]) == 2
    assert f"data root '{a_file}' (from $CHERRY_DATA) is a file" in _last_line(capsys)
    with pytest.raises(ValueError, match=r"\(from \$CHERRY_DATA\) is a file"):
        load_dataset("synth-tiny")  # the path `cherry train` takes
    assert a_file.read_text() == "x"


@pytest.mark.parametrize("root", ["", b"/tmp", 3])
def test_root_of_the_wrong_kind(root):
    with pytest.raises((ValueError, TypeError), match="root must be|data root must be"):
        resolve_root(root)


def test_unwritable_root(tmp_path, monkeypatch, capsys):
    root = tmp_path / "readonly"
    root.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(root) else real_access(p, mode))
    assert main(["data", "prepare", "synth-tiny", "--root", str(root)]) == 2
    assert f"data root '{root}' is not writable" in _last_line(capsys)
    assert list(root.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_unwritable_root_by_permissions(tmp_path, capsys):
    parent = tmp_path / "locked"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        assert main(["data", "prepare", "synth-tiny", "--root", str(parent / "data")]) == 2
        assert "cannot create data root" in _last_line(capsys)
    finally:
        parent.chmod(0o700)


def test_permission_error_while_writing_is_one_line(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "x"))

    monkeypatch.setattr(datasets_mod, "write_synth_layout", refuse)
    with pytest.raises(ValueError, match=rf"cannot write {tmp_path / 'x'}: Permission denied"):
        prepare_dataset("synth-tiny", root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_read_only_root_still_loads_a_current_cache(synth_tiny, data_root, monkeypatch):
    monkeypatch.setattr(os, "access", lambda p, mode: False)  # nothing needs writing
    assert dataset_info("synth-tiny", root=data_root)["num_nodes"] == 2000


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_next_prepare_removes_stale_temporaries_only(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    stale = [tmp_path / f".synth_tiny.tmp-{host}-{dead}-0123abcd", tmp_path / f".synth_tiny.old-{host}-{dead}-89abcdef"]
    kept = [tmp_path / f".synth_tiny.tmp-{host}-{os.getppid()}-0123abcd",  # a live writer
            tmp_path / f".synth_tiny.tmp-other-host-{dead}-0123abcd",  # another machine's writer
            tmp_path / f".synth_arxiv.tmp-{host}-{dead}-0123abcd"]  # another dataset's
    for path in stale + kept:
        path.mkdir()
        (path / "half-written").write_text("x")
    prepare_dataset("synth-tiny", root=tmp_path)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


def test_sigterm_during_prepare_removes_its_temporary(tmp_path, monkeypatch):
    real = datasets_mod.write_synth_layout

    def write_then_terminate(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # handled by the time the next bytecode runs

    monkeypatch.setattr(datasets_mod, "write_synth_layout", write_then_terminate)
    with pytest.raises(data_cli.Terminated) as info:
        main(["data", "prepare", "synth-tiny", "--root", str(tmp_path)])
    assert info.value.code == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored


_KILLED_CHILD = """
import sys, time
from cherry.cli import main
from cherry.data import datasets
real = datasets.write_synth_layout
def write_then_wait(*args, **kwargs):
    real(*args, **kwargs)
    print("LAYOUT WRITTEN", file=sys.stderr, flush=True)
    time.sleep(120)
datasets.write_synth_layout = write_then_wait
main(["data", "prepare", "synth-tiny", "--root", sys.argv[1]])
"""


@pytest.mark.timeout(120)
def test_sigkill_leftover_is_removed_by_next_prepare(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(tmp_path)], stderr=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, text=True)
    try:
        for line in child.stderr:
            if "LAYOUT WRITTEN" in line:
                break
    finally:
        child.kill()  # SIGKILL: no cleanup can run
        child.wait()
    leftovers = [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert child.returncode == -signal.SIGKILL and leftovers and (leftovers[0] / "raw" / "edge.csv.gz").exists()
    prepare_dataset("synth-tiny", root=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synth_tiny"]
