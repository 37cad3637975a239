#!/usr/bin/env bash
# Session driver (not project code): build, attention tests (fused whole forward), fwd fused vs sequence bench.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m5 -B2 -A5 "error" $R/build.log | head -30; pack
timeout 100 build-gpu/tests/test_gpu --gtest_filter='*Attention*:*Ring*:*Gpu*' > $R/test_attn.log 2>&1; echo "tests rc $? at $((SECONDS-S)) s"; tail -1 $R/test_attn.log; grep FAILED $R/test_attn.log | head -8; grep "attn whole" $R/test_attn.log | head -20; pack
B=build-gpu/bench/bench_attention
for d in 128 64; do for n in 4096 16384 1024; do for m in whole sequence; do
  F=""; [ $m = sequence ] && F=--fwd-sequence
  timeout 25 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n $F > $R/fwd-$m-d$d-n$n.log 2>&1
  echo "$m d$d n$n: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/fwd-$m-d$d-n$n.log | awk '{printf "%s/%s ", $7, $9}')"
done; done; done; pack
echo "end at $((SECONDS-S)) s"
