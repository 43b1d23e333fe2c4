#!/usr/bin/env bash
# The one GPU command (`make gpu-check`): on a machine with a CUDA device, builds Release for the
# H200 (sm_90a, 16 jobs), runs the GPU tests, compute-sanitizer memcheck, racecheck and synccheck on
# a subset, the benchmark suites and the mma.sync ceiling microbenchmark; writes logs and JSON to
# one folder and prints a short table last.
# Exits non-zero when any step fails.
#
#   scripts/gpu_check.sh [OUT_DIR]       OUT_DIR defaults to $OUT, else ./out
#   scripts/gpu_check.sh --prepare-deps  (on a machine WITH the packages) copy GoogleTest's source
#                                        and nlohmann_json into .gpu-deps/ for a machine without
#                                        them and without network (the device image): carry it
# Files written (8, flat): machine.txt build.log gpu_tests.log random_check.log sanitizer.log
# bench.log bench.json summary.txt. Environment knobs: SMLA_BENCH_SUITES (default "all"; "none"
# skips the benchmarks), SMLA_CHECK_CASES (random SPEC §5 cases on the GPU, default 400; 0 skips),
# SMLA_CHECK_SEED (their first seed, default the time: each run covers new cases, and a failing
# case prints the command that reruns it),
# SMLA_SANITIZER_FILTER (gtest filter), SMLA_SANITIZER_TOOLS (default "memcheck synccheck
# memcheck@sm90a-decode synccheck@sm90a-decode racecheck": TOOL@sm90a-decode runs the subset's
# FP8 and bf16 decode tests with the Hopper decode forced, TOOL@heads-in-n the subset with the
# heads-in-N prefill at 1..32 heads (SMLA_PREFILL_SM90A_HEADS_IN_N=1; not in the default list),
# TOOL@index-union the draft-token decode tests over index unions (SMLA_DECODE_INDEX_UNION=1; not
# in the default list; memcheck and synccheck only: racecheck reports the seesaw's named-barrier
# hand-offs, below);
# synccheck takes ~5 s and found the wide exchange's bar.sync reached from two branches, fixed in
# e76e83d),
# SMLA_GPU_CHECK_BUDGET_S (whole run, default 570 s: under the device tool's 600 s),
# SMLA_COMMIT (the commit this tree is a copy of; recorded in machine.txt and bench.json),
# SMLA_GPU_CHECK_CODE: sm90a (default) builds what the H200 runs; sm80 builds the code an A100
# runs, compute_80 PTX compiled to sm_90 SASS (`__CUDA_ARCH__` 800: no clusters, no programmatic
# launch), into build-gpu-sm80, and runs every step with SMLA_DEVICE_SMEM_OPTIN=166912 (the
# A100's tile choices, cuda/knobs.h) unless that is set: the A100 path checked on an H200.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS_SRC="$ROOT/.gpu-deps"

if [[ ${1:-} == --prepare-deps ]]; then
  rm -rf "$DEPS_SRC" && mkdir -p "$DEPS_SRC/include" "$DEPS_SRC/share/cmake"
  cp -r /usr/src/googletest "$DEPS_SRC/googletest"
  cp -r /usr/include/nlohmann "$DEPS_SRC/include/"
  cp -r /usr/share/cmake/nlohmann_json "$DEPS_SRC/share/cmake/"
  grep -qx '/.gpu-deps/' "$ROOT/.git/info/exclude" 2>/dev/null ||
    echo '/.gpu-deps/' >>"$ROOT/.git/info/exclude"
  echo "prepared $DEPS_SRC ($(du -sh "$DEPS_SRC" | cut -f1)); carry .gpu-deps to the GPU machine"
  exit 0
fi

OUT_DIR=${1:-${OUT:-$ROOT/out}}
CODE=${SMLA_GPU_CHECK_CODE:-sm90a}
case $CODE in
  sm90a) BUILD="$ROOT/build-gpu" ARCH_FLAGS=(-DSMLA_CUDA_ARCHS=90a) ;;
  sm80)
    BUILD="$ROOT/build-gpu-sm80"
    ARCH_FLAGS=(-DSMLA_CUDA_ARCHS=OFF "-DCMAKE_CUDA_FLAGS=-gencode=arch=compute_80,code=sm_90")
    export SMLA_DEVICE_SMEM_OPTIN=${SMLA_DEVICE_SMEM_OPTIN:-166912}
    ;;
  *) echo "gpu_check: SMLA_GPU_CHECK_CODE must be sm90a or sm80, got '$CODE'" >&2 && exit 2 ;;
