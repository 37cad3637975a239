#!/usr/bin/env bash
# Issue 18 on one H200 in one job: ZeRO and activation offload, measured where one GPU can show them.
#   bench/zero_offload.sh <out-dir>
# Needs a build with CUDA in $BUILD_DIR (default build-gpu). Writes under <out-dir>:
#   tests-gpu-zero-np{2,4}.log  zero 3 vs 0 with 2 and 4 ranks sharing the GPU (mpi communicator), device memory
#                               vs the ranks' plans, offload vs none (tests/mpi/test_gpu_zero.cpp)
#   zero{0,3}-cp2.log, zero{0,3}-cp2/metrics.jsonl
#                               the 1.41B at 64K with cp = 2, two ranks sharing the GPU, zero 0 vs zero 3: ms/step,
#                               and the time and bytes in ZeRO's gathers / reduce-scatters (zero_comm_ms, ...)
#   offload-{none,24}.log       the 1.41B at 128K on one rank, 1 warm-up + 3 steps each, offload_layers 24 vs none:
#                               step time, arena and device memory (bench_train_step)
#   plan-*.txt                  ringtrain plan --max-seq-len: the 8B shape on 8 GPUs at zero 0 / 3 with and without
#                               offload, the 1.41B on one GPU with and without offload
# Each part runs under `timeout`; a failed part is logged and the script goes on (exit status: the number of
# failed parts).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench/zero_offload.sh <out-dir>}"
build="${BUILD_DIR:-$root/build-gpu}"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "zero_offload.sh: build $build, out $out, commit $(git -C "$root" rev-parse --short HEAD)" | tee "$out/summary.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv >> "$out/summary.txt" 2>&1
failed=0
part() {  # part <name> <timeout_s> <command...>: runs, logs to <out>/<name>.log, records the status
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "part $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || failed=$((failed + 1))
}

part tests-gpu-zero-np2 300 mpirun -np 2 --oversubscribe "$build/tests/test_mpi_gpu_zero"
part tests-gpu-zero-np4 300 mpirun -np 4 --oversubscribe "$build/tests/test_mpi_gpu_zero"

# 1.41B, 64K tokens, cp = 2 on two ranks sharing the GPU (the mpi communicator: host-staged collectives).
for z in 0 3; do
  part "zero$z-cp2" 900 mpirun -np 2 --oversubscribe "$build/ringtrain" train "$root/configs/bench/gpt-1b-64k.yaml" \
    --set parallel.cp=2 --set parallel.comm=mpi --set parallel.zero=$z --set train.steps=4 --set optim.warmup_steps=1 \
    --set checkpoint.save_final=false --set checkpoint.every=0 --set train.run_dir="$out/zero$z-cp2"
done

# 1.41B, 128K tokens, one rank: every layer's block input offloaded vs none.
part offload-none 600 "$build/bench/bench_train_step" "$root/configs/bench/gpt-1b-128k.yaml" --warmup 1 --steps 3
part offload-24 600 "$build/bench/bench_train_step" "$root/configs/bench/gpt-1b-128k.yaml" --warmup 1 --steps 3 \
  --set train.offload=activations --set train.offload_layers=24

plan() {  # plan <name> <config> <flags...>
  local name="$1" cfg="$2"
  shift 2
  timeout 120 "$build/ringtrain" plan "$root/configs/$cfg" --max-seq-len "$@" > "$out/plan-$name.txt" 2>&1 ||
    failed=$((failed + 1))
}
for z in 0 3; do
  plan "8b-zero$z-none" llama3-8b-2m-8gpu.yaml --device-memory-gib 139 --host-memory-gib 560 --set parallel.zero=$z
  plan "8b-zero$z-offload" llama3-8b-2m-8gpu.yaml --device-memory-gib 139 --host-memory-gib 560 --set parallel.zero=$z \
    --set train.offload=activations
done
plan 1b-none gpt-1b-1m.yaml --host-memory-gib 128 --set train.offload=none
plan 1b-offload gpt-1b-1m.yaml --host-memory-gib 128
echo "zero_offload.sh: $failed failed part(s)" | tee -a "$out/summary.txt"
exit $failed
