#!/usr/bin/env bash
# Session driver for the final H200 call (not project code): build HEAD (peers/clean.tar), GPU tests, attention
# grid side by side with SDPA, ring-step sequence, training step vs PyTorch, then ctest -L gpu.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R
pack() { tar -czf $OUT/logs.tgz -C $OUT r; }
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f || exit 1
S=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
grep -m3 -A3 "error" $R/build.log; nvidia-smi -L > $R/gpu.txt; pack
timeout 90 build-gpu/tests/test_gpu > $R/test_gpu.log 2>&1; echo "test_gpu rc $? at $((SECONDS-S)) s"; tail -1 $R/test_gpu.log; grep "FAILED\|SKIPPED" $R/test_gpu.log | head; pack
timeout 150 python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention --warmup 2 --reps 5 --out $R/attention-table.md > $R/attention.log 2>&1; echo "sdpa rc $? at $((SECONDS-S)) s"; pack
timeout 60 build-gpu/bench/bench_ring_steps --cp 8 --json $R/ring_steps.jsonl > $R/ring_steps.log 2>&1; echo "ring_steps rc $? at $((SECONDS-S)) s"; grep "ratio" $R/ring_steps.log; pack
timeout 150 python3 bench/torch_gpt_side_by_side.py --ours build-gpu/bench/bench_train_step --configs configs/gpt-125m-128k.yaml configs/bench/gpt-1b-64k.yaml --warmup 1 --steps 2 --profile --out $R/train-step-table.md > $R/train-step.log 2>&1; echo "train-step rc $? at $((SECONDS-S)) s"; tail -3 $R/train-step-table.md; pack
(cd build-gpu && timeout ${CTEST_S:-110} ctest -L gpu --output-on-failure > $R/ctest-gpu.log 2>&1); echo "ctest rc $? at $((SECONDS-S)) s"; tail -4 $R/ctest-gpu.log; pack
echo "end at $((SECONDS-S)) s"
