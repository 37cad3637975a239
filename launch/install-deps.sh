#!/usr/bin/env bash
# Installs the packages ringtrain builds with, only those whose files are missing (checked by what they
# provide, not by package name, so machines with a pip matplotlib or a newer CMake need no network).
# Debian 12 and Ubuntu 24.04.
#   launch/install-deps.sh                  what building, training and the tests need, and protobuf for TensorBoard
#                                           event files (optional: when it cannot be installed, ringtrain builds
#                                           without them and says so at start-up)
#   launch/install-deps.sh --prepare-data   also the `tokenizers` Python package for launch/prepare_data.py
#                                           (from PyPI with pip: Debian ships no python3-tokenizers)
set -euo pipefail
prepare_data=0
for arg in "$@"; do
  case "$arg" in
    --prepare-data) prepare_data=1 ;;
    *) echo "install-deps: unknown option '$arg' (use --prepare-data or nothing)" >&2; exit 2 ;;
  esac
done
missing=()
need() {  # need <package> <test command...>
  local pkg="$1"; shift
  "$@" >/dev/null 2>&1 || missing+=("$pkg")
}
has_header() { [ -f "/usr/include/$1" ] || [ -f "/usr/local/include/$1" ]; }
# The sweep driver (launch/sweep.sh) uses whichever python3 has the module: PATH's or the system one.
has_py_module() { python3 -c "import $1" || /usr/bin/python3 -c "import $1"; }
need build-essential command -v g++
need cmake command -v cmake
need libopenmpi-dev command -v mpicxx
need openmpi-bin command -v mpirun
need libyaml-cpp-dev has_header yaml-cpp/yaml.h
need nlohmann-json3-dev has_header nlohmann/json.hpp
need libcli11-dev has_header CLI/CLI.hpp
need libgtest-dev has_header gtest/gtest.h
need python3 command -v python3
need python3-yaml has_py_module yaml
need python3-matplotlib has_py_module matplotlib
need python3-numpy has_py_module numpy    # tests/hf (Hugging Face import/export checks), launch/prepare_data.py
if [ "$prepare_data" = 1 ]; then need python3-pip python3 -m pip --version; fi
optional=()  # TensorBoard event files (CMake's RINGTRAIN_TENSORBOARD AUTO): protobuf's library, headers and protoc
has_header google/protobuf/message_lite.h || optional+=(libprotobuf-dev)
command -v protoc >/dev/null 2>&1 || optional+=(protobuf-compiler)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
# A machine that could not install them (no network, no sudo) is not asked again on every run: the failure is
# remembered in a marker file; delete it to retry.
optional_marker="${XDG_CACHE_HOME:-$HOME/.cache}/ringtrain/install-deps-optional-failed"
if [ ${#optional[@]} -gt 0 ] && [ -f "$optional_marker" ]; then
  echo "install-deps: not retrying ${optional[*]} (TensorBoard event files; failed before, see $optional_marker;" \
       "delete it to retry)"
elif [ ${#optional[@]} -gt 0 ]; then
  echo "install-deps: installing ${optional[*]} (TensorBoard event files)"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  if ! { $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq \
         "${optional[@]}"; }; then
    echo "install-deps: could not install ${optional[*]}; ringtrain builds without TensorBoard event files" \
         "(metrics.jsonl is written either way)" >&2
    mkdir -p "$(dirname "$optional_marker")" && echo "$(date -u +%FT%TZ) ${optional[*]}" >"$optional_marker" || true
  fi
fi
if [ "$prepare_data" = 1 ] && ! has_py_module tokenizers >/dev/null 2>&1; then
  echo "install-deps: installing the tokenizers Python package (pip, user site)"
  python3 -m pip install --user tokenizers || python3 -m pip install --user --break-system-packages tokenizers
fi
