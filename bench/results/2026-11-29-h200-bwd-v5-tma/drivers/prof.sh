#!/usr/bin/env bash
# Session driver (not project code): ncu of bwd v4 / v5 and of cuDNN's backward at d128 16K.
R=$OUT/r; mkdir -p $R
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cp peers/cudnn_bwd.py /tmp/f/ && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target bench_attention > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
B=build-gpu/bench/bench_attention
for v in 4 5; do RT_ATTN_BWD_VARIANT=$v timeout 25 $B --no-ceilings --warmup 2 --reps 5 --d 128 --n 16384 > $R/bench-v$v.log 2>&1; tail -3 $R/bench-v$v.log; done
echo "bench at $((SECONDS-S)) s"
NCU="timeout 100 ncu --clock-control none --import-source yes"
for v in 4 5; do
  RT_ATTN_BWD_VARIANT=$v $NCU --set full -k regex:attn_bwd_wgmma --launch-skip 1 --launch-count 1 -o $R/v$v $B --no-ceilings --warmup 1 --reps 1 --d 128 --n 16384 > $R/ncu-v$v.log 2>&1
  echo "ncu v$v rc $? at $((SECONDS-S)) s"
  ncu --import $R/v$v.ncu-rep --page details > $R/v$v-details.txt 2>&1
  ncu --import $R/v$v.ncu-rep --page source --csv --print-source sass > $R/v$v-sass.csv 2>&1
done
timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block --csv python3 cudnn_bwd.py 128 cudnn > $R/cudnn-list.csv 2>&1; echo "list rc $? at $((SECONDS-S)) s"
grep -v "^==" $R/cudnn-list.csv | awk -F'","' '{print $5" | "$(NF-2)" | "$NF}' | sort -u | head -40
$NCU --set full -k 'regex:(?i)bprop|bwd|backward|dgrad|dq|dkdv' --launch-skip 1 --launch-count 2 -o $R/cudnn python3 cudnn_bwd.py 128 cudnn > $R/ncu-cudnn.log 2>&1; echo "ncu cudnn rc $? at $((SECONDS-S)) s"
ncu --import $R/cudnn.ncu-rep --page details > $R/cudnn-details.txt 2>&1
ls -la $R; echo "end at $((SECONDS-S)) s"
