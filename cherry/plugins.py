"""User code that registers datasets and models, imported where a name is looked up.

``$CHERRY_PLUGINS`` lists modules (``mypkg.gnn``) or Python files (``./my_layers.py``), separated by
commas; `load_plugins` imports each once, so a name registered there (`cherry.data.register_dataset`,
`cherry.models.register_model`) is known to the CLI, the benchmark runner and the workflow's jobs, which
run in processes of their own. A plugin that fails to import is a one-line ImportError naming it.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

ENV_VAR = "CHERRY_PLUGINS"
_loaded: set[str] = set()


def load_plugins() -> None:
    """Import every plugin of ``$CHERRY_PLUGINS`` not imported yet."""
    for entry in (e.strip() for e in os.environ.get(ENV_VAR, "").split(",")):
        if not entry or entry in _loaded:
            continue
        _loaded.add(entry)
        try:
            if entry.endswith(".py") or os.sep in entry:
                path = Path(entry).expanduser().resolve()
                spec = importlib.util.spec_from_file_location(f"cherry_plugin_{path.stem}", path)
                if spec is None or spec.loader is None:
                    raise ImportError(f"not a Python file: {path}")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                importlib.import_module(entry)
        except (Exception, SystemExit) as exc:  # a plugin's sys.exit() is a failed import, not an exit
            _loaded.discard(entry)
            raise ImportError(f"${ENV_VAR} entry {entry!r} failed to import: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
