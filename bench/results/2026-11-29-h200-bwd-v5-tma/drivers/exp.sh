#!/usr/bin/env bash
# Session driver (not project code): build HEAD+diff tree, bwd tests, bwd v4/v5 bench, ncu of v5 / v4.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m5 -B2 -A5 "error" $R/build.log | head -30; pack
timeout 60 build-gpu/tests/test_gpu --gtest_filter='CudaAttentionWgmmaBwd*' > $R/test_bwd.log 2>&1; echo "bwd tests rc $? at $((SECONDS-S)) s"; tail -2 $R/test_bwd.log; grep FAILED $R/test_bwd.log | head -5; pack
B=build-gpu/bench/bench_attention
for d in 128 64; do for n in 16384 4096; do for v in 4 5; do
  RT_ATTN_BWD_VARIANT=$v timeout 25 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n > $R/bwd-v$v-d$d-n$n.log 2>&1
  echo "v$v d$d n$n: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-v$v-d$d-n$n.log | awk '{printf "%s/%s ", $7, $9}')"
done; done; done; pack
for v in ${PROF:-5}; do
  RT_ATTN_BWD_VARIANT=$v timeout 100 ncu --clock-control none --import-source yes --set full -k regex:attn_bwd_wgmma --launch-skip 1 --launch-count 1 -o $R/v$v $B --no-ceilings --warmup 1 --reps 1 --d 128 --n 16384 > $R/ncu-v$v.log 2>&1
  echo "ncu v$v rc $? at $((SECONDS-S)) s"
  ncu --import $R/v$v.ncu-rep --page details > $R/v$v-details.txt 2>&1
  ncu --import $R/v$v.ncu-rep --page source --csv --print-source sass > $R/v$v-sass.csv 2>&1; rm -f $R/v$v.ncu-rep
done; pack
echo "end at $((SECONDS-S)) s"
