#!/usr/bin/env bash
# bench/fp8_study.sh in DRY_RUN=1 over every part: each part prints its commands, and every config, script and
# program it names exists in the checkout (a program: the source it is built from).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: fp8_study_dry_run.sh <build-dir>}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$root"
DRY_RUN=1 bash bench/fp8_study.sh "$build" "$out" tests,step,chunk,docs,peer,peer8b,peerdocs,parity > "$out/dry.txt"
cat "$out/dry.txt"
fail=0
for part in tests step-1b-bf16 step-1b-fp8-tensorwise step-1b-fp8-rowwise step-8b-bf16 step-8b-fp8-tensorwise \
            chunk-bf16 chunk-fp8-auto chunk-fp8-16384 docs-corpus docs-bf16 docs-fp8-tensorwise peer peer8b peerdocs \
            parity-rowwise; do
  grep -q "^\[fp8_study\] $part: " "$out/dry.txt" || { echo "FAIL: no command for $part"; fail=1; }
done
for f in $(grep -oE '(configs|bench)/[A-Za-z0-9_./-]+\.(yaml|py)' "$out/dry.txt" | sort -u); do
  [ -f "$f" ] || { echo "FAIL: $f is named but not in the checkout"; fail=1; }
done
for prog in $(grep -oE "$build/[A-Za-z0-9_./-]+" "$out/dry.txt" | sort -u); do
  name=$(basename "$prog")
  case "$name" in  # each program's source: bench/<stem>.cpp|.cu builds bench_<stem> (bench/CMakeLists.txt)
    bench_*) src=$(ls "bench/${name#bench_}.cpp" "bench/${name#bench_}.cu" 2>/dev/null | head -1 || true) ;;
    ringtrain) src=framework/main.cpp ;;
    test_gpu) src=tests/gpu ;;
    *) src= ;;
  esac
  { [ -n "$src" ] && [ -e "$src" ]; } || { echo "FAIL: $prog names no program this checkout builds"; fail=1; }
done
[ "$fail" = 0 ] && echo "fp8_study dry run: every part's commands name files that exist"
exit "$fail"
