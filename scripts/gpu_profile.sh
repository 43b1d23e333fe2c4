#!/usr/bin/env bash
# Profile chosen benchmark cases with Nsight Compute on a GPU machine (the device tool): builds
# only the CLI (Release, sm_90a, 16 jobs), then for each case runs `sparse-mla bench` once under
# `ncu` (one timed run, no warm-up, no verification) and keeps the report as text.
#
#   scripts/gpu_profile.sh OUT_DIR 'CASE FLAGS' ['CASE FLAGS' ...]
#     e.g. scripts/gpu_profile.sh "$OUT" '--op decode --format v4_fp8 --b 64 --s_q 1 --h_q 16 ...'
# Environment: SMLA_NCU_SECTIONS (default: speed of light, warp states, memory, launch,
# occupancy), SMLA_NCU_KERNELS (kernel-name regex, default the decode/prefill/planner/combine
# kernels), SMLA_NCU_SOURCE=1 (also sample warp stalls per SASS instruction of the first matching
# kernel, print the hot spots and the per-phase samples with scripts/ncu_hotspots.py, and keep
# the per-instruction table as OUT_DIR/profile_N_sass.csv.gz), SMLA_NCU_FULL0 (with
# SMLA_NCU_SOURCE=1, for a Hopper seesaw kernel: the shared-memory offset of its full[0] barrier,
# 0x34680 at d_qk 512 and 0x38680 at 576; scripts/ncu_waits.py then writes OUT_DIR/waits_N.txt,
# the samples of each mbarrier wait site and the producer's stall reasons). Needs nlohmann_json:
# carry .gpu-deps (see gpu_check.sh --prepare-deps).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT_DIR=${1:?usage: gpu_profile.sh OUT_DIR CASE...}
shift
BUILD="$ROOT/build-gpu"
mkdir -p "$OUT_DIR"
SECTIONS=${SMLA_NCU_SECTIONS:-SpeedOfLight WarpStateStats MemoryWorkloadAnalysis LaunchStats Occupancy}
KERNELS=${SMLA_NCU_KERNELS:-'regex:portable|combine|planner'}

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON \
  -DSMLA_CUDA_ARCHS=90a -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  "-DCMAKE_PREFIX_PATH=$ROOT/.gpu-deps" >"$OUT_DIR/profile_build.log" 2>&1 &&
  cmake --build "$BUILD" -j 16 --target sparse-mla >>"$OUT_DIR/profile_build.log" 2>&1 ||
  { tail -30 "$OUT_DIR/profile_build.log"; exit 1; }

NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
section_flags=()
for s in $SECTIONS; do section_flags+=(--section "$s"); done
n=0
for case_flags in "$@"; do
  n=$((n + 1))
  # shellcheck disable=SC2086  # the case is a list of flags
  "$NCU" -k "$KERNELS" "${section_flags[@]}" "$BUILD/sparse-mla" bench $case_flags \
    --backend cuda --iters 1 --warmup 0 --verify off >"$OUT_DIR/profile_$n.txt" 2>&1
  echo "== case $n: $case_flags"
  grep -E '^  [a-z_]+.*\(|Duration' "$OUT_DIR/profile_$n.txt" | head -20
  if [[ ${SMLA_NCU_SOURCE:-0} == 1 ]]; then
    # shellcheck disable=SC2086
    "$NCU" -k "$KERNELS" --launch-count 1 --section SourceCounters --section WarpStateStats \
      -f -o "$BUILD/profile_$n" "$BUILD/sparse-mla" bench $case_flags --backend cuda --iters 1 \
      --warmup 0 --verify off >/dev/null 2>&1 &&
      "$NCU" -i "$BUILD/profile_$n.ncu-rep" --page source --print-source sass --csv \
        >"$BUILD/profile_${n}_sass.csv" 2>&1 &&
      python3 "$ROOT/scripts/ncu_hotspots.py" "$BUILD/profile_${n}_sass.csv" 40 \
        >"$OUT_DIR/hotspots_$n.txt" 2>&1
    # The per-instruction table itself, for later reading without a GPU.
    gzip -c "$BUILD/profile_${n}_sass.csv" >"$OUT_DIR/profile_${n}_sass.csv.gz" 2>/dev/null
    cat "$OUT_DIR/hotspots_$n.txt"
    if [[ -n ${SMLA_NCU_FULL0:-} ]]; then
      python3 "$ROOT/scripts/ncu_waits.py" "$OUT_DIR/profile_${n}_sass.csv.gz" "$SMLA_NCU_FULL0" \
        >"$OUT_DIR/waits_$n.txt" 2>&1
      cat "$OUT_DIR/waits_$n.txt"
    fi
  fi
done
