#!/usr/bin/env bash
# Session 6 driver (not project code): persistent bwd v5. Build new (test_gpu, bench_attention) and old (HEAD 7cd2f34,
# bench_attention) in parallel; SASS spill locations; attention bwd tests; A/B bench interleaved old/new.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f /tmp/a && mkdir -p /tmp/f /tmp/a && tar -xf peers/clean.tar -C /tmp/f && tar -xf peers/A.tar -C /tmp/a
(cd /tmp/a && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake-a.log 2>&1 && cmake --build build-gpu -j5 --target bench_attention > $R/build-a.log 2>&1; echo "old build rc $? at $((SECONDS-S)) s") &
cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j11 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; nvidia-smi -L > $R/gpu.txt; pack
O=$(find build-gpu -name "attn_bwd_wgmma.cu.o" | head -1)
cuobjdump -sass $O > /tmp/sass.txt 2>&1
awk '/Function :/{fn=$0} /STL|LDL|HGMMA|SETMAXREG|BAR.SYNC|BAR.ARV|SYNCS|EXIT|BRA/{print NR": "fn" :: "$0}' /tmp/sass.txt | grep "v5_kernel" | sed 's/Function : //' > $R/sass-marks.txt
wc -l $R/sass-marks.txt; pack
timeout 240 build-gpu/tests/test_gpu --gtest_filter="*AttentionWgmmaBwd*:*AttentionBwdFresh*" > $R/test_bwd.log 2>&1; echo "tests rc $? at $((SECONDS-S)) s"; tail -3 $R/test_bwd.log; grep "FAILED\|Failure" $R/test_bwd.log | head; pack
wait
A=/tmp/a/build-gpu/bench/bench_attention; B=build-gpu/bench/bench_attention
for round in 1 2; do
for d in 128 64; do for n in 4096 16384; do
  [ $d = 64 ] && [ $n = 16384 ] && continue
  echo "== round $round d $d n $n old" >> $R/ab.log; timeout 40 $A --no-ceilings --warmup 2 --reps 5 --d $d --n $n 2>&1 | grep "^ *$d " >> $R/ab.log
  echo "== round $round d $d n $n new" >> $R/ab.log; timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n 2>&1 | grep "^ *$d " >> $R/ab.log
done; done; done
echo "ab at $((SECONDS-S)) s"; pack
timeout 100 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --dims 128 --interleave --out $R/attention-table-interleaved.md > $R/attention-interleaved.log 2>&1; echo "sdpa interleaved rc $? at $((SECONDS-S)) s"; pack
grep "^| 128" $R/attention-table-interleaved.md
echo "end at $((SECONDS-S)) s"
