#!/usr/bin/env bash
# Session 6 driver (not project code): deterministic causal with one window of every pair: tests and bench.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
timeout 100 build-gpu/tests/test_gpu --gtest_filter="*Determin*:*AttentionBwdFresh*" > $R/test_det.log 2>&1; echo "tests rc $? at $((SECONDS-S)) s"; tail -1 $R/test_det.log; grep "FAILED\|Failure" $R/test_det.log | head -5; pack
B=build-gpu/bench/bench_attention
for n in 4096 16384; do
  timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d 128 --n $n --deterministic > $R/deterministic-$n.log 2>&1
  timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d 128 --n $n > $R/atomics-$n.log 2>&1
done
grep -h "^128" $R/deterministic-*.log $R/atomics-*.log; pack
echo "end at $((SECONDS-S)) s"
