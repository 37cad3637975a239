#!/usr/bin/env bash
# Session driver (not project code): build, bwd tests, bench, timeline.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f
rm -rf /tmp/t && mkdir -p /tmp/t && tar -xf peers/tl.tar -C /tmp/t
(cd /tmp/t && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake-t.log 2>&1 && cmake --build build-gpu -j8 --target bench_attention > $R/build-t.log 2>&1; echo "tl build rc $?") &
cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j12 --target test_gpu bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; pack
timeout 90 build-gpu/tests/test_gpu --gtest_filter="${TESTS:-*Attention*}" > $R/test.log 2>&1; T=$?; echo "tests rc $T at $((SECONDS-S)) s"; tail -1 $R/test.log; grep "FAILED\|Failure" $R/test.log | head; pack
for a in "128 4096" "128 16384" "64 4096"; do set -- $a
  timeout 60 build-gpu/bench/bench_attention --no-ceilings --warmup 2 --reps 5 --d $1 --n $2 2>&1 | tail -2 >> $R/bench.log
done
cat $R/bench.log; pack
wait
cd /tmp/t
for n in ${TLN:-4096}; do RT_BWD_TIMELINE_DIR=$R timeout 60 build-gpu/bench/bench_attention --no-ceilings --warmup 1 --reps 2 --d 128 --n $n > /dev/null 2>&1; done
ls $R; pack
echo "end at $((SECONDS-S)) s"
