#!/usr/bin/env bash
# A/B two versions of the tree in one device call (the device tool's time is scarce): the tree as
# it is (A) and the tree with PATCH applied (B), `sparse-mla bench` on both, alternating A, B, A,
# B so drift hits both alike, then B / A per case (the lower median of each side's two runs) with
# the geometric means.
#
#   git diff > ab.patch      (the change to measure; leave it untracked so it travels)
#   git stash                (or commit A first: the device gets the working tree as A)
#   scripts/gpu_ab.sh OUT_DIR ab.patch [BENCH FLAGS...]   default flags: --suite all
#   scripts/gpu_ab.sh OUT_DIR none [BENCH FLAGS...]       one binary, two environments (below)
#
# Environment:
#   SMLA_AB_A_BIN=PATH   an existing sparse-mla of A (e.g. build-gpu/sparse-mla after
#                        scripts/gpu_check.sh): A is not built again.
#   SMLA_AB_B_CHECK=1    B is built and checked by its own scripts/gpu_check.sh (GPU tests,
#                        memcheck, racecheck, synccheck on SMLA_SANITIZER_FILTER, no benchmarks) into
#                        OUT_DIR/b-check before the A/B; a failed check stops the A/B.
#                        Its budget: SMLA_AB_CHECK_BUDGET_S (default 420 s; the build takes
#                        ~60 s and the GPU tests ~125 s of it).
#   SMLA_AB_ENV="K=V ..." environment for both sides' bench runs and B's check (e.g.
#                        SMLA_DECODE_PAIR_HEAD_GROUPS=1 to force a launch choice).
#   SMLA_AB_A_ENV / SMLA_AB_B_ENV="K=V ..." environment for one side's bench runs only (with
#                        PATCH `none`, a launch choice A/B'd with one binary, e.g.
#                        SMLA_AB_A_ENV=SMLA_DECODE_RAW_STAGES=1 against the default).
# Otherwise both sides build the CLI only (Release, sm_90a) in parallel.
# Writes OUT_DIR/{a-1,b-1,a-2,b-2}.json and OUT_DIR/ab.txt. Needs .gpu-deps (carry it; see
# gpu_check.sh --prepare-deps). Used for the A/B folders in benchmarks/results/ab-*.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT_DIR=${1:?usage: gpu_ab.sh OUT_DIR PATCH [BENCH FLAGS...]}
PATCH=none
[[ $2 != none ]] && PATCH=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
shift 2
BENCH_FLAGS=("$@")
[[ ${#BENCH_FLAGS[@]} == 0 ]] && BENCH_FLAGS=(--suite all)
read -r -a AB_ENV <<<"${SMLA_AB_ENV:-}"
read -r -a A_ENV <<<"${SMLA_AB_A_ENV:-}"
read -r -a B_ENV <<<"${SMLA_AB_B_ENV:-}"
mkdir -p "$OUT_DIR"

B_TREE=$(mktemp -d)
if [[ $PATCH != none ]]; then
  (cd "$ROOT" && tar --exclude='./build*' --exclude='./.git' --exclude='./.venv' --exclude='./out' -cf - .) | (cd "$B_TREE" && tar -xf -)
  (cd "$B_TREE" && patch -p1 --quiet <"$PATCH")
fi

build() {  # build SOURCE_DIR BUILD_DIR
  bash "$ROOT/scripts/build_cli.sh" "$1" "$2" "$2.log" 8
}
BUILDS=$(mktemp -d)  # fresh per call: a warm machine keeps /tmp, and CMake refuses a moved source
pids=()
if [[ -n ${SMLA_AB_A_BIN:-} ]]; then
  A_BIN=$(cd "$(dirname "$SMLA_AB_A_BIN")" && pwd)/$(basename "$SMLA_AB_A_BIN")
else
  A_BIN=$BUILDS/a/sparse-mla
  build "$ROOT" "$BUILDS/a" & pids+=($!)
fi
if [[ $PATCH == none ]]; then
  B_BIN=$A_BIN
elif [[ ${SMLA_AB_B_CHECK:-0} == 1 ]]; then
  B_BIN=$B_TREE/build-gpu/sparse-mla
  for pid in "${pids[@]}"; do wait "$pid" || { echo "gpu_ab: build A failed"; exit 1; }; done
  pids=()
  env "${AB_ENV[@]}" SMLA_BENCH_SUITES=none SMLA_GPU_CHECK_BUDGET_S=${SMLA_AB_CHECK_BUDGET_S:-420} \
    bash "$B_TREE/scripts/gpu_check.sh" "$OUT_DIR/b-check" | tail -8 ||
    { echo "gpu_ab: B's gpu_check failed (see $OUT_DIR/b-check)"; exit 1; }
else
  B_BIN=$BUILDS/b/sparse-mla
  build "$B_TREE" "$BUILDS/b" & pids+=($!)
fi
for pid in "${pids[@]}"; do wait "$pid" || { echo "gpu_ab: a build failed"; exit 1; }; done

for round in 1 2; do
  for side in a b; do
    bin=$A_BIN side_env=("${A_ENV[@]}")
    [[ $side == b ]] && bin=$B_BIN side_env=("${B_ENV[@]}")
    env "${AB_ENV[@]}" "${side_env[@]}" "$bin" bench --backend cuda --verify off --iters 20 "${BENCH_FLAGS[@]}" \
      --json "$OUT_DIR/$side-$round.json" >/dev/null
  done
done
python3 - "$OUT_DIR" <<'EOF' | tee "$OUT_DIR/ab.txt"
import json, math, sys
out = sys.argv[1]
def medians(name):
    return {(c.get("suite"), c["name"]): c["median_ms"] for c in json.load(open(f"{out}/{name}.json"))["cases"]}
a1, a2, b1, b2 = (medians(n) for n in ("a-1", "a-2", "b-1", "b-2"))
ratios = {}
for key in a1:
    a, b = min(a1[key], a2[key]), min(b1[key], b2[key])
    ratios[key] = b / a
    print(f"{key[0] or '-':10s} {key[1][:64]:64s} A {a * 1e3:10.1f} us  B {b * 1e3:10.1f} us  B/A {b / a:.3f}")
def geomean(keys):
    keys = list(keys)
    return math.exp(sum(math.log(ratios[k]) for k in keys) / len(keys)) if keys else float("nan")
print(f"geomean B/A: all {geomean(ratios):.3f}, prefill {geomean(k for k in ratios if k[1].startswith('prefill')):.3f},"
      f" decode {geomean(k for k in ratios if k[1].startswith('decode')):.3f}")
EOF
