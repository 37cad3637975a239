#!/usr/bin/env bash
# Issue 8 in one job on a node with several GPUs: every rank on its own GPU, NCCL between them.
#   bench/multi_gpu.sh <out-dir> [steps_e2e]
# Needs a build with CUDA in $BUILD_DIR (default build-gpu). Writes under <out-dir>:
#   topo.txt                  nvidia-smi topology (NVLink / PCIe between the GPUs)
#   tests-nccl.log            the multi-rank GPU suites with RINGTRAIN_TEST_COMM=nccl on -np <GPUs>:
#                             ring attention vs one GPU and fp64 (cp = 1, 2, 4, 8 up to the GPU count),
#                             the whole model on dp/cp/tp grids vs one GPU, packed documents on both schemes of
#                             parallel.cp_scheme (ring, gather) vs the CPU and one GPU
#   ring-attention.{log,jsonl} bench_ring_attention: weak scaling, 8K/16K/32K tokens per GPU, cp = 1..GPUs,
#                             zigzag vs contiguous, exposed communication per ring step
#   e2e-cp<N>.log, e2e-cp<N>/metrics.jsonl  the 1.41B model (configs/gpt-1b-64k.yaml) at 64K tokens per GPU:
#                             cp = 1 on one GPU and cp = <GPUs> on all, same job, tok/s per GPU and MFU
#   e2e-cp<N>-u<u>.log, ...   the same on all GPUs with parallel.cp_a2a = 2, 4, <GPUs> (the hybrid ring x all-to-all;
#                             the step line's a2a_exposed_ms beside comm_exposed_ms)
#   doc-cp-e2e.log, doc-cp<GPUs>/summary.md
#                             bench/doc_cp_e2e.sh: the 1.41B model on packed documents (the Python standard library's
#                             .py files, byte-level, ~8 MB) at 64K tokens per GPU on all GPUs, once per
#                             parallel.cp_scheme (ring, gather, auto): ms/step, attn_ms, comm_exposed_ms, the share
#                             of steps that ran the gather and the first step's loss per scheme (runs in doc-cp<GPUs>/)
#   plan-llama3-8b.log        the Llama-3-8B shape at ZeRO 3: the longest seq_len the plan allows on this node
#   e2e-cp<N>-fp8.log, ...    precision fp8 (tensorwise) on all GPUs beside e2e-cp<N> (bf16): the FP8 step's gain with
#                             the amaxes reduced over NCCL; tests-nccl-fp8-grid: fp8 grids against one GPU (issue 44)
#   zero3-gather-{bf16,fp8}.log, zero3-gather-*/metrics.jsonl
#                             the 336M parity model in fp8 at ZeRO 3 over NCCL on all GPUs, the weight gather in bf16
#                             and in E4M3 (fp8.zero3_gather): the same losses, zero_gathered_gib and zero_comm_ms
# Each part runs under `timeout`; a failed part is logged and the script goes on (exit status: the number of
# failed parts).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench/multi_gpu.sh <out-dir> [steps_e2e]}"
steps="${2:-4}"
build="${BUILD_DIR:-$root/build-gpu}"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
gpus="$(nvidia-smi -L | grep -c '^GPU')"
[ "$gpus" -ge 2 ] || { echo "multi_gpu.sh: $gpus GPU(s) visible; this job needs at least 2" >&2; exit 2; }
echo "multi_gpu.sh: $gpus GPUs, build $build, out $out" | tee "$out/summary.txt"
nvidia-smi topo -m > "$out/topo.txt" 2>&1
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

export RINGTRAIN_TEST_COMM=nccl
part tests-nccl-ring 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_ring_attention"
part tests-nccl-model-grid 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_model_grid"
part tests-nccl-ring-gather 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_ring_gather"  # packed documents, both schemes
part tests-nccl-fp8-grid 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_fp8_grid"  # precision fp8 on the grids
unset RINGTRAIN_TEST_COMM

part ring-attention 300 mpirun -np "$gpus" "$build/bench/bench_ring_attention" \
  --tokens-per-rank 8192,16384,32768 --layouts zigzag,contiguous --comm nccl --jsonl "$out/ring-attention.jsonl"

