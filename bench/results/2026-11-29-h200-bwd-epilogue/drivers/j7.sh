#!/usr/bin/env bash
# Session driver (not project code): why d128 4K bwd is slower inside the grid: clocks, order.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $R/smi.csv 2>&1 &
SMI=$!
B=build-gpu/bench/bench_attention
echo "iso1 $(date +%T.%N)" >> $R/marks; $B --no-ceilings --warmup 2 --reps 5 --d 128 --n 4096 > $R/iso1.log 2>&1
echo "grid $(date +%T.%N)" >> $R/marks; $B --warmup 2 --reps 5 > $R/grid.log 2>&1
echo "iso2 $(date +%T.%N)" >> $R/marks; $B --no-ceilings --warmup 2 --reps 5 --d 128 --n 4096 > $R/iso2.log 2>&1
echo "d128 $(date +%T.%N)" >> $R/marks; $B --no-ceilings --warmup 2 --reps 5 --d 128 > $R/d128.log 2>&1
echo "rep20 $(date +%T.%N)" >> $R/marks; $B --no-ceilings --warmup 2 --reps 20 --d 128 --n 4096 > $R/rep20.log 2>&1
echo "end $(date +%T.%N)" >> $R/marks
kill $SMI
for f in iso1 grid iso2 d128 rep20; do echo "== $f"; grep "^128 \+4096" $R/$f.log; done
pack
echo "end at $((SECONDS-S)) s"
