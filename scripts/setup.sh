#!/usr/bin/env bash
# Installs the system packages the build and tests need, from Debian's registry, when any is
# missing (idempotent; a no-op on a machine that has them). Needs root or sudo for apt-get.
set -euo pipefail

# clang-format: scripts/check_format.sh (run by .ci/run) checks the C++ and CUDA files with it.
packages=(cmake ninja-build g++ make git libgtest-dev nlohmann-json3-dev libopenblas-dev
  clang-format)
# python3 (with venv) may come from pyenv rather than Debian: ask apt only when it is missing.
if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  packages+=(python3 python3-venv)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