esac
JOBS=16
BENCH_SUITES=${SMLA_BENCH_SUITES:-all}
# Representative sanitizer subset: the planner, the combine, the graph-captured decode step, one
# split-heavy decode per FP8 format, the 16-head tile with pieces of several blocks (ManyRequests,
# v32_fp8; ExtraCacheAndPages runs it for v4_fp8: the warp-specialised kernel, the split kernel's
# register-Q tile under racecheck) and one prefill recipe sweep (memcheck runs ~10-50x slower).
SANITIZER_FILTER=${SMLA_SANITIZER_FILTER:-'DecodePlannerGpu.*:SplitCombineGpu.*:DecodeGraphGpu.*:Formats/PortableDecode.LongListsSplit/v32_fp8:Formats/PortableDecode.LongListsSplit/bf16_d512:Formats/PortableDecode.ExtraCacheAndPages/v4_fp8:Formats/PortableDecode.ManyRequests/v32_fp8:DQk/PortablePrefill.TopkAndFeatures/*'}
SANITIZER_DECODE_SM90A_FILTER='DecodeGraphGpu.*:Formats/PortableDecode.LongListsSplit/v32_fp8:Formats/PortableDecode.LongListsSplit/bf16_d512:Formats/PortableDecode.ExtraCacheAndPages/v4_fp8:Formats/PortableDecode.ExtraCacheAndPages/bf16_d576:Formats/PortableDecode.ManyRequests/v32_fp8'
BUDGET_S=${SMLA_GPU_CHECK_BUDGET_S:-570}
START=$(date +%s)
mkdir -p "$OUT_DIR"

declare -a ROWS=()
FAILED=0
# row STEP RESULT SECONDS LOG
row() { ROWS+=("$(printf '%-22s %-44s %6ss  %s' "$1" "$2" "$3" "$4")"); }
# Seconds left of the budget minus a reserve for the later steps, at least 30.
left() {
  local n=$((BUDGET_S - ($(date +%s) - START) - $1))
  echo $((n < 30 ? 30 : n))
}
finish() {
  {
    echo
    echo "gpu-check: $(head -1 "$OUT_DIR/machine.txt" 2>/dev/null)"
    printf '%-22s %-44s %7s  %s\n' step result time log
    printf '%s\n' "${ROWS[@]}"
    [[ $FAILED == 0 ]] && echo "gpu-check: all steps passed" || echo "gpu-check: FAILED"
  } | tee "$OUT_DIR/summary.txt"
  exit $FAILED
}

# ---- machine: GPU, clocks, driver -------------------------------------------------------------
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu \
    --format=csv,noheader 2>&1
  # SMLA_COMMIT wins: the device tool's copy of the tree may carry stale git metadata.
  if [[ -n ${SMLA_COMMIT:-} ]]; then
    echo "commit $SMLA_COMMIT (from SMLA_COMMIT)"
  elif commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); then
    echo "commit $commit$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
  else
    echo "commit unknown (no git metadata on this machine)"
  fi
  echo "code $CODE${SMLA_DEVICE_SMEM_OPTIN:+, SMLA_DEVICE_SMEM_OPTIN=$SMLA_DEVICE_SMEM_OPTIN}"
  nvcc --version 2>&1 | tail -1
  cmake --version 2>&1 | head -1
  nvidia-smi -q -d CLOCK 2>&1
} >"$OUT_DIR/machine.txt"

