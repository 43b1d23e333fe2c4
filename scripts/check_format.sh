#!/usr/bin/env bash
# Checks that every C++ and CUDA file of the repository, hand-written and generated
# (`git ls-files '*.h' '*.cpp' '*.cu' '*.cuh'`), is formatted as the repository's .clang-format
# says. Lists the files that drift and exits 1; `--fix` reformats those files in place instead.
#
#   scripts/check_format.sh          check (what .ci/run does before the tests)
#   scripts/check_format.sh --fix    reformat the drifting files
#
# clang-format's output differs between major versions: the one that counts is CI's, Debian's
# `clang-format` package (installed by scripts/setup.sh). CLANG_FORMAT names another binary.
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  -h | --help)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "check_format.sh: unknown argument '$1' (expected nothing or --fix)" >&2
    exit 2
    ;;
esac
if (($# > 1)); then
  echo "check_format.sh: one argument at most, got $# ($*)" >&2
  exit 2
fi

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format.sh: '$clang_format' not found; scripts/setup.sh installs clang-format" >&2
  exit 2
fi
if [[ ! -f .clang-format ]]; then
  echo "check_format.sh: no .clang-format at the repository root ($(pwd))" >&2
  exit 2
fi

mapfile -d '' files < <(git ls-files -z -- '*.h' '*.cpp' '*.cu' '*.cuh')
drift=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue  # deleted in the work tree, not yet committed
  if ! "$clang_format" --style=file "$f" | cmp -s - "$f"; then
    drift+=("$f")
  fi
done

version=$("$clang_format" --version)
if ((${#drift[@]} == 0)); then
  echo "check_format: ${#files[@]} files formatted as .clang-format says ($version)"
  exit 0
fi
if ((fix)); then
  "$clang_format" --style=file -i "${drift[@]}"
  printf 'check_format: reformatted %s\n' "${drift[@]}"
  echo "check_format: reformatted ${#drift[@]} of ${#files[@]} files ($version)"
  exit 0
fi
printf 'check_format: not formatted: %s\n' "${drift[@]}"
echo "check_format: ${#drift[@]} of ${#files[@]} files drift from .clang-format ($version);" \
  "scripts/check_format.sh --fix reformats them" >&2
exit 1
