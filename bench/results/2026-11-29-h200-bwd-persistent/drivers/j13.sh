#!/usr/bin/env bash
# Session 6 driver (not project code): causal window budget A/B (RT_EXP_BWD_WINDOW_MB 32 as committed, 16, 8, 1 =
# pair by pair), and the ring-step sequence with its new breakdown.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target bench_attention bench_ring_steps > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; pack
B=build-gpu/bench/bench_attention
for round in 1 2; do
for d in 128 64; do for n in 4096 16384; do for mb in 32 16 8 1; do
  echo "== round $round d $d n $n window_mb $mb" >> $R/ab.log; RT_EXP_BWD_WINDOW_MB=$mb timeout 40 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n 2>&1 | grep "^ *$d .* yes " >> $R/ab.log
done; done; done; done
echo "ab at $((SECONDS-S)) s"; pack
timeout 120 build-gpu/bench/bench_ring_steps --cp 8 --json $R/ring_steps.jsonl > $R/ring_steps.log 2>&1; echo "ring_steps rc $? at $((SECONDS-S)) s"; grep "ratio\|one by one" $R/ring_steps.log; pack
echo "end at $((SECONDS-S)) s"