# ---- build ------------------------------------------------------------------------------------
t0=$(date +%s)
{
  prefix=()
  if [[ -d $DEPS_SRC/googletest ]]; then  # carried deps (see --prepare-deps)
    cmake -S "$DEPS_SRC/googletest" -B "$BUILD/_deps/gtest" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$BUILD/_deps/install" &&
      cmake --build "$BUILD/_deps/gtest" -j $JOBS && cmake --install "$BUILD/_deps/gtest" &&
      prefix=("-DCMAKE_PREFIX_PATH=$BUILD/_deps/install;$DEPS_SRC")
  fi
  # CMake 3.25 (seen here) lacks nvcc's C++20 flag; a CMake that knows it ignores this entry.
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON \
    "${ARCH_FLAGS[@]}" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 "${prefix[@]}" &&
    cmake --build "$BUILD" -j $JOBS
} >"$OUT_DIR/build.log" 2>&1
rc=$?
if [[ $rc != 0 ]]; then
  FAILED=1
  row build "FAILED (rc $rc)" $(($(date +%s) - t0)) build.log
  tail -30 "$OUT_DIR/build.log"
  finish
fi
row build "ok ($(grep -c 'warning:' "$OUT_DIR/build.log") compiler warnings)" $(($(date +%s) - t0)) build.log
# Register spills that ptxas reported in this build's log (-Xptxas=-warn-spills; informational: the
# kernel notes say which spills are accepted; an incremental build lists only what it rebuilt).
spill_bytes=$(sed -n 's/.*Registers are spilled.*, \([0-9]*\) bytes spill stores.*/\1/p' \
  "$OUT_DIR/build.log" | sort -n | uniq | tr '\n' ' ')
row spills "$(grep -c 'Registers are spilled' "$OUT_DIR/build.log") kernels (bytes: ${spill_bytes:-none})" 0 build.log

