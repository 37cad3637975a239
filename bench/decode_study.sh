#!/usr/bin/env bash
# The split-KV decode study on one GPU, one command: builds what it needs (test_gpu, bench_attn_decode) in
# <build-dir> unless it is already configured, runs the decode GPU tests (CudaAttnDecode.* and the every-op cases of
# attn_decode, attn_decode_partial, attn_state_merge), then the side-by-side table against PyTorch SDPA (cuDNN, FA2)
# in both orders (whole list, and per shape interleaved).
# usage: bench/decode_study.sh [build-dir (build-gpu)] [out-dir (decode-study)]
# Every step runs under `timeout` and logs to <out-dir>/<step>.log; a failed step is reported and the rest go on.
# PyTorch is optional (without it the table step fails and says so; the tests still run).
set -uo pipefail
build=${1:-build-gpu}
out=${2:-decode-study}
mkdir -p "$out"
start=$SECONDS
step() {  # step <name> <timeout-s> <command...>: runs it, logs to $out/<name>.log, prints the outcome
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "[decode_study] $name: rc $rc at $((SECONDS - start)) s (log $out/$name.log)"
  return $rc
}
nvidia-smi -L > "$out/gpu.txt" 2>&1
if [ ! -f "$build/build.ninja" ]; then
  step configure 300 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGTRAIN_CUDA=ON || exit 1
fi
step build 1200 cmake --build "$build" --target test_gpu bench_attn_decode -- -j "$(nproc)" || exit 1
step tests 600 "$build/tests/test_gpu" \
  --gtest_filter='CudaAttnDecode.*:Op/EveryOp.CudaMatchesCpu/attn_decode*:Op/EveryOp.CudaMatchesCpu/attn_state_merge'
tail -n 3 "$out/tests.log"
step table 900 python3 bench/decode_side_by_side.py --ours "$build/bench/bench_attn_decode" --out "$out/decode-table.md"
step table-interleaved 900 python3 bench/decode_side_by_side.py --ours "$build/bench/bench_attn_decode" --interleave \
  --out "$out/decode-table-interleaved.md"
cat "$out"/decode-table*.md 2>/dev/null
echo "[decode_study] done at $((SECONDS - start)) s; logs in $out"
