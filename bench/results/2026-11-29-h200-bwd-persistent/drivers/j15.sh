#!/usr/bin/env bash
# Session 6 driver (not project code): sustained-load side-by-side (each op 2 s back to back before timing, per
# cell ours then PyTorch), with nvidia-smi clocks / power / temperature every 200 ms.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 200 > $R/smi.csv 2>&1 &
SMI=$!
for d in 128 64; do
  echo "d$d $(date +%T.%N)" >> $R/marks
  timeout 200 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --dims $d --interleave --sustain-ms 2000 --out $R/attention-table-sustained-d$d.md > $R/attention-sustained-d$d.log 2>&1; echo "sustained d$d rc $? at $((SECONDS-S)) s"; pack
  grep "^| $d" $R/attention-table-sustained-d$d.md
done
echo "end $(date +%T.%N)" >> $R/marks
kill $SMI; pack
echo "end at $((SECONDS-S)) s"
