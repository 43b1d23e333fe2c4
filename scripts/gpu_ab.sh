#!/usr/bin/env bash
# A/B (or A/B/C/...) versions of the tree in one device call (the device tool's time is scarce):
# the tree as it is (A) and the tree with each PATCH applied (B, C, ...), `sparse-mla bench` on
# all, round by round (A, B, C, A, B, C, ...) so drift hits every side alike, then each side's
# time per case (the lower median of its rounds) against A and against the side before it, with
# the geometric means.
#
#   git diff > ab.patch      (the change to measure; leave it untracked so it travels)
#   git stash                (or commit A first: the device gets the working tree as A)
#   scripts/gpu_ab.sh OUT_DIR ab.patch [BENCH FLAGS...]        default flags: --suite all
#   scripts/gpu_ab.sh OUT_DIR b.patch c.patch [BENCH FLAGS...] three versions (each patch on A)
#   scripts/gpu_ab.sh OUT_DIR none [BENCH FLAGS...]            one binary, two environments
#   scripts/gpu_ab.sh OUT_DIR none none none [BENCH FLAGS...]  one binary, four (a sweep of a knob:
#                        SMLA_AB_A_ENV, SMLA_AB_B_ENV, ... say each side's settings)
#
# Environment:
#   SMLA_AB_A_BIN=PATH   an existing sparse-mla of A (e.g. build-gpu/sparse-mla after
#                        scripts/gpu_check.sh): A is not built again. SMLA_AB_B_BIN, SMLA_AB_C_BIN,
#                        ... likewise for the patched sides.
#   SMLA_AB_B_CHECK=1    the last side is built and checked by its own scripts/gpu_check.sh (GPU
#                        tests, memcheck, racecheck, synccheck on SMLA_SANITIZER_FILTER, no
#                        benchmarks) into OUT_DIR/b-check before the A/B; a failed check stops it.
#                        Its budget: SMLA_AB_CHECK_BUDGET_S (default 420 s; the build takes
#                        ~60 s and the GPU tests ~125 s of it).
#   SMLA_AB_ROUNDS=N     rounds of every side (default 2).
#   SMLA_AB_ENV="K=V ..." environment for every side's bench runs and the check (e.g.
#                        SMLA_DECODE_PAIR_HEAD_GROUPS=1 to force a launch choice).
#   SMLA_AB_A_ENV / SMLA_AB_B_ENV / ... ="K=V ..." environment for one side's bench runs only
#                        (with PATCH `none`, a launch choice A/B'd with one binary, e.g.
#                        SMLA_AB_A_ENV=SMLA_DECODE_RAW_STAGES=1 against the default).
# Otherwise every side builds the CLI only (Release, sm_90a), all at once.
# Writes OUT_DIR/{a,b,...}-{1..N}.json and OUT_DIR/ab.txt. Needs .gpu-deps (carry it; see
# gpu_check.sh --prepare-deps). Used for the A/B folders in benchmarks/results/.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT_DIR=${1:?usage: gpu_ab.sh OUT_DIR PATCH [PATCH...] [BENCH FLAGS...]}
shift
PATCHES=()
while [[ $# -gt 0 && $1 != -* ]]; do
  if [[ $1 == none ]]; then
    PATCHES+=(none)
  else
    PATCHES+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")")
  fi
  shift
done
if [[ ${#PATCHES[@]} == 0 ]]; then
  echo "usage: gpu_ab.sh OUT_DIR PATCH [PATCH...] [BENCH FLAGS...]"
  exit 2
fi
nones=$(printf '%s\n' "${PATCHES[@]}" | grep -cx none || true)
if [[ $nones != 0 && $nones != "${#PATCHES[@]}" ]]; then
  echo "gpu_ab: PATCH none (one binary, several environments) takes no real patch beside it"; exit 2
fi
BENCH_FLAGS=("$@")
[[ ${#BENCH_FLAGS[@]} == 0 ]] && BENCH_FLAGS=(--suite all)
ROUNDS=${SMLA_AB_ROUNDS:-2}
CHECK_LAST=0  # SMLA_AB_B_CHECK: the last side's gpu_check (not with PATCH none)
[[ ${SMLA_AB_B_CHECK:-0} == 1 && ${PATCHES[0]} != none ]] && CHECK_LAST=1
read -r -a AB_ENV <<<"${SMLA_AB_ENV:-}"
SIDES=(a)
for i in "${!PATCHES[@]}"; do SIDES+=("$(printf "\\x$(printf %x $((98 + i)))")"); done  # b, c, ...
LAST=${SIDES[-1]}
mkdir -p "$OUT_DIR"

upper() { tr '[:lower:]' '[:upper:]' <<<"$1"; }
side_var() { local name="SMLA_AB_$(upper "$1")_$2"; echo "${!name:-}"; }  # side_var b BIN

build() {  # build SOURCE_DIR BUILD_DIR
  bash "$ROOT/scripts/build_cli.sh" "$1" "$2" "$2.log" 8
}
BUILDS=$(mktemp -d)  # fresh per call: a warm machine keeps /tmp, and CMake refuses a moved source
declare -A BIN TREE
pids=()
TREE[a]=$ROOT
for i in "${!PATCHES[@]}"; do
  side=${SIDES[$((i + 1))]}
  if [[ ${PATCHES[$i]} == none ]]; then
    TREE[$side]=$ROOT
    continue
  fi
  TREE[$side]=$(mktemp -d)
  (cd "$ROOT" && tar --exclude='./build*' --exclude='./.git' --exclude='./.venv' --exclude='./out' \
    -cf - .) | (cd "${TREE[$side]}" && tar -xf -)
  (cd "${TREE[$side]}" && patch -p1 --quiet <"${PATCHES[$i]}")
done
for side in "${SIDES[@]}"; do
  given=$(side_var "$side" BIN)
  if [[ -n $given ]]; then
    BIN[$side]=$(cd "$(dirname "$given")" && pwd)/$(basename "$given")
  elif [[ $side != a && ${PATCHES[0]} == none ]]; then
    BIN[$side]=${BIN[a]}
  elif [[ $side == "$LAST" && $CHECK_LAST == 1 ]]; then
    BIN[$side]=${TREE[$side]}/build-gpu/sparse-mla  # built by its check below
  else
    BIN[$side]=$BUILDS/$side/sparse-mla
    build "${TREE[$side]}" "$BUILDS/$side" & pids+=($!)
  fi
done
for pid in "${pids[@]}"; do
  wait "$pid" || { echo "gpu_ab: a build failed (logs in $BUILDS)"; exit 1; }
done
if [[ $CHECK_LAST == 1 && -z $(side_var "$LAST" BIN) ]]; then
  env "${AB_ENV[@]}" SMLA_BENCH_SUITES=none SMLA_GPU_CHECK_BUDGET_S=${SMLA_AB_CHECK_BUDGET_S:-420} \
    bash "${TREE[$LAST]}/scripts/gpu_check.sh" "$OUT_DIR/b-check" | tail -8 ||
    { echo "gpu_ab: $LAST's gpu_check failed (see $OUT_DIR/b-check)"; exit 1; }
fi

for round in $(seq 1 "$ROUNDS"); do
  for side in "${SIDES[@]}"; do
    read -r -a side_env <<<"$(side_var "$side" ENV)"
    env "${AB_ENV[@]}" "${side_env[@]}" "${BIN[$side]}" bench --backend cuda --verify off \
      --iters 20 "${BENCH_FLAGS[@]}" --json "$OUT_DIR/$side-$round.json" >/dev/null
  done
done
python3 - "$OUT_DIR" "$ROUNDS" "${SIDES[@]}" <<'EOF' | tee "$OUT_DIR/ab.txt"
import json, math, sys
out, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def medians(name):
    cases = json.load(open(f"{out}/{name}.json"))["cases"]
    return {(c.get("suite"), c["name"]): c["median_ms"] for c in cases}
runs = {s: [medians(f"{s}-{r}") for r in range(1, rounds + 1)] for s in sides}
best = {s: {k: min(run[k] for run in runs[s]) for k in runs[s][0]} for s in sides}
pairs = [(s, "a") for s in sides[1:]] + [(s, p) for p, s in zip(sides[1:], sides[2:])]
ratios = {pair: {} for pair in pairs}
for key in best["a"]:
    cells = "  ".join(f"{s.upper()} {best[s][key] * 1e3:10.1f} us" for s in sides)
    for s, p in pairs:
        ratios[(s, p)][key] = best[s][key] / best[p][key]
    shown = "  ".join(f"{s.upper()}/{p.upper()} {ratios[(s, p)][key]:.3f}" for s, p in pairs)
    print(f"{key[0] or '-':10s} {key[1][:64]:64s} {cells}  {shown}")
def geomean(r, keys):
    keys = list(keys)
    return math.exp(sum(math.log(r[k]) for k in keys) / len(keys)) if keys else float("nan")
for s, p in pairs:
    r = ratios[(s, p)]
    print(f"geomean {s.upper()}/{p.upper()}: all {geomean(r, r):.3f}, "
          f"prefill {geomean(r, (k for k in r if k[1].startswith('prefill'))):.3f}, "
          f"decode {geomean(r, (k for k in r if k[1].startswith('decode'))):.3f}")
EOF
