#!/usr/bin/env bash
# Session driver (not project code): causal windows: build, tests, bench, timeline, ncu details.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f
rm -rf /tmp/t && mkdir -p /tmp/t && tar -xf peers/tl.tar -C /tmp/t
(cd /tmp/t && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake-t.log 2>&1 && cmake --build build-gpu -j6 --target bench_attention > $R/build-t.log 2>&1; echo "tl build rc $?") &
cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j12 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; pack
timeout 150 build-gpu/tests/test_gpu --gtest_filter="*Attention*" > $R/test.log 2>&1; T=$?; echo "tests rc $T at $((SECONDS-S)) s"; tail -1 $R/test.log; grep "FAILED\|Failure" $R/test.log | head; pack
[ $T = 0 ] || exit 1
for a in "128 4096" "128 16384" "128 1024"; do set -- $a
  timeout 60 build-gpu/bench/bench_attention --no-ceilings --warmup 2 --reps 5 --d $1 --n $2 2>&1 | tail -2 >> $R/bench.log
done
cat $R/bench.log; pack
wait
(cd /tmp/t && RT_BWD_TIMELINE_DIR=$R timeout 60 build-gpu/bench/bench_attention --no-ceilings --warmup 1 --reps 2 --d 128 --n 4096 > /dev/null 2>&1); pack
timeout 200 ncu --clock-control none --set full -k regex:attn_bwd_wgmma_v5 -c 1 -o $R/prof build-gpu/bench/bench_attention --no-ceilings --warmup 0 --reps 1 --d 128 --n 4096 > $R/ncu.log 2>&1; echo "ncu rc $? at $((SECONDS-S)) s"
ncu --import $R/prof.ncu-rep --page details --csv > $R/ncu-details.csv 2>&1; rm -f $R/prof.ncu-rep; pack
echo "end at $((SECONDS-S)) s"
