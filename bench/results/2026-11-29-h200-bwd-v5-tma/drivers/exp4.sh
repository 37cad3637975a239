#!/usr/bin/env bash
# Session driver (not project code): build, bwd tests with PIPE 0/1, bwd v5 PIPE 0/1 bench.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m5 -B2 -A5 "error" $R/build.log | head -30; pack
for pp in 1 0; do RT_ATTN_BWD_PIPE=$pp timeout 100 build-gpu/tests/test_gpu --gtest_filter='*Attention*:*Ring*' > $R/test_attn_pipe$pp.log 2>&1; echo "attention tests pipe$pp rc $? at $((SECONDS-S)) s"; tail -1 $R/test_attn_pipe$pp.log; grep FAILED $R/test_attn_pipe$pp.log | head -5; done; pack
B=build-gpu/bench/bench_attention
for d in ${DS:-128 64}; do for n in ${NS:-16384 4096}; do for pp in 1 0; do
  RT_ATTN_BWD_PIPE=$pp timeout 25 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n > $R/bwd-pipe$pp-d$d-n$n.log 2>&1
  echo "pipe$pp d$d n$n: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-pipe$pp-d$d-n$n.log | awk '{printf "%s/%s ", $7, $9}')"
done; done; done; pack
echo "end at $((SECONDS-S)) s"
