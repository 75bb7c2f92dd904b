#!/usr/bin/env bash
# `make gpu-check`: one prepared script for a lent GPU machine, at most GPU_CHECK_BUDGET_S (480 s) in all.
# Sections run in order, each under its own timeout capped by the time left; a section that would
# start past the budget is skipped. $OUT/summary.txt (per-section status and seconds) is written on
# every exit, also on failure or interrupt. Fails when nvidia-smi sees a GPU but torch has no CUDA;
# without any GPU it records that and exits 0 (safe to run anywhere). Every file it writes is under
# $OUT. It needs none of dgl, ogb, pymetis, scipy or snakemake (the GPU machine has none): generated
# data is read without OGB, the ordering falls back from METIS to BFS (said in engine-*.txt and in the
# records' "ordering"), Betty's tests skip (tests/unit/test_without_optional_packages.py checks this).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
OUT=${OUT:-results/gpu-check}
BUDGET_S=${GPU_CHECK_BUDGET_S:-480}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# the extension's build cache lives inside the repository (git-ignored), so reruns on one machine reuse it
export CHERRY_EXT_DIR=${CHERRY_EXT_DIR:-$PWD/.ext-cache}
START_S=$(date +%s)
status=0
SUMMARY=()

finish() {
  {
    echo "gpu-check: budget ${BUDGET_S}s, used $(( $(date +%s) - START_S ))s, status ${status}"
    printf '%s\n' "${SUMMARY[@]}"
  } > "$OUT/summary.txt"
  cat "$OUT/summary.txt"
}
trap finish EXIT

# section NAME MAX_S COMMAND...: run COMMAND (output to $OUT/NAME.txt) under min(MAX_S, time left)
section() {
  local name=$1 max_s=$2; shift 2
  local left=$(( BUDGET_S - ($(date +%s) - START_S) ))
  if [ "$left" -lt 10 ]; then
    SUMMARY+=("$(printf '%-22s skipped (budget spent)' "$name")"); status=1; return 1
  fi
  local limit=$(( max_s < left ? max_s : left ))
  local t0=$(date +%s)
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.txt"
  local word=ok
  [ "$rc" -eq 124 ] && word="timeout"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && word="failed (rc $rc)"
  [ "$rc" -ne 0 ] && status=1
  SUMMARY+=("$(printf '%-22s %-16s %4ss' "$name" "$word" "$(( $(date +%s) - t0 ))")")
  return $rc
}

gpu_seen=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt" 2>&1 && gpu_seen=1
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>>"$OUT/device.txt"; then
  if [ "$gpu_seen" -eq 1 ]; then
    SUMMARY+=("nvidia-smi sees a GPU but torch has no CUDA ($("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1)): FAILED")
    status=1; exit 1
  fi
  SUMMARY+=("no GPU here (nvidia-smi found none, torch has no CUDA): CUDA sections skipped")
  exit 0
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" >> "$OUT/device.txt" 2>&1
"$PY" - >> "$OUT/device.txt" 2>&1 <<'PYEOF'
import importlib
for name in ("pytest", "pandas", "pynvml", "torch_geometric", "dgl", "ogb", "pymetis", "scipy"):
    try:
        importlib.import_module(name)
        print(f"{name}: present")
    except Exception as exc:  # optional: a missing one is recorded, never fatal
        print(f"{name}: absent ({type(exc).__name__})")
PYEOF
# The datasets are generated on the CPU while the extension builds (synth-arxiv: tens of CPU-seconds);
# the dataset sections wait for it (data.txt has its output).
export CHERRY_DATA=${CHERRY_DATA:-$PWD/data}
DATA_T0=$(date +%s)
( timeout 240 "$PY" -m cherry data prepare synth-arxiv && timeout 60 "$PY" -m cherry data prepare synth-tiny ) \
  > "$OUT/data.txt" 2>&1 &
DATA_PID=$!

# the install-time build (setup.py: cherry/_C with CPU and CUDA kernels) from the working tree, in place
# (no pip, no registry; ninja reuses the objects an earlier run left under build/), then its status line
section build 240 env MAX_JOBS="${MAX_JOBS:-$(nproc)}" bash -c '"$0" setup.py -q build_ext --inplace && "$0" -c "
from cherry.ops import extension_available, extension_status
print(extension_status()); import sys; sys.exit(0 if extension_available() else 1)"' "$PY"
if ! grep -q "with CUDA" "$OUT/build.txt"; then
  # setup.py could not build here (e.g. no setuptools on the GPU machine's Python): the opt-in JIT build
  # (torch.utils.cpp_extension.load + ninja) from the same sources, for this and every later section
  export CHERRY_JIT=1
  section build-jit 240 env MAX_JOBS="${MAX_JOBS:-$(nproc)}" "$PY" -c "
