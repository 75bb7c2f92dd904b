"""The engine installs light: with only pyproject.toml's core dependencies (and what they require)
importable, `cherry`, `cherry.execution` and `cherry.interop` import, a generated dataset is prepared
(byte for byte the cache pandas writes) and the README's Python training runs; a feature that needs
an extra says which in one line. The allow-list hook is tests/hidden_packages (as the GPU check's)."""
from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cherry.errors import classify
from cherry.extras import EXTRA_OF_MODULE, require

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "tests" / "hidden_packages"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
MAKE_INSTALL_EXTRAS = ("test", "dgl", "slurm")  # the Makefile's -e ".[test,dgl,slurm]"


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement.strip()).group(0)).lower()


def _extra(extra: str, seen=()) -> set[str]:
    """The distributions of one extra, its references to the project's own extras expanded."""
    out = set()
    for requirement in PYPROJECT["optional-dependencies"][extra]:
        inner = re.match(r"cherry-gnn\[([^\]]+)\]", requirement)
        if inner:
            for name in inner.group(1).split(","):
                out |= _extra(name.strip(), (*seen, extra)) if name.strip() not in seen else set()
        else:
            out.add(_name(requirement))
    return out


def core_distributions() -> set[str]:
    """The core dependencies and every distribution they require (no extras, any platform)."""
    todo, found = [_name(r) for r in PYPROJECT["dependencies"]], set()
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r.replace("extra==", "extra ==")]
    return found


def test_the_core_is_torch_numpy_and_two_small_readers():
    assert {_name(r) for r in PYPROJECT["dependencies"]} == {"torch", "numpy", "pyyaml", "tqdm"}


def test_make_install_still_installs_every_extra():
    installed = set().union(*(_extra(e) for e in MAKE_INSTALL_EXTRAS))
    for extra in PYPROJECT["optional-dependencies"]:
        if extra not in ("pyg-sampling", "all"):  # pyg-sampling: built by install_pyg_sampling.sh
            assert _extra(extra) <= installed, extra
    features = [e for e in PYPROJECT["optional-dependencies"] if e not in ("test", "pyg-sampling", "all")]
    assert _extra("all") == set().union(*(_extra(e) for e in features))


def test_each_optional_module_names_an_extra_that_provides_it():
    owners = metadata.packages_distributions()
    for module, extra in EXTRA_OF_MODULE.items():
        dists = {_name(d) for d in owners.get(module, [module])}
        assert dists & _extra(extra), (module, extra, dists)
        assert not dists & core_distributions(), f"{module} is a core dependency's, not an extra's"


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    status, line = classify(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"))
    assert status == 2 and line.endswith("this feature needs an optional extra: pip install -e '.[bench]'")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as where it is not installed
    with pytest.raises(ModuleNotFoundError) as caught:
        require("pandas")
    line = classify(caught.value)[1]
    assert line.count("optional extra") == 1 and line.endswith("pip install -e '.[data]'"), line
    status, line = classify(ModuleNotFoundError("No module named 'my_plugin'", name="my_plugin"))
    assert "extra" not in line and "$CHERRY_PLUGINS" in line


DRIVER = """
import importlib, json, sys
refused = []
for name in sys.argv[2].split(","):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        refused.append(name)
import cherry, cherry.execution, cherry.interop, cherry.cli
cherry.cli.build_parser()  # every command's options (cherry train, verify, data, bench)
from cherry.data import load_dataset
from cherry.execution import Trainer
from cherry.spec import make_spec

spec = make_spec(dataset="synth-tiny", hidden=16, epochs=1, max_steps_per_epoch=2, budget_bytes="64MiB")
trainer = Trainer(load_dataset(spec.dataset), spec)
losses = [epoch.loss for epoch in trainer.fit()]
trainer.close()
from cherry.errors import classify
try:
    import cherry.report.summary
    needs = None
except ImportError as exc:
    needs = classify(exc)[1]
json.dump({"refused": refused, "losses": losses, "needs": needs}, open(sys.argv[1], "w"))
"""


@pytest.mark.slow
def test_the_engine_imports_prepares_and_trains_with_the_core_alone(tmp_path, synth_tiny, data_root):
    allowed = tmp_path / "core.txt"
    allowed.write_text("\n".join(sorted(core_distributions())) + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK), str(REPO)]), "CHERRY_ONLY_PACKAGES": str(allowed),
           "CHERRY_DATA": str(tmp_path / "data")}
    env.pop("CHERRY_HIDE_PACKAGES", None)
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(out), ",".join(EXTRA_OF_MODULE)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert sorted(result["refused"]) == sorted(EXTRA_OF_MODULE)  # none of the extras was importable
    assert len(result["losses"]) == 1 and result["losses"][0] == result["losses"][0]
    assert result["needs"].endswith("No module named 'pandas'; this feature needs an optional extra: "
                                    "pip install -e '.[data]'"), result["needs"]
    ours, pandas_made = tmp_path / "data" / "synth_tiny" / "cherry", data_root / "synth_tiny" / "cherry"
    arrays = sorted(p.name for p in pandas_made.glob("*.npy"))
    assert arrays and all((ours / a).read_bytes() == (pandas_made / a).read_bytes() for a in arrays), arrays
