#!/usr/bin/env bash
# Session driver for the final H200 call (not project code): build HEAD (peers/clean.tar), GPU tests, bwd v5
# check (opt-in variant), attention grid side by side with SDPA, ring-step sequence, training step vs PyTorch.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu bench_attention bench_ring_steps bench_train_step > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; nvidia-smi -L > $R/gpu.txt; pack
timeout 90 build-gpu/tests/test_gpu > $R/test_gpu.log 2>&1; echo "test_gpu rc $? at $((SECONDS-S)) s"; tail -2 $R/test_gpu.log; grep "FAILED\|SKIPPED" $R/test_gpu.log | head; pack
RT_TEST_ATTN_BWD_V5=1 timeout 60 build-gpu/tests/test_gpu --gtest_filter='CudaAttentionWgmmaBwd*' > $R/test_bwd_v5.log 2>&1; V5T=$?; echo "bwd v5 tests rc $V5T at $((SECONDS-S)) s"; tail -2 $R/test_bwd_v5.log; grep FAILED $R/test_bwd_v5.log | head -5; pack
WIN=0
if [ $V5T = 0 ]; then
  WIN=1
  for d in 128 64; do for v in 4 5; do
    RT_ATTN_BWD_VARIANT=$v timeout 25 build-gpu/bench/bench_attention --no-ceilings --warmup 2 --reps 5 --d $d --n 16384 > $R/bwd-v$v-d$d.log 2>&1
    echo "v$v d$d: $(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-v$v-d$d.log | awk '{printf "%s/%s ", $7, $9}')"
  done
  b4=$(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-v4-d$d.log | awk '{s+=$9} END {print s+0}')
  b5=$(grep -E '^ *[0-9]+ +[0-9]+ ' $R/bwd-v5-d$d.log | awk '{s+=$9} END {print s+0}')
  awk "BEGIN {exit !($b5 > $b4)}" || WIN=0; done
fi
echo "bwd v5 wins: $WIN at $((SECONDS-S)) s"; pack
if [ $WIN = 1 ]; then
  export RT_ATTN_BWD_VARIANT=5
  timeout 90 build-gpu/tests/test_gpu --gtest_filter='*Attention*:*Gpu*' > $R/test_gpu_bwd_v5.log 2>&1; echo "test_gpu with bwd v5 rc $? at $((SECONDS-S)) s"; tail -1 $R/test_gpu_bwd_v5.log; grep FAILED $R/test_gpu_bwd_v5.log | head -5
  [ "$(grep -c FAILED $R/test_gpu_bwd_v5.log)" = 0 ] || { unset RT_ATTN_BWD_VARIANT; echo "bwd v5 not used"; }
fi; pack
timeout 150 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --out $R/attention-table.md > $R/attention.log 2>&1; echo "sdpa rc $? at $((SECONDS-S)) s"; pack
timeout 60 build-gpu/bench/bench_ring_steps --cp 8 --json $R/ring_steps.jsonl > $R/ring_steps.log 2>&1; echo "ring_steps rc $? at $((SECONDS-S)) s"; grep "ratio" $R/ring_steps.log; pack
timeout 150 python3 bench/torch_gpt_side_by_side.py --ours build-gpu/bench/bench_train_step --configs configs/gpt-125m-128k.yaml configs/bench/gpt-1b-64k.yaml --warmup 1 --steps 2 --profile --out $R/train-step-table.md > $R/train-step.log 2>&1; echo "train-step rc $? at $((SECONDS-S)) s"; tail -3 $R/train-step-table.md; pack
if [ $((SECONDS-S)) -lt ${LONG_BEFORE:-330} ]; then
  timeout 100 python3 bench/torch_gpt_side_by_side.py --ours build-gpu/bench/bench_train_step --configs configs/bench/gpt-1b-128k.yaml --warmup 0 --steps 1 --out $R/train-step-128k-table.md > $R/train-step-128k.log 2>&1; echo "train-step 128k rc $? at $((SECONDS-S)) s"; tail -1 $R/train-step-128k-table.md; pack
fi
echo "end at $((SECONDS-S)) s, RT_ATTN_BWD_VARIANT=${RT_ATTN_BWD_VARIANT:-default}"
