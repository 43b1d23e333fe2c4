#!/usr/bin/env bash
# Variants of the warp-specialised decode kernel, built with compile-time flags and timed on the
# same cases in one device call (session 14; docs/kernels/portable_sparse_decode.md):
#   scripts/experiments/warp_specialized_variants.sh OUT_DIR FILTER NAME:CUDA_FLAGS:ENV ...
# e.g. base:: split::SMLA_DECODE_WARP_SPECIALIZED=0
#      producers-only:-DSMLA_WS_BOUND=1: (with warp-specialized-bounds.patch applied)
# Builds the CLI once per distinct CUDA_FLAGS (Release, sm_90a, in parallel), runs
# `sparse-mla bench --suite tp-shards --filter FILTER` twice per variant (alternating), prints
# the lower median of the two per case and variant. Needs .gpu-deps (carried).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUTD=$1 FILTER=$2
shift 2
mkdir -p "$OUTD"
build() {  # build CUDA_FLAGS DIR
  cmake -S "$ROOT" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON \
    -DSMLA_CUDA_ARCHS=90a -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    "-DCMAKE_CUDA_FLAGS=$1" "-DCMAKE_PREFIX_PATH=$ROOT/.gpu-deps" >/dev/null &&
    cmake --build "$2" -j 6 --target sparse-mla >/dev/null
}
declare -A dirs=()
names=()
for v in "$@"; do
  IFS=: read -r name flags env <<<"$v"
  names+=("$name")
  key=$(echo "x$flags" | md5sum | cut -c1-8)
  if [[ -z ${dirs[$key]:-} ]]; then
    dirs[$key]=/tmp/wsv-$key
    build "$flags" "/tmp/wsv-$key" &
  fi
done
wait
for round in 1 2; do
  for v in "$@"; do
    IFS=: read -r name flags env <<<"$v"
    key=$(echo "x$flags" | md5sum | cut -c1-8)
    env $env "/tmp/wsv-$key/sparse-mla" bench --backend cuda --verify off --iters 20 \
      --suite tp-shards --filter "$FILTER" --json "$OUTD/$name-$round.json" >/dev/null ||
      echo "variant $name failed"
  done
done
python3 - "$OUTD" "${names[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
def med(n): return {c["name"]: c["median_ms"] for c in json.load(open(f"{out}/{n}.json"))["cases"]}
runs = {n: [med(f"{n}-{r}") for r in (1, 2)] for n in names}
print(f"{'case':58s} " + " ".join(f"{n[:14]:>14s}" for n in names) + "   (us)")
for case in runs[names[0]][0]:
    vals = [min(runs[n][0][case], runs[n][1][case]) * 1e3 for n in names]
    print(f"{case[:58]:58s} " + " ".join(f"{v:14.1f}" for v in vals))
PY
