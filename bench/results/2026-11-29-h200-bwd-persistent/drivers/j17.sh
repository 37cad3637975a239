#!/usr/bin/env bash
# Session 6 driver (not project code): after the review mends, the bwd / fresh / finalize tests and the ring steps.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_ring_steps > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
timeout 120 build-gpu/tests/test_gpu --gtest_filter="*AttentionBwdFresh*:*Finalize*:*AttentionWgmmaBwd*D128_v5*" > $R/test_attention.log 2>&1; echo "tests rc $? at $((SECONDS-S)) s"; tail -1 $R/test_attention.log; grep "FAILED\|Failure" $R/test_attention.log | head -5; pack
timeout 60 build-gpu/bench/bench_ring_steps --cp 8 --d 128 > $R/ring_steps.log 2>&1; echo "ring rc $? at $((SECONDS-S)) s"; grep "ratio\|one by one" $R/ring_steps.log; pack
echo "end at $((SECONDS-S)) s"
