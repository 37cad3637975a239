#!/usr/bin/env bash
# Session 6 driver (final job): build all, ctest -L gpu, attention grid (whole-grid order and per-cell
# interleaved for d128), ring steps, deterministic cost, fresh vs accumulate.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; nvidia-smi -L > $R/gpu.txt; pack
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 240 ctest --test-dir build-gpu -L gpu --output-on-failure > $R/ctest-gpu.log 2>&1; echo "ctest rc $? at $((SECONDS-S)) s"; grep "tests passed\|Failed\|FAILED" $R/ctest-gpu.log | head; pack
timeout 150 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --out $R/attention-table.md > $R/attention.log 2>&1; echo "sdpa rc $? at $((SECONDS-S)) s"; pack
grep "^| 128" $R/attention-table.md
timeout 120 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --dims 128 --interleave --out $R/attention-table-interleaved.md > $R/attention-interleaved.log 2>&1; echo "sdpa interleaved rc $? at $((SECONDS-S)) s"; pack
grep "^| 128" $R/attention-table-interleaved.md
timeout 40 build-gpu/bench/bench_ring_steps --cp 8 --json $R/ring_steps.jsonl > $R/ring_steps.log 2>&1; echo "ring_steps rc $? at $((SECONDS-S)) s"; grep "ratio" $R/ring_steps.log; pack
B=build-gpu/bench/bench_attention
timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d 128 --n 16384 --deterministic > $R/deterministic.log 2>&1
timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d 128 --n 16384 > $R/atomics.log 2>&1
grep "^128" $R/deterministic.log $R/atomics.log
for n in 4096 16384; do
  timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d 128 --n $n > $R/fresh-$n.log 2>&1
  timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d 128 --n $n --bwd-accumulate > $R/accumulate-$n.log 2>&1
done
grep "^128" $R/fresh-*.log $R/accumulate-*.log; pack
timeout 120 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --dims 128 --interleave --out $R/attention-table-interleaved-2.md > $R/attention-interleaved-2.log 2>&1; echo "sdpa interleaved 2 rc $? at $((SECONDS-S)) s"; pack
grep "^| 128" $R/attention-table-interleaved-2.md
echo "end at $((SECONDS-S)) s"