from cherry.ops import extension_available, extension_status
print(extension_status()); import sys; sys.exit(0 if extension_available() else 1)"
  cat "$OUT/build-jit.txt" >> "$OUT/build.txt"
fi
if grep -q "with CUDA" "$OUT/build.txt"; then SUMMARY+=("native extension: in use, with CUDA kernels")
else SUMMARY+=("native extension: NOT in use with CUDA ($(tail -n 1 "$OUT/build.txt" | cut -c1-160))"); status=1; fi

# serial (no xdist): one GPU, and CUDA errors must point at their own test; -rA keeps the tests'
# printed figures (sync counts, planning times) in gpu-tests.txt
section gpu-tests 150 "$PY" -m pytest -q -rA -m gpu -p no:cacheprovider tests

if wait "$DATA_PID"; then SUMMARY+=("$(printf '%-22s %-16s %4ss' data ok "$(( $(date +%s) - DATA_T0 ))")")
else SUMMARY+=("$(printf '%-22s %-16s' data "failed (see data.txt)")"); status=1; fi

E=( "$PY" -m cherry bench engine --dataset synth-arxiv --device cuda --aggrs mean,lstm --ks 2,4,8 --steps 3 --warmup 1 )
section engine-b1024 60 "${E[@]}" --batch-size 1024 --json "$OUT/engine-b1024.json"
section engine-b65536 90 "${E[@]}" --batch-size 65536 --json "$OUT/engine-b65536.json"
section profile-syncs 45 "$PY" -m benchmarks.profile_syncs --dataset synth-arxiv --device cuda --ks 1,8 \
  --batch-size 1024 --steps 3 --json "$OUT/profile-syncs.json"
# the memory wall: SAGE-LSTM, hidden 512, the whole arxiv-sized training set as one batch, 24 GiB cap,
# through the benchmark runner: its record has the status (an out-of-memory is a result: exit 0), K,
# the allocator's and NVML's peaks and where the micro-batches were built
wall_spec() {  # wall_spec FILE K: the memory-wall run's spec with K micro-batches ("auto": from the budget)
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
k = sys.argv[2] if sys.argv[2] == "auto" else int(sys.argv[2])
json.dump({"system": "cherry", "dataset": "synth-arxiv", "model": "sage", "aggr": "lstm", "hidden": 512,
           "fanouts": [10, 25], "batch_size": 90941, "device": "cuda", "device_memory_bytes": "24GiB",
           "budget_bytes": "24GiB", "num_microbatches": k, "epochs": 0, "warmup": 1, "steps": 1,
           "evaluate": False, "timeout_s": 55}, open(sys.argv[1], "w"))
PYEOF
}
wall_spec "$OUT/wall-auto.spec.json" auto
section wall-auto 60 "$PY" -m cherry.bench.run --spec "$OUT/wall-auto.spec.json" --out "$OUT/wall-auto.json"
wall_spec "$OUT/wall-k1.spec.json" 1
section wall-k1 60 "$PY" -m cherry.bench.run --spec "$OUT/wall-k1.spec.json" --out "$OUT/wall-k1.json"
"$PY" - "$OUT/wall-k1.json" "$OUT/wall-auto.json" >> "$OUT/wall-check.txt" 2>&1 <<'PYEOF' || { status=1; SUMMARY+=("memory wall: K=1 did not run out of memory or automatic K failed (see wall-check.txt)"); }
import json, sys
k1, auto = (json.load(open(p)) for p in sys.argv[1:3])
keys = ("num_microbatches_max", "construction", "peak_tracked_bytes", "peak_reserved_bytes", "nvml_peak_bytes",
        "nvml_baseline_bytes", "estimated_peak_bytes", "step_time_median_s")
print("K=1:", k1.get("status"), k1.get("reason"))
print("auto:", auto.get("status"), auto.get("reason"), {k: auto.get(k) for k in keys})
sys.exit(0 if k1.get("status") == "oom" and auto.get("status") == "ok" else 1)
PYEOF
# the feature cache's gather: UVA reads of missed rows from pinned host memory vs the host gather
section cache-gather 45 "$PY" -m benchmarks.cache_gather_gpu --rows 2000000 --nodes 200000 --repeats 10
section verify-k8 60 "$PY" -m cherry verify --dataset synth-arxiv --aggr lstm --hidden 64 --fanouts 10,25 \
  --batch-size 1024 --microbatches 8 --device cuda
exit $status
