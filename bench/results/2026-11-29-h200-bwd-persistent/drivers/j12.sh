#!/usr/bin/env bash
# Session 6 driver (not project code): bwd v5 loop options (RT_EXP_BWD_OPT: 0 as committed, 1 dQ issued before dV
# completes, 3 = 1 + the next tile's scores issued during the dQ staging at D = 64): tests per option, A/B bench.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; grep C75 $R/build.log | cut -c1-200; pack
for opt in 1 3; do
  RT_EXP_BWD_OPT=$opt timeout 150 build-gpu/tests/test_gpu --gtest_filter="*AttentionWgmmaBwd*_v5*:*AttentionBwdFresh*" > $R/test_bwd_opt$opt.log 2>&1; echo "tests opt $opt rc $? at $((SECONDS-S)) s"; tail -1 $R/test_bwd_opt$opt.log; grep "FAILED\|Failure" $R/test_bwd_opt$opt.log | head -5; pack
done
B=build-gpu/bench/bench_attention
for round in 1 2; do
for d in 128 64; do for n in 4096 16384; do for opt in 0 1 3; do
  [ $d = 128 ] && [ $opt = 3 ] && continue
  echo "== round $round d $d n $n opt $opt" >> $R/ab.log; RT_EXP_BWD_OPT=$opt timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n 2>&1 | grep "^ *$d " >> $R/ab.log
done; done; done; done
echo "ab at $((SECONDS-S)) s"; pack
echo "end at $((SECONDS-S)) s"
