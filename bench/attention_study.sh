#!/usr/bin/env bash
# The attention study of one commit on one GPU, as bench/results/*-h200-bwd-*.md ran it (their "final" jobs):
# ctest -L gpu, the attention grid against PyTorch SDPA in the whole-grid order and per cell interleaved (d 128),
# the cp = 8 ring-step sequence, the deterministic backward's cost, and the fresh vs accumulating backward.
# usage: bench/attention_study.sh <build-dir> <out-dir>     (build first: cmake -S . -B build-gpu -G Ninja
#        -DCMAKE_BUILD_TYPE=Release && cmake --build build-gpu)
# Every step runs under `timeout` and writes its log to <out-dir>; a step that fails is reported and the rest go
# on. PyTorch is optional (without it sdpa_side_by_side.py prints ours only).
set -uo pipefail
build=${1:?usage: bench/attention_study.sh <build-dir> <out-dir>}
out=${2:?usage: bench/attention_study.sh <build-dir> <out-dir>}
mkdir -p "$out"
start=$SECONDS
step() {  # step <name> <timeout-s> <command...>: runs it, logs to $out/<name>.log, prints the outcome
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "[attention_study] $name: rc $? at $((SECONDS - start)) s"
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi -L > "$out/gpu.txt" 2>&1
step ctest-gpu 300 ctest --test-dir "$build" -L gpu --output-on-failure
step attention 200 python3 bench/sdpa_side_by_side.py --ours "$build/bench/bench_attention" --warmup 2 --reps 5 \
  --out "$out/attention-table.md"
step attention-interleaved 150 python3 bench/sdpa_side_by_side.py --ours "$build/bench/bench_attention" --warmup 2 \
  --reps 5 --dims 128 --interleave --out "$out/attention-table-interleaved.md"
step ring_steps 60 "$build/bench/bench_ring_steps" --cp 8 --json "$out/ring_steps.jsonl"
B="$build/bench/bench_attention"
step deterministic 60 "$B" --no-ceilings --warmup 2 --reps 5 --d 128 --n 16384 --deterministic
step atomics 60 "$B" --no-ceilings --warmup 2 --reps 5 --d 128 --n 16384
for n in 4096 16384; do
  step "fresh-$n" 60 "$B" --no-ceilings --warmup 2 --reps 5 --d 128 --n "$n"
  step "accumulate-$n" 60 "$B" --no-ceilings --warmup 2 --reps 5 --d 128 --n "$n" --bwd-accumulate
done
echo "[attention_study] done at $((SECONDS - start)) s; logs in $out"
