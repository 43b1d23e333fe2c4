#!/usr/bin/env bash
# One device call for the paired-st-async experiment (scripts/experiments/paired-st-async.patch):
#  1. scripts/gpu_check.sh on the tree as it is (A): GPU tests, sanitizers, SMLA_BENCH_SUITES;
#  2. a copy of the tree with the patch (B): GPU tests with pairing forced on, memcheck and
#     racecheck with pairing forced on the two paired cases;
#  3. bench at 128 heads, alternating A-unpaired, A-paired, B-paired twice (lower median kept);
#  4. the Python GPU suite on A.
# Writes everything under OUT_DIR (tar it: the device tool returns at most 8 files).
#   scripts/experiments/st_async_trial.sh OUT_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT_DIR=${1:?usage: st_async_trial.sh OUT_DIR}
mkdir -p "$OUT_DIR/a" "$OUT_DIR/b" "$OUT_DIR/ab"

SMLA_BENCH_SUITES=${SMLA_BENCH_SUITES:-v4-pro} SMLA_GPU_CHECK_BUDGET_S=300 \
  bash "$ROOT/scripts/gpu_check.sh" "$OUT_DIR/a" | tail -12

B_TREE=$(mktemp -d)
(cd "$ROOT" && tar --exclude='./build*' --exclude='./.git' --exclude='./out' -cf - .) | (cd "$B_TREE" && tar -xf -)
(cd "$B_TREE" && patch -p1 --quiet <scripts/experiments/paired-st-async.patch) || { echo "patch failed"; exit 1; }
{
  cmake -S "$B_TREE" -B "$B_TREE/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON \
    -DSMLA_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    "-DCMAKE_PREFIX_PATH=$ROOT/build-gpu/_deps/install;$ROOT/.gpu-deps" && cmake --build "$B_TREE/build-gpu" -j 16
} >"$OUT_DIR/b/build.log" 2>&1 || { echo "B build failed"; tail -20 "$OUT_DIR/b/build.log"; }
SMLA_DECODE_PAIR_HEAD_GROUPS=1 ctest --test-dir "$B_TREE/build-gpu" -L gpu --output-on-failure -j 8 --timeout 200 \
  >"$OUT_DIR/b/gpu_tests.log" 2>&1
echo "B gpu tests (pairing forced): $(grep -E 'tests passed' "$OUT_DIR/b/gpu_tests.log" | tail -1)"
for tool in memcheck racecheck; do
  SMLA_DECODE_PAIR_HEAD_GROUPS=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
    "$B_TREE/build-gpu/tests/cpp/sparse_mla_gpu_tests" \
    --gtest_filter='Formats/PortableDecode.ExtraCacheAndPages/v4_fp8:Formats/PortableDecode.LongListsSplit/v32_fp8:DecodeGraphGpu.*' \
    >"$OUT_DIR/b/$tool.log" 2>&1
  echo "B $tool rc $?: $(grep -oE 'ERROR SUMMARY: [0-9]+' "$OUT_DIR/b/$tool.log" | tail -1)"
done

bench() {  # bench BINARY PAIR JSON
  SMLA_DECODE_PAIR_HEAD_GROUPS=$2 "$1" bench --backend cuda --verify off --iters 20 --suite v32,v4-pro \
    --filter 'h_q=128 b=' --json "$3" >/dev/null 2>&1
}
for round in 1 2; do
  bench "$ROOT/build-gpu/sparse-mla" 0 "$OUT_DIR/ab/a_unpaired-$round.json"
  bench "$ROOT/build-gpu/sparse-mla" 1 "$OUT_DIR/ab/a_paired-$round.json"
  bench "$B_TREE/build-gpu/sparse-mla" 1 "$OUT_DIR/ab/b_paired-$round.json"
done
python3 - "$OUT_DIR/ab" <<'PY' | tee "$OUT_DIR/ab/ab.txt"
import json, sys
d = sys.argv[1]
def med(n):
    return {c["name"]: c["median_ms"] for c in json.load(open(f"{d}/{n}.json"))["cases"]}
sides = {s: [med(f"{s}-{r}") for r in (1, 2)] for s in ("a_unpaired", "a_paired", "b_paired")}
best = {s: {k: min(v[0][k], v[1][k]) for k in v[0]} for s, v in sides.items()}
print(f"{'case':64s} {'A unpaired':>11s} {'A paired':>9s} {'B paired':>9s}  B/Au  B/Ap")
for k, u in best["a_unpaired"].items():
    p, b = best["a_paired"][k], best["b_paired"][k]
    print(f"{k[:64]:64s} {u*1e3:9.1f}us {p*1e3:7.1f}us {b*1e3:7.1f}us  {b/u:.3f} {b/p:.3f}")
PY
bash "$ROOT/scripts/python_gpu_check.sh" "$OUT_DIR/python_gpu.log" | tail -3
