#!/usr/bin/env bash
# Session driver (not project code): A/B of the causal windows (A = 6cbc6b2 without, C = 39ca8b0 with), interleaved.
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
S=$SECONDS
for x in A C; do
  (rm -rf /tmp/$x && mkdir -p /tmp/$x && tar -xf peers/$x.tar -C /tmp/$x && cd /tmp/$x && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake-$x.log 2>&1 && cmake --build build-gpu -j8 --target bench_attention > $R/build-$x.log 2>&1; echo "build $x rc $?") &
done
wait; echo "built at $((SECONDS-S)) s"
for round in 1 2 3; do
  for n in 4096 16384 1024; do
    for x in A C; do
      /tmp/$x/build-gpu/bench/bench_attention --no-ceilings --warmup 2 --reps 5 --d 128 --n $n 2>&1 | tail -2 | sed "s/^/$x r$round /" >> $R/ab.log
    done
  done
done
sort -k1,1 -k4,4n -k7,7 $R/ab.log; pack
echo "end at $((SECONDS-S)) s"
