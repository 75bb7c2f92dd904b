#!/usr/bin/env bash
# `make gpu-check` (or, where make is absent, `bash workflow/scripts/gpu_check.sh`): one prepared script
# for a lent GPU machine, GPU_CHECK_BUDGET_S (530 s) of wall time in all, cheapest and most informative
# section first. Usage: gpu_check.sh [--on-cpu]
#
# --on-cpu runs every section end to end on the CPU at its smallest size, under the GPU machine's package
# set (tests/hidden_packages: only the packages listed in gpu_machine_packages.txt, the standard library
# and the project import), so the only untested thing on the first GPU run is the GPU itself
# (tests/unit/test_gpu_check.py runs it). Its build section loads the extension already built here
# rather than compiling it again (minutes on a small CPU).
#
# $OUT (default results/gpu-check) receives three files, rewritten after every section so that a run
# killed from outside still leaves them: gpu-check.tar.gz (every section's full output and JSON figures),
# summary.txt (each section's status, seconds, budget and headline lines) and device.txt (compilers,
# torch, CUDA, driver, optional packages found); summary.txt is also printed last (the digest).
# Each section runs with PYTHONUNBUFFERED=1 under min(its budget, time left); at its limit it gets SIGINT
# (Python and pytest stop and say where; what it printed is kept), then SIGKILL 15 s later.
# Without a GPU (and without --on-cpu) it says so and exits 0; it fails when nvidia-smi sees a GPU that
# torch cannot use. Exit status: 0 when every section passed.
set -uo pipefail
{ # the whole script is one compound command: bash reads it all before running, so an edit of this file
  # during a run cannot change what the run does
cd "$(dirname "$0")/../.."
ON_CPU=0
case "${1:-}" in
  --on-cpu) ON_CPU=1 ;;
  "") ;;
  *) echo "gpu_check.sh: unknown argument '$1' (expected --on-cpu or nothing)" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
