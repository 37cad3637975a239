#!/usr/bin/env bash
# The split-KV decode study on one GPU, one command: builds what it needs (test_gpu, bench_attn_decode) in
# <build-dir> unless it is already configured, runs the decode GPU tests (CudaAttnDecode.* and the every-op cases of
# attn_decode, attn_decode_partial, attn_state_merge), then the side-by-side table against PyTorch SDPA (cuDNN, FA2)
# in both orders (whole list, and per shape interleaved). Then, for the per-call fixed cost (bench/NOTES.md
# "Split-KV decode: one launch (prediction)"), ~1 minute more: ours alone with --back-to-back 20 (a lone call's
# time vs. a call's share of 20 queued ones), a sweep of the split count (RT_DECODE_SPLITS) at three shapes, and
# the interleaved table again with every op first run back to back for 200 ms (--sustain-ms: sustained clocks).
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
step fixed-cost 300 "$build/bench/bench_attn_decode" --no-ceilings --back-to-back 20 --json "$out/fixed-cost.jsonl"
cat "$out/fixed-cost.log"
# The split count: the heuristic's choice (0), then forced counts (clamped to each launch's bound; B 8 takes <= 32).
step splits-sweep 300 bash -c 'for n in 0 8 16 24 32 33 48 64 96 128; do echo "RT_DECODE_SPLITS=$n";
  RT_DECODE_SPLITS=$n "$0" --no-ceilings --only 1:32768,1:131072,8:131072 || exit 1; done' \
  "$build/bench/bench_attn_decode"
grep -E "RT_DECODE_SPLITS|^ +[18] " "$out/splits-sweep.log"
step table-sustained 900 python3 bench/decode_side_by_side.py --ours "$build/bench/bench_attn_decode" --interleave \
  --sustain-ms 200 --out "$out/decode-table-sustained.md"
cat "$out/decode-table-sustained.md" 2>/dev/null
echo "[decode_study] done at $((SECONDS - start)) s; logs in $out"