# ---- GPU tests --------------------------------------------------------------------------------
# What each step keeps of the budget for the steps after it (measured on an H100,
# benchmarks/results/gpu-check-h100-2026-12-07-f140421/: 400 random cases ~6 s, memcheck and
# synccheck ~5 s each, racecheck ~40 s): the sanitizers SANITIZER_NEED, the benchmarks
# BENCH_RESERVE (their run then takes what is left; none without them).
read -r -a SANITIZER_TOOLS <<<"${SMLA_SANITIZER_TOOLS:-memcheck synccheck memcheck@sm90a-decode synccheck@sm90a-decode racecheck}"
SANITIZER_NEED=$((15 * ${#SANITIZER_TOOLS[@]}))
[[ " ${SANITIZER_TOOLS[*]} " == *" racecheck "* ]] && SANITIZER_NEED=$((SANITIZER_NEED + 30))
BENCH_RESERVE=120
[[ $BENCH_SUITES == none ]] && BENCH_RESERVE=0
t0=$(date +%s)
tests_limit=$(left $((20 + SANITIZER_NEED + BENCH_RESERVE)))
timeout "$tests_limit" ctest --test-dir "$BUILD" -L gpu --output-on-failure -j 8 \
  --timeout 300 >"$OUT_DIR/gpu_tests.log" 2>&1
rc=$?
summary=$(grep -E 'tests passed|No tests were found' "$OUT_DIR/gpu_tests.log" | tail -1)
if [[ $rc == 124 ]]; then  # the budget ran out: say how far the suite got
  summary="TIMED OUT after ${tests_limit} s (SMLA_GPU_CHECK_BUDGET_S): $(grep -c ' Passed' \
    "$OUT_DIR/gpu_tests.log") passed, $(grep -cE '\*\*\*Failed|\*\*\*Timeout' \
    "$OUT_DIR/gpu_tests.log") failed of $(grep -oE '[0-9]+/[0-9]+ Test' "$OUT_DIR/gpu_tests.log" |
    tail -1 | cut -d/ -f2 | cut -d' ' -f1) before it"
fi
# On a GPU machine a GPU test that skipped for want of a device (SMLA_SKIP_WITHOUT_GPU's message)
# is a failure; others skip by design (a case run for one layout only, a kernel not in this
# build). The skipped tests (each once, from its run line: ctest lists them again at the end) are
# run once more by name to read their reasons; one that is not a test of sparse_mla_gpu_tests has
# no reason to read and counts as a device skip.
mapfile -t skipped_names < <(sed -n 's/.*Test *#[0-9]*: \([^ ]*\) \.*\*\*\*Skipped.*/\1/p' \
  "$OUT_DIR/gpu_tests.log")
skipped=${#skipped_names[@]}
device_skips=0
if [[ $skipped != 0 ]]; then
  filter=$(IFS=:; echo "${skipped_names[*]}")
  "$BUILD/tests/cpp/sparse_mla_gpu_tests" --gtest_filter="$filter" \
    >"$OUT_DIR/gpu_tests_skipped.log" 2>&1
  reran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran.*/\1/p' \
    "$OUT_DIR/gpu_tests_skipped.log")
  no_device=$(grep -c 'no CUDA device visible' "$OUT_DIR/gpu_tests_skipped.log")
  device_skips=$((no_device + skipped - ${reran:-0}))
  cat "$OUT_DIR/gpu_tests_skipped.log" >>"$OUT_DIR/gpu_tests.log"
  rm -f "$OUT_DIR/gpu_tests_skipped.log"
fi
[[ $rc != 0 || $device_skips != 0 ]] && FAILED=1
row gpu-tests "${summary:-rc $rc} ($skipped skipped, $device_skips without a device)" \
  $(($(date +%s) - t0)) gpu_tests.log

# ---- random recipe cases ------------------------------------------------------------------------
# `sparse-mla check`: random shapes, formats, page sizes, features and invalid indices of the whole
# SPEC §5 recipe against the reference, beyond the fixed cases of the GPU tests (~10 s for 400).
CHECK_CASES=${SMLA_CHECK_CASES:-400}
CHECK_SEED=${SMLA_CHECK_SEED:-$(date +%s)}
if [[ $CHECK_CASES == 0 ]]; then
  row random "skipped (SMLA_CHECK_CASES=0)" 0 -
else
  t0=$(date +%s)
  timeout "$(left $((SANITIZER_NEED + BENCH_RESERVE)))" "$BUILD/sparse-mla" check --backend cuda \
    --cases "$CHECK_CASES" --seed "$CHECK_SEED" >"$OUT_DIR/random_check.log" 2>&1
  rc=$?
  [[ $rc != 0 ]] && FAILED=1
  summary=$(grep -E '^[0-9]+ cases on ' "$OUT_DIR/random_check.log" | tail -1)
  row random "${summary:-rc $rc} (seed $CHECK_SEED)" $(($(date +%s) - t0)) random_check.log
fi

# ---- compute-sanitizer ------------------------------------------------------------------------
t0=$(date +%s)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
TESTS="$BUILD/tests/cpp/sparse_mla_gpu_tests"
: >"$OUT_DIR/sanitizer.log"
for i in "${!SANITIZER_TOOLS[@]}"; do
  entry=${SANITIZER_TOOLS[$i]}
  tool=${entry%@*}
  filter=$SANITIZER_FILTER
  # racecheck does not model named-barrier arrive / sync hand-offs (it reports hazards on a
  # correct one: the probe racecheck_arrive_probe.cu of commit bd7b7ca), which the
  # warp-specialised decode kernel and the seesaw of the Hopper prefill and decode are built on
  # (on the Hopper decode: WG0's read of row_max[1] before its next kWg0MaxReady arrival against
  # WG1's write after that barrier, benchmarks/results/sm90a-decode-code-warm-h200-2026-12-03/);
  # its racecheck run takes the split kernel's 16-row tile and the portable kernels instead. The
  # other tools run the Hopper prefill on a grid of 3 CTAs, so that its CTAs walk several work
  # items each.
  tool_env=(SMLA_PREFILL_SM90A_CTAS=3)
  [[ $tool == racecheck ]] && tool_env=(SMLA_DECODE_WARP_SPECIALIZED=0 SMLA_PREFILL_SM90A=0 SMLA_DECODE_SM90A=0)
  # TOOL@sm90a-decode: the subset's decode tests with the Hopper decode forced, which the
  # default rule gives none of them (their launches are small), at every head count they have.
  if [[ $entry == *@sm90a-decode ]]; then
    tool_env=(SMLA_DECODE_SM90A=1)
    filter=$SANITIZER_DECODE_SM90A_FILTER
  fi
  # TOOL@heads-in-n: the subset (its prefill sweep on 3 CTAs) with the heads-in-N Hopper prefill
  # at 1..32 heads.
  if [[ $entry == *@heads-in-n ]]; then
    tool_env=(SMLA_PREFILL_SM90A_CTAS=3 SMLA_PREFILL_SM90A_HEADS_IN_N=1)
  fi
  # TOOL@index-union: the draft-token decode tests over their requests' index unions and the
  # union kernel against the host union.
  if [[ $entry == *@index-union ]]; then
    tool_env=(SMLA_DECODE_INDEX_UNION=1)
    filter="Formats/PortableDecode.DraftTokens*:IndexUnionGpu.*"
  fi
  echo "==== $tool ${tool_env[*]} --gtest_filter=$filter" >>"$OUT_DIR/sanitizer.log"
  # An equal share of what is left for each tool still to run (the quick ones first, racecheck,
  # the slowest, last with what they left).
  timeout "$(($(left "$BENCH_RESERVE") / (${#SANITIZER_TOOLS[@]} - i)))" \
    env "${tool_env[@]}" "$SAN" --tool "$tool" \
    --error-exitcode 99 --print-limit 20 \
    "$TESTS" --gtest_filter="$filter" >>"$OUT_DIR/sanitizer.log" 2>&1
  rc=$?
  ran=$(awk '/^==== /{n=0} /^\[       OK \]/{n++} END{print n+0}' "$OUT_DIR/sanitizer.log")
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$OUT_DIR/sanitizer.log" | tail -1)
  [[ $rc != 0 || $ran == 0 ]] && FAILED=1
  row "$entry" "rc $rc, ${errors:-no summary}, $ran tests ok" $(($(date +%s) - t0)) sanitizer.log
  t0=$(date +%s)
done

# ---- benchmarks -------------------------------------------------------------------------------
if [[ $BENCH_SUITES == none ]]; then
  row bench "skipped (SMLA_BENCH_SUITES=none)" 0 -
  finish
fi
t0=$(date +%s)
timeout "$(left 10)" "$BUILD/sparse-mla" bench --backend cuda --suite "$BENCH_SUITES" \
  --json "$OUT_DIR/bench.json" >"$OUT_DIR/bench.log" 2>&1
rc=$?
[[ $rc != 0 ]] && FAILED=1
cases=$(grep -c '"median_ms"' "$OUT_DIR/bench.json" 2>/dev/null)
row bench "rc $rc, ${cases:-0} cases, suites $BENCH_SUITES" $(($(date +%s) - t0)) "bench.log bench.json"

# ---- mma.sync ceiling (benchmarks/microbench/mma_sync_ceiling.cu), appended to bench.log: the
# TFLOP/s the portable kernels' only tensor-core instruction reaches on this card (H200,
# benchmarks/results/mma-sync-ceiling-h200-2026-11-29: ~640 from registers, ~605 with the 64-row
# prefill's fragment loads), beside the suites.
t0=$(date +%s)
{
  echo "== mma.sync ceiling (benchmarks/microbench/mma_sync_ceiling.cu)"
  "${CUDACXX:-nvcc}" -O3 -std=c++20 -arch=sm_90a -I "$ROOT/src" \
    "$ROOT/benchmarks/microbench/mma_sync_ceiling.cu" -o "$BUILD/mma_sync_ceiling" &&
    timeout "$(left 0)" "$BUILD/mma_sync_ceiling"
} >>"$OUT_DIR/bench.log" 2>&1
rc=$?
[[ $rc != 0 ]] && FAILED=1
peak=$(awk '$1 == "registers" && $NF == "TFLOP/s" {print $(NF-1)}' "$OUT_DIR/bench.log" | sort -n | tail -1)
with_loads=$(awk '$1 == "smem" && $2 == 8 && $NF == "TFLOP/s" {print $(NF-1)}' "$OUT_DIR/bench.log")
row mma-ceiling "rc $rc, ${peak:-?} TFLOP/s, ${with_loads:-?} with loads" $(($(date +%s) - t0)) bench.log
tail -45 "$OUT_DIR/bench.log"
finish
