#!/usr/bin/env bash
# Installs PyG's neighbour-sampling backend (torch-scatter + torch-sparse; torch-sparse imports
# torch-scatter, so both are needed) into a virtual environment, from a wheel cache outside the repo.
#
# pyg-lib is not on PyPI and torch-scatter/torch-sparse are source-only there, so a cache miss builds
# the wheels from their PyPI sources against the installed torch, as small as NeighborLoader allows:
# CPU kernels only (FORCE_ONLY_CPU=1: PyG samples on the host even when training on a GPU), METIS off
# (upstream's default), no debug info (-g0: the linker strips it anyway, and it cut the compile time
# of one torch/extension.h unit from 57 to 34 CPU-seconds here). The cache key is the exact torch build
# (torch.__version__, e.g. 2.13.0+cpu) and the CPython tag, so a wheel is only reused against the ABI it
# was compiled for. Builds are serialised by a lock (two installs share one build) and published by a
# rename, so a killed build never leaves a half-written wheel in the cache.
#
# Usage: install_pyg_sampling.sh [PYTHON]   (default .venv/bin/python)
# Env:   CHERRY_WHEEL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/cherry/wheels), MAX_JOBS (default 2)
set -euo pipefail
PY=${1:-.venv/bin/python}
SCATTER=torch-scatter==2.1.2
SPARSE=torch-sparse==0.6.18

if "$PY" -c "import torch_sparse, torch_scatter" 2>/dev/null; then
  echo "pyg sampling backend: already installed"; exit 0
fi
KEY=$("$PY" -c "import sys, torch; print(f'{torch.__version__}-cp{sys.version_info[0]}{sys.version_info[1]}'.replace('+', '_'))")
CACHE=${CHERRY_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cherry/wheels}/$KEY
mkdir -p "$CACHE"

# setuptools lets CFLAGS replace Python's own compile flags: keep them, and append -g0 (last -g wins).
CFLAGS_G0="$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('CFLAGS') or '')") -g0"

have_wheel() { compgen -G "$CACHE/$1-*.whl" >/dev/null; }

build_missing() {
  for req in "$SCATTER" "$SPARSE"; do
    local stem=${req%%==*}; stem=${stem//-/_}-${req##*==}
    have_wheel "$stem" && continue
    echo "pyg sampling backend: building $req from source (minutes; once per torch build)"
    local tmp; tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
    # No build isolation: an isolated build would fetch an unpinned (CUDA, multi-GB) torch.
    FORCE_ONLY_CPU=1 WITH_METIS=0 CFLAGS="$CFLAGS_G0" CXXFLAGS="$CFLAGS_G0" MAX_JOBS=${MAX_JOBS:-2} \
      "$PY" -m pip wheel --quiet --no-deps --no-build-isolation --no-binary "${req%%==*}" \
      -w "$tmp" "$req" || { rm -rf "$tmp"; return 1; }
    mv "$tmp"/*.whl "$CACHE"/ && rmdir "$tmp"
  done
}

( flock 9; build_missing ) 9>"$CACHE/.lock"
"$PY" -m pip install --quiet --no-index --no-deps --find-links "$CACHE" "$SCATTER" "$SPARSE"
"$PY" -c "import torch_sparse, torch_scatter; print('pyg sampling backend: torch-scatter', torch_scatter.__version__, 'torch-sparse', torch_sparse.__version__)"
