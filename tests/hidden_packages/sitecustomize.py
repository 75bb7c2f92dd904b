"""Make ``import X`` fail for the top-level packages named in ``$CHERRY_HIDE_PACKAGES`` (comma-separated).

Put this directory first on ``PYTHONPATH`` and every Python process started with that environment
(subprocesses included) behaves as on a machine without those packages, e.g. the GPU machine's
"dgl,ogb,pymetis,scipy": the import raises ModuleNotFoundError, as a missing package does, and
``importlib.util.find_spec`` raises it too. Used by tests/unit/test_without_optional_packages.py; by
hand: ``PYTHONPATH=tests/hidden_packages:$PWD CHERRY_HIDE_PACKAGES=dgl,ogb,pymetis,scipy python ...``.
"""
import os
import sys

_HIDDEN = frozenset(p.strip() for p in os.environ.get("CHERRY_HIDE_PACKAGES", "").split(",") if p.strip())


class _HiddenPackages:
    """A meta-path finder consulted first: refuses the hidden packages and their submodules."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by CHERRY_HIDE_PACKAGES)", name=name)
        return None


if _HIDDEN:
    sys.meta_path.insert(0, _HiddenPackages())