OUT=${OUT:-results/gpu-check}
BUDGET_S=${GPU_CHECK_BUDGET_S:-530}
KILL_AFTER_S=15
for pair in "GPU_CHECK_BUDGET_S=$BUDGET_S" "GPU_CHECK_LIMIT_SCALE=${GPU_CHECK_LIMIT_SCALE:-1}"; do
  [[ "${pair#*=}" =~ ^[1-9][0-9]*$ ]] || {
    echo "gpu_check.sh: ${pair%%=*}='${pair#*=}' is not a positive whole number of seconds or times" >&2; exit 2; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")  # the sections' files, archived into $OUT
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# the extension's build cache lives inside the repository (git-ignored), so reruns on one machine reuse it
export CHERRY_EXT_DIR=${CHERRY_EXT_DIR:-$PWD/.ext-cache}
if [ "$ON_CPU" -eq 1 ]; then
  export PYTHONPATH="$PWD/tests/hidden_packages:$PYTHONPATH"
  export CHERRY_ONLY_PACKAGES="$PWD/tests/hidden_packages/gpu_machine_packages.txt"
  export CHERRY_DATA=${CHERRY_DATA:-$WORK/data}
  DEVICE=cpu DATASET=synth-tiny FANOUTS=3,5 B_SMALL=64 B_LARGE=512 HIDDEN=8 STEPS=1 WARMUP=0 KS=8 AGGRS=mean
  WALL_FANOUTS=5,10 WALL_HIDDEN=32 WALL_BATCH=512 WALL_CAP=6MiB GATHER="--rows 20000 --nodes 2000 --repeats 2"
  STREAM="--batch-size 256 --sample-fanouts 5,10"
  # a small shared CPU runs the same start-up and checks several times slower than the GPU machine's:
  # the limits stretch there (summary.txt still compares each section's seconds with its budget)
  LIMIT_SCALE=${GPU_CHECK_LIMIT_SCALE:-3}
else
  export CHERRY_DATA=${CHERRY_DATA:-$PWD/data}
  DEVICE=cuda DATASET=synth-arxiv FANOUTS=10,25 B_SMALL=1024 B_LARGE=65536 HIDDEN=64 STEPS=3 WARMUP=1 KS=2,8
  AGGRS=mean,lstm WALL_FANOUTS=10,25 WALL_HIDDEN=512 WALL_BATCH=90941 WALL_CAP=24GiB GATHER="--rows 2000000 --nodes 200000 --repeats 10"
  STREAM="--batch-size 1024 --sample-fanouts 15,10"
  LIMIT_SCALE=${GPU_CHECK_LIMIT_SCALE:-1}
fi
START_S=$(date +%s)
status=0
SUMMARY=()

# rewrite summary.txt and the archive from what the sections left so far
save() {
  {
    echo "gpu-check$([ "$ON_CPU" -eq 1 ] && echo ' --on-cpu'): budget ${BUDGET_S}s, used $(( $(date +%s) - START_S ))s, status ${status}"
    printf '%s\n' "${SUMMARY[@]}"
  } > "$OUT/summary.txt.tmp" && mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
  cp "$OUT/summary.txt" "$OUT/device.txt" "$WORK/" 2>/dev/null
  tar -czf "$OUT/gpu-check.tar.gz.tmp" -C "$WORK" --exclude=./data . && mv "$OUT/gpu-check.tar.gz.tmp" "$OUT/gpu-check.tar.gz"
}
finish() {
  save
  rm -rf "$WORK"
  echo "== digest ($OUT/summary.txt; full outputs in $OUT/gpu-check.tar.gz)"
  cat "$OUT/summary.txt"
}
trap finish EXIT

# section NAME BUDGET_S HEADLINE_REGEX COMMAND...: run COMMAND (output in NAME.txt) under min(BUDGET_S,
# time left); summary.txt gets its status, seconds, budget and the output lines matching HEADLINE_REGEX
section() {
  local name=$1 budget_s=$2 headline=$3; shift 3
  local left=$(( BUDGET_S * LIMIT_SCALE - ($(date +%s) - START_S) ))
  if [ "$left" -lt 10 ]; then
    SUMMARY+=("$(printf '%-14s %-16s %5s %5ss' "$name" "skipped(budget)" - "$budget_s")"); status=1; save; return 1
  fi
  local limit=$(( budget_s * LIMIT_SCALE < left ? budget_s * LIMIT_SCALE : left ))
  local t0=$(date +%s)
  echo "== $name (limit ${limit}s)"
  timeout --signal=INT --kill-after="$KILL_AFTER_S" "$limit" "$@" > "$WORK/$name.txt" 2>&1
  local rc=$?
  tail -n 5 "$WORK/$name.txt"
  local word=ok
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && word="timeout(SIGINT)"
  [ "$rc" -ne 0 ] && [ "$word" = ok ] && word="failed(rc $rc)"
  [ "$rc" -ne 0 ] && status=1
  SUMMARY+=("$(printf '%-14s %-16s %5ss %5ss' "$name" "$word" "$(( $(date +%s) - t0 ))" "$budget_s")")
  while IFS= read -r line; do SUMMARY+=("    ${line:0:150}"); done \
    < <(grep -E -- "$headline" "$WORK/$name.txt" | tail -n 8)
  save
  return $rc
}

{
  for tool in nvcc ninja make g++ cmake; do  # nvcc says its release on a later line
    printf '%-6s ' "$tool"; ("$tool" --version 2>/dev/null || echo absent) | grep -E -m 1 'release|[0-9]+\.[0-9]|absent'
  done
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    | sed 's/^/gpu    /' || echo "gpu    none (nvidia-smi absent or sees no GPU)"
  "$PY" - <<'PYEOF'
import importlib.metadata, importlib.util, sys
print("python", sys.version.split()[0])
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
# found, not imported: importing dgl or torch_geometric costs seconds of the budget (a broken install
# shows in the section that imports it)
for name, dist in (("jsonschema", "jsonschema"), ("pytest", "pytest"), ("pandas", "pandas"), ("scipy", "scipy"),
                   ("matplotlib", "matplotlib"), ("pynvml", "nvidia-ml-py"), ("setuptools", "setuptools"),
                   ("torch_geometric", "torch-geometric"), ("pyg_lib", "pyg-lib"), ("torch_sparse", "torch-sparse"),
                   ("torch_scatter", "torch-scatter"), ("dgl", "dgl"), ("ogb", "ogb"), ("pymetis", "pymetis"),
                   ("snakemake", "snakemake")):
    if importlib.util.find_spec(name) is None:
        print(f"{name}: absent")
        continue
    try:
        print(f"{name}: present ({importlib.metadata.version(dist)})")
    except importlib.metadata.PackageNotFoundError:
        print(f"{name}: present")
PYEOF
} > "$OUT/device.txt" 2>&1
if [ "$ON_CPU" -eq 0 ] && ! grep -q "^torch .* available True" "$OUT/device.txt"; then
  if nvidia-smi -L > /dev/null 2>&1; then
    SUMMARY+=("nvidia-smi sees a GPU but torch has no CUDA (device.txt): FAILED"); status=1; exit 1
  fi
  SUMMARY+=("no GPU here (nvidia-smi found none, torch has no CUDA): nothing run (--on-cpu runs it on the CPU)")
  exit 0
fi

# The dataset is generated on the CPU while the extension builds; the first section that reads it waits.
( timeout 240 "$PY" -m cherry data prepare "$DATASET" ) > "$WORK/data.txt" 2>&1 &
DATA_PID=$!
data_ready() {
  wait "$DATA_PID" && return 0
  SUMMARY+=("data           failed (data.txt)"); status=1; return 1
}

# build: setup.py's in-place build (no pip, no registry; ninja reuses earlier objects), else the JIT build
build() {
  if [ "$ON_CPU" -eq 0 ]; then
    MAX_JOBS="${MAX_JOBS:-$(nproc)}" "$PY" setup.py -q build_ext --inplace \
      || { echo "setup.py build failed: the JIT build (CHERRY_JIT=1)"; export CHERRY_JIT=1; }
  fi
  "$PY" -c "from cherry.ops import extension_available, extension_status
print('extension:', extension_status()); import sys; sys.exit(0 if extension_available() else 1)"
}
# the memory wall: SAGE-LSTM, the whole training set as one batch under a capped device, automatic K
# against K = 1, through the benchmark runner (an out-of-memory is a result: exit 0): K=1 must run out of
# memory, automatic K must fit
memory_wall() {
  for k in auto 1; do
    "$PY" -c "import json, sys
k = sys.argv[1] if sys.argv[1] == 'auto' else int(sys.argv[1])
json.dump({'system': 'cherry', 'dataset': '$DATASET', 'model': 'sage', 'aggr': 'lstm', 'hidden': $WALL_HIDDEN,
           'fanouts': [int(f) for f in '$WALL_FANOUTS'.split(',')], 'batch_size': $WALL_BATCH, 'device': '$DEVICE',
           'device_memory_bytes': '$WALL_CAP', 'budget_bytes': '$WALL_CAP', 'num_microbatches': k, 'epochs': 0,
           'warmup': 1, 'steps': 1, 'evaluate': False, 'timeout_s': 55}, open(sys.argv[2], 'w'))" \
      "$k" "$WORK/wall-k$k.spec.json" || return 1
    "$PY" -m cherry.bench.run --spec "$WORK/wall-k$k.spec.json" --out "$WORK/wall-k$k.json" || return 1
  done
  "$PY" - "$WORK/wall-k1.json" "$WORK/wall-kauto.json" <<'PYEOF'
import json, sys
k1, auto = (json.load(open(p)) for p in sys.argv[1:3])
keys = ("num_microbatches_max", "construction", "peak_tracked_bytes", "peak_reserved_bytes", "nvml_peak_bytes",
        "nvml_baseline_bytes", "estimated_peak_bytes", "step_time_median_s")
print("wall K=1:", k1.get("status"), k1.get("reason"))
print("wall auto:", auto.get("status"), auto.get("reason"), {k: auto.get(k) for k in keys})
sys.exit(0 if k1.get("status") == "oom" and auto.get("status") == "ok" else 1)
PYEOF
}
# the GPU-marked tests in two halves of the collected list (serial: one GPU, and a CUDA error must point
# at its own test); -rA keeps the tests' printed figures
gpu_tests() {
  local half=$1
  [ -s "$WORK/gpu-tests.ids" ] || "$PY" -m pytest --collect-only -q -m gpu -p no:cacheprovider tests \
    > "$WORK/gpu-tests.ids" 2>&1 || { cat "$WORK/gpu-tests.ids"; rm -f "$WORK/gpu-tests.ids"; return 1; }
  grep '::' "$WORK/gpu-tests.ids" | awk -v h="$half" '(NR % 2) == (h % 2)' > "$WORK/gpu-tests-$half.ids"
  echo "gpu-tests half $half: $(wc -l < "$WORK/gpu-tests-$half.ids") of $(grep -c '::' "$WORK/gpu-tests.ids") collected"
  [ -s "$WORK/gpu-tests-$half.ids" ] || return 0
  "$PY" -m pytest -q -rA -m gpu -p no:cacheprovider $(cat "$WORK/gpu-tests-$half.ids")
}
export -f build memory_wall gpu_tests
export ON_CPU PY WORK DATASET DEVICE WALL_FANOUTS WALL_HIDDEN WALL_BATCH WALL_CAP

C=( "$PY" -m cherry )
E=( "${C[@]}" bench engine --dataset "$DATASET" --device "$DEVICE" --fanouts "$FANOUTS" --hidden "$HIDDEN"
    --steps "$STEPS" --warmup "$WARMUP" )
# ---- THE SECTIONS, in order: name, budget s (their sum stays under GPU_CHECK_BUDGET_S; docs/gpu.md has the
# measured --on-cpu seconds), headline regex (its matching lines go to summary.txt), command. A new
# section is one line here (as bench-kernels below)
# (taking its seconds from another's budget), plus its name in tests/unit/test_gpu_check.py's SECTIONS.
section build         110 'extension:|error|JIT' bash -c build
# a JIT build (setup.py failed) is what every later section must load too
grep -q "CHERRY_JIT=1" "$WORK/build.txt" && export CHERRY_JIT=1
section cache-gather   30 '^ *[0-9.]+ |differs|no CUDA' "$PY" -m benchmarks.cache_gather_gpu --device "$DEVICE" $GATHER
data_ready
section verify         30 'max|equal|differ|Error' "${C[@]}" verify --dataset "$DATASET" --aggr lstm --hidden "$HIDDEN" \
  --fanouts "$FANOUTS" --batch-size "$B_SMALL" --microbatches 8 --device "$DEVICE"
section syncs          30 'syncs|K=|Error' "$PY" -m benchmarks.profile_syncs --dataset "$DATASET" --device "$DEVICE" \
  --ks 1,8 --aggrs "$AGGRS" --batch-size "$B_SMALL" --fanouts "$FANOUTS" --hidden "$HIDDEN" --steps "$STEPS" \
  --json "$WORK/syncs.json"
section engine-b1024   35 '^(mean|lstm) |ordering|Error' "${E[@]}" --aggrs "$AGGRS" --ks "$KS" --batch-size "$B_SMALL" \
  --json "$WORK/engine-b1024.json"
section gpu-tests-1    65 'passed|failed|skipped|error' bash -c 'gpu_tests 1'
section gpu-tests-2    65 'passed|failed|skipped|error' bash -c 'gpu_tests 2'
section memory-wall    50 '^wall|Error' bash -c memory_wall
section bench-kernels  30 '^ *(sage|gcn|gat)|Error' "${C[@]}" bench kernels --device "$DEVICE" --dataset "$DATASET" \
  --batch-size "$B_SMALL" --fanouts "$FANOUTS" --hidden "$HIDDEN" --steps 2 --repeats 2
# the streamed input layer on the generated wide graph (no file of ../shared/graphs): K = 1 peaks
# streamed and not, plans and epoch times at 1/2, 1/4, 1/10 of that peak (`cherry bench stream --quick`),
# and whether the chunk copies ran beside the GEMMs (its overlap: line, from a torch.profiler trace)
section bench-stream   30 '^generated|^ +(K1 on|[0-9.]+ auto):|^overlap|Error' "${C[@]}" bench stream --quick \
  --device "$DEVICE" $STREAM --json "$WORK/bench-stream.json"
section engine-b65536  50 '^(mean|lstm) |Error' "${E[@]}" --aggrs mean --ks 8 --batch-size "$B_LARGE" \
  --json "$WORK/engine-b65536.json"
exit $status
}
