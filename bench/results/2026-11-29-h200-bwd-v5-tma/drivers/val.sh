#!/usr/bin/env bash
# Session driver (not project code): build all, test_gpu, ctest -L gpu, bwd v4/v5 bench.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m5 -B2 -A5 "error" $R/build.log | head -30; pack
timeout 150 build-gpu/tests/test_gpu > $R/test_gpu.log 2>&1; echo "test_gpu rc $? at $((SECONDS-S)) s"; tail -1 $R/test_gpu.log; grep "FAILED\|SKIPPED" $R/test_gpu.log | head; pack
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > $R/ctest-gpu.log 2>&1); echo "ctest rc $? at $((SECONDS-S)) s"; tail -4 $R/ctest-gpu.log; pack
B=build-gpu/bench/bench_attention
for d in ${DS:-128 64}; do for n in ${NS:-16384 4096}; do for v in ${VS:-4 5}; do
  RT_ATTN_BWD_VARIANT=$v timeout 25 $B --no-ceilings --warmup 2 --reps 5 --d $d --n $n > $R/bwd-v$v-d$d-n$n.log 2>&1
  echo "v$v d$d n$n: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-v$v-d$d-n$n.log | awk '{printf "%s/%s ", $7, $9}')"
done; done; done; pack
RT_ATTN_DETERMINISTIC=1 timeout 30 $B --no-ceilings --warmup 1 --reps 3 --d 128 --n 16384 --deterministic > $R/bwd-det.log 2>&1; echo "det v5: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-det.log | awk '{printf "%s/%s ", $7, $9}')"
RT_ATTN_BWD_VARIANT=4 timeout 30 $B --no-ceilings --warmup 1 --reps 3 --d 128 --n 16384 --deterministic > $R/bwd-det4.log 2>&1; echo "det v4: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-det4.log | awk '{printf "%s/%s ", $7, $9}')"
pack; echo "end at $((SECONDS-S)) s"
