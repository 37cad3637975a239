#!/usr/bin/env bash
# bench/multi_gpu.sh --dry-run (the 8-GPU node-day script, MULTI_GPU_GPUS=8) with this build as BUILD_DIR: every part
# prints its command, every script, config and file of the checkout it names exists, and every program it names is
# one this checkout builds: its source is there and this build's generator files have the target (a CUDA-only
# program, a .cu source, is checked in a CUDA build only).
#   multi_gpu_dry_run.sh <build-dir> <cuda: ON|OFF>
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: multi_gpu_dry_run.sh <build-dir> <ON|OFF>}" && pwd)
cuda=${2:?usage: multi_gpu_dry_run.sh <build-dir> <ON|OFF>}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$root"
MULTI_GPU_GPUS=8 BUILD_DIR="$build" bash bench/multi_gpu.sh --dry-run "$out/node" > "$out/dry.txt"
cat "$out/dry.txt"
fail=0
for part in tests-nccl-ring tests-nccl-model-grid tests-nccl-ring-gather tests-nccl-fp8-grid \
            tests-nccl-ring-gather-flags ring-attention e2e-cp1 e2e-cp8 e2e-cp8-fp8 zero3-gather-bf16 zero3-gather-fp8 \
            e2e-cp8-u2 e2e-cp8-u4 e2e-cp8-u8 doc-cp-e2e doc-flags-flags-off doc-flags-m4 doc-flags-m8 doc-flags-m16 \
            doc-flags-list-off doc-flags-summary doc-steps-m0 doc-steps-m4 doc-steps-m8 doc-steps-m16 plan-llama3-8b; do
  grep -q "^part $part ([0-9]* s): " "$out/dry.txt" || { echo "FAIL: no command for part $part"; fail=1; }
done
# The checkout's files: every path under the root outside the build directory (the outputs live under $out).
for f in $(grep -oE "$root/[A-Za-z0-9_./-]+" "$out/dry.txt" | grep -v "^$build/" | sort -u); do
  [ -e "$f" ] || { echo "FAIL: ${f#"$root"/} is named but not in the checkout"; fail=1; }
done
# The programs: each under the build directory, built from a source this checkout has, a target of this build.
if [ -f "$build/build.ninja" ]; then generator_file="$build/build.ninja"; else generator_file="$build/Makefile"; fi
progs=$(grep -oE "$build/[A-Za-z0-9_./-]+" "$out/dry.txt" | sort -u || true)
[ -n "$progs" ] || { echo "FAIL: no program under $build named"; fail=1; }
for prog in $progs; do
  rel=${prog#"$build"/} name=$(basename "$prog")
  case "$rel" in  # the source each is built from (bench/CMakeLists.txt, tests/CMakeLists.txt, CMakeLists.txt)
    bench/bench_*) src=$(ls "bench/${name#bench_}.cpp" "bench/${name#bench_}.cu" 2>/dev/null | head -1 || true) ;;
    tests/test_mpi_*) src=tests/mpi/test_${name#test_mpi_}.cpp ;;
    tests/test_gpu) src=tests/gpu ;;
    ringtrain) src=framework/main.cpp ;;
    *) src= ;;
  esac
  if [ -z "$src" ] || [ ! -e "$src" ]; then
    echo "FAIL: $rel names no program this checkout builds (no source${src:+ $src})"
    fail=1
    continue
  fi
  [ "$cuda" != ON ] && [ "${src%.cu}" != "$src" ] && continue  # a CUDA program; this build has no CUDA
  # Ninja: the output's build statement; Makefiles: the target's rule.
  if ! grep -qE "^build $rel:|^$name:" "$generator_file"; then
    echo "FAIL: $rel is not a target of the build in $build ($src)"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "multi_gpu dry run: every part's commands name scripts, configs and programs that exist"
exit "$fail"
