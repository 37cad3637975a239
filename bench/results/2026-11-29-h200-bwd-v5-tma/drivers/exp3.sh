#!/usr/bin/env bash
# Session driver (not project code): build, attention tests, bwd v5 rotate on/off, fwd with the shfl change.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m5 -B2 -A5 "error" $R/build.log | head -30; pack
timeout 100 build-gpu/tests/test_gpu --gtest_filter='*Attention*:*Ring*' > $R/test_attn.log 2>&1; echo "attention tests rc $? at $((SECONDS-S)) s"; tail -1 $R/test_attn.log; grep FAILED $R/test_attn.log | head -5; pack
B=build-gpu/bench/bench_attention
for d in ${DS:-128 64}; do for n in ${NS:-16384 4096}; do for rot in 1 0; do
  RT_ATTN_BWD_ROTATE=$rot timeout 25 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n > $R/bwd-rot$rot-d$d-n$n.log 2>&1
  echo "rot$rot d$d n$n: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-rot$rot-d$d-n$n.log | awk '{printf "%s/%s ", $7, $9}')"
done; done; done; pack
echo "end at $((SECONDS-S)) s"