for cp in 1 "$gpus"; do
  part "e2e-cp$cp" 420 env BUILD_DIR="$build" "$root/launch/train.sh" "$root/configs/gpt-1b-64k.yaml" \
    --set parallel.cp="$cp" --set data.seq_len=$((65536 * cp)) --set parallel.comm=$([ "$cp" = 1 ] && echo auto || echo nccl) \
    --set train.steps="$steps" --set train.eval_every=0 --set checkpoint.every=0 --set checkpoint.save_final=false \
    --set checkpoint.resume= --set optim.warmup_steps=1 --set train.run_dir="$out/e2e-cp$cp"
done
# precision fp8 on all GPUs, the same steps as e2e-cp<GPUs> (issue 44: the amax reductions over NCCL).
part "e2e-cp$gpus-fp8" 420 env BUILD_DIR="$build" "$root/launch/train.sh" "$root/configs/gpt-1b-64k.yaml" \
  --set parallel.cp="$gpus" --set data.seq_len=$((65536 * gpus)) --set parallel.comm=nccl --set train.precision=fp8 \
  --set train.steps="$steps" --set train.eval_every=0 --set checkpoint.every=0 --set checkpoint.save_final=false \
  --set checkpoint.resume= --set optim.warmup_steps=1 --set train.run_dir="$out/e2e-cp$gpus-fp8"
# ZeRO 3's weight all-gather in E4M3 against bf16 over NCCL (issue 44: fp8.zero3_gather, half the bytes): the losses
# should agree to the bit (tensorwise), the gathered bytes halve, and zero_comm_ms says what that saved.
for g in bf16 fp8; do
  part "zero3-gather-$g" 300 env BUILD_DIR="$build" "$root/launch/train.sh" "$root/configs/fp8-parity-300m.yaml" \
    --set data.source=copy --set data.path= --set data.eval_path= --set data.seq_len=$((16384 * gpus)) \
    --set parallel.cp="$gpus" --set parallel.zero=3 --set parallel.comm=nccl --set train.precision=fp8 \
    --set fp8.zero3_gather=$g --set train.deterministic_attention=true --set train.eval_every=0 \
    --set train.steps="$steps" --set optim.warmup_steps=1 --set checkpoint.every=0 --set checkpoint.save_final=false \
    --set checkpoint.resume= --set train.run_dir="$out/zero3-gather-$g"
done

# The hybrid grids (parallel.cp_a2a, issue 32): all-to-all inside the node, the ring over cp / u, on all GPUs at 64K
# tokens per GPU: u = 2, 4 and u = GPUs (pure all-to-all; the 1.41B model has 16 heads, so u <= 16).
for u in 2 4 "$gpus"; do
  [ "$u" -le "$gpus" ] && [ $((gpus % u)) -eq 0 ] || continue
  part "e2e-cp$gpus-u$u" 420 env BUILD_DIR="$build" "$root/launch/train.sh" "$root/configs/gpt-1b-64k.yaml" \
    --set parallel.cp="$gpus" --set parallel.cp_a2a="$u" --set data.seq_len=$((65536 * gpus)) --set parallel.comm=nccl \
    --set train.steps="$steps" --set train.eval_every=0 --set checkpoint.every=0 --set checkpoint.save_final=false \
    --set checkpoint.resume= --set optim.warmup_steps=1 --set train.run_dir="$out/e2e-cp$gpus-u$u"
done
# Packed documents end to end per parallel.cp_scheme: real documents, all GPUs, 64K tokens per GPU, the same steps
# (each of its three runs has its own 420 s limit; the part fails when any run does).
part doc-cp-e2e 1400 env BUILD_DIR="$build" "$root/bench/doc_cp_e2e.sh" "$out/doc-cp$gpus" \
  "$root/configs/gpt-1b-64k.yaml" "$gpus" "$steps" -- --set data.seq_len=$((65536 * gpus)) --set parallel.comm=nccl
# Packed documents over NCCL are also in tests-nccl-model-grid (GpuModelGridDocuments: zigzag, striped, balanced with
# the chooser and hop skipping; GpuModelGridA2a: the all-to-all and hybrid grids with documents).
# The Llama-3-8B shape at ZeRO 3: the longest data.seq_len the plan allows on these GPUs (compare the run's measured
# memory with it).
part plan-llama3-8b 120 "$build/ringtrain" plan "$root/configs/llama3-8b-2m-8gpu.yaml" --max-seq-len \
  --set parallel.cp="$gpus"
echo "multi_gpu.sh: $failed part(s) failed" | tee -a "$out/summary.txt"
exit "$failed"
