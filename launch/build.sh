#!/usr/bin/env bash
# Configures and builds ringtrain into build/ (override with BUILD_DIR). Extra args go to cmake.
#   launch/build.sh [--target NAME]... [cmake configure args]
# Without --target it builds everything (the trainer, the tests, the benchmarks); with --target only those targets
# and what they link (launch/quickstart.sh builds the trainer alone: --target ringtrain).
# An existing build is re-configured when an option given here (-DKEY=VALUE) differs from its cache, and says so:
# launch/test.sh's -DRINGTRAIN_DEV_KERNELS=ON after launch/quickstart.sh's plain build turns the kernel lab on.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cache="$build/CMakeCache.txt"
targets=()   # --target NAME: what `cmake --build` builds (none: all)
args=()      # the rest: cmake configure arguments
while [ $# -gt 0 ]; do
  case "$1" in
    --target)
      [ $# -ge 2 ] || { echo "build.sh: --target needs a target name (e.g. --target ringtrain)" >&2; exit 2; }
      targets+=(--target "$2"); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- ${args[@]+"${args[@]}"}
configure=0
if [ ! -f "$cache" ]; then
  configure=1
else
  for arg in "$@"; do
    case "$arg" in
      -D*=*)
        kv="${arg#-D}"; key="${kv%%=*}"; value="${kv#*=}"; key="${key%%:*}"  # -DKEY[:TYPE]=VALUE
        cached="$(sed -n "s/^${key}:[A-Z]*=//p" "$cache" | head -n 1)"
        if [ "$cached" != "$value" ]; then
          echo "build.sh: re-configuring $build: $key=${value} (the cache has '${cached}')"
          configure=1
        fi
        ;;
      *) configure=1 ;;  # any other cmake argument: pass it on
    esac
  done
fi
if [ "$configure" = 1 ]; then
  if [ -f "$cache" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"   # keeps the cache's generator
  else
    cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
  fi
fi
cmake --build "$build" -j "$(nproc)" ${targets[@]+"${targets[@]}"}
