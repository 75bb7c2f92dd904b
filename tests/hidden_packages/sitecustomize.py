"""Make this Python behave as one without some packages; put this directory first on ``PYTHONPATH`` and
every process started with that environment (subprocesses included) inherits it.

Two modes, by environment variable:

- ``CHERRY_ONLY_PACKAGES=<file>``: an allow-list. Only the standard library, the project itself (any
  top-level module found in the repository root) and the distributions named in ``<file>`` (one a line,
  ``#`` comments; e.g. ``tests/hidden_packages/gpu_machine_packages.txt``, the GPU machine's package list)
  can be imported; everything else is refused, so a dependency added to a path that runs there fails
  here too. A distribution's import names come from its installed metadata (pyyaml -> yaml,
  nvidia-ml-py -> pynvml), and refused distributions vanish from ``importlib.metadata`` as well (so
  entry-point plugins such as pytest's are not loaded from them, as on the machine that lacks them).
- ``CHERRY_HIDE_PACKAGES=a,b``: a block-list of top-level packages.

Under the allow-list, a refused import raises ModuleNotFoundError and ``importlib.util.find_spec``
returns None, as for a missing package (the finders present at start-up are wrapped; a finder added
later sees every name). Under the block-list both raise ModuleNotFoundError.
"""
import os
import re
import sys
import sysconfig
from importlib.machinery import PathFinder

_HIDDEN = frozenset(p.strip() for p in os.environ.get("CHERRY_HIDE_PACKAGES", "").split(",") if p.strip())
_ALLOW_FILE = os.environ.get("CHERRY_ONLY_PACKAGES", "")
_STDLIB_DIRS = sorted({sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"),
                       os.path.join(sysconfig.get_path("platstdlib"), "lib-dynload")})
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _normal(name):
    """A distribution name as PEP 503 compares them (case, and runs of -_. folded)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class _HiddenPackages:
    """A meta-path finder consulted first: refuses the hidden packages and their submodules."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by CHERRY_HIDE_PACKAGES)", name=name)
        return None


class _OnlyPackages:
    """The allow-list's policy: refuses every top-level module that is not the standard library's, the
    repository's or a listed distribution's (or vendored inside one). Decisions are cached per name."""

    def __init__(self, allowed_dists):
        self.allowed_dists = allowed_dists
        self.decided = {}
        self.by_module = None  # top-level module -> distributions, read from metadata at first need

    def allows(self, top):
        if top not in self.decided:
            self.decided[top] = self._decide(top)
        return self.decided[top]

    def _decide(self, top):
        if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "sitecustomize":
            return True
        if PathFinder.find_spec(top, _STDLIB_DIRS) is not None:
            return True  # the standard library's platform modules (_sysconfigdata_*, lib-dynload)
        if _normal(top) in self.allowed_dists:
            return True
        if os.path.exists(os.path.join(_REPO, top)) or os.path.exists(os.path.join(_REPO, top + ".py")):
            return True  # the project itself (cherry, baselines, benchmarks, tests)
        owner = self._vendoring_package(top)
        if owner is not None:
            return self.allows(owner)  # a copy inside another package (setuptools/_vendor/jaraco)
        if self.by_module is None:
            import importlib.metadata as metadata

            self.by_module = metadata.packages_distributions()
        return any(_normal(d) in self.allowed_dists for d in self.by_module.get(top, ()))

    @staticmethod
    def _vendoring_package(top):
        """The top-level package whose directory holds where ``top`` would be found on ``sys.path``
        (a package that put its vendored copies on the path), or None."""
        spec = PathFinder.find_spec(top, sys.path)
        where = spec and (spec.origin or next(iter(spec.submodule_search_locations or ()), None))
        if not where:
            return None
        for entry in sys.path:
            entry = os.path.abspath(entry or ".")
            relative = os.path.relpath(os.path.abspath(where), entry)
            first = relative.split(os.sep)[0]
            if not relative.startswith("..") and first != top and first.isidentifier():
                return first
        return None



class _Filtered:
    """A meta-path finder wrapped so that it finds nothing the policy refuses: as on a machine without
    the package, the import raises ModuleNotFoundError and ``importlib.util.find_spec`` returns None."""

    def __init__(self, inner, policy):
        self.inner, self.policy = inner, policy

    def find_spec(self, name, path=None, target=None):
        if not self.policy.allows(name.partition(".")[0]):
            return None
        find = getattr(self.inner, "find_spec", None)
        return find(name, path, target) if find is not None else None

    def __getattr__(self, attr):  # find_distributions, invalidate_caches, ...
        return getattr(self.inner, attr)


def _read_list(path):
    with open(path, encoding="utf-8") as f:
        return frozenset(_normal(line.split("#")[0].strip()) for line in f if line.split("#")[0].strip())


def _hide_metadata(allowed_dists):
    """Drop unlisted distributions from what ``importlib.metadata`` finds on ``sys.path``."""
    found = PathFinder.find_distributions

    def find_distributions(*args, **kwargs):
        for dist in found(*args, **kwargs):
            name = dist.metadata["Name"] or ""
            if _normal(name) in allowed_dists:
                yield dist

    PathFinder.find_distributions = find_distributions


if _HIDDEN:
    sys.meta_path.insert(0, _HiddenPackages())
if _ALLOW_FILE:
    _ALLOWED = _read_list(_ALLOW_FILE)
    _POLICY = _OnlyPackages(_ALLOWED)
    sys.meta_path[:] = [_Filtered(finder, _POLICY) for finder in sys.meta_path]
    _hide_metadata(_ALLOWED)
