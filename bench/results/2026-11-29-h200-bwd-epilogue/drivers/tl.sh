#!/usr/bin/env bash
# Session driver (not project code): bwd v5 per-CTA timeline (instrumented tree peers/tl.tar).
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
rm -rf /tmp/t && mkdir -p /tmp/t && tar -xf peers/tl.tar -C /tmp/t && cd /tmp/t || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; pack
for n in 4096 16384; do
RT_BWD_TIMELINE_DIR=$R timeout 60 build-gpu/bench/bench_attention --no-ceilings --warmup 2 --reps 5 --d 128 --n $n >> $R/bench.log 2>&1
done
RT_BWD_TIMELINE_DIR=$R timeout 60 build-gpu/bench/bench_attention --no-ceilings --warmup 2 --reps 5 --d 64 --n 4096 >> $R/bench.log 2>&1
cat $R/bench.log; pack
echo "end at $((SECONDS-S)) s"
