#!/usr/bin/env bash
# Session driver (not project code): the dK/dV epilogue change: build, attention tests, SDPA grid, ring steps.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention bench_ring_steps > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; nvidia-smi -L > $R/gpu.txt; pack
timeout 60 build-gpu/tests/test_gpu --gtest_filter='*Attention*' > $R/test_attention.log 2>&1; T=$?; echo "attention tests rc $T at $((SECONDS-S)) s"; tail -1 $R/test_attention.log; grep "FAILED" $R/test_attention.log | head; pack
[ $T = 0 ] || exit 1
timeout 100 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --out $R/attention-table.md > $R/attention.log 2>&1; echo "sdpa rc $? at $((SECONDS-S)) s"; pack
timeout 30 build-gpu/bench/bench_ring_steps --cp 8 --json $R/ring_steps.jsonl > $R/ring_steps.log 2>&1; echo "ring_steps rc $? at $((SECONDS-S)) s"; grep "ratio" $R/ring_steps.log; pack
echo "end at $((SECONDS-S)) s"
