#!/usr/bin/env bash
# Issue 8 in one job on a node with several GPUs: every rank on its own GPU, NCCL between them.
#   bench/multi_gpu.sh <out-dir> [steps_e2e]
#   bench/multi_gpu.sh --dry-run [<out-dir> [steps_e2e]]   # the parts and their commands, nothing run (no GPU needed;
#                                                          # MULTI_GPU_GPUS, default 8, stands for the GPU count)
#   bench/multi_gpu.sh --help
# Needs a build with CUDA in $BUILD_DIR (default build-gpu). Writes under <out-dir>:
#   topo.txt                  nvidia-smi topology (NVLink / PCIe between the GPUs)
#   tests-nccl.log            the multi-rank GPU suites with RINGTRAIN_TEST_COMM=nccl on -np <GPUs>:
#                             ring attention vs one GPU and fp64 (cp = 1, 2, 4, 8 up to the GPU count),
#                             the whole model on dp/cp/tp grids vs one GPU, packed documents on both schemes of
#                             parallel.cp_scheme (ring, gather) vs the CPU and one GPU, the gather's one-launch forward
#                             with ready flags vs without, bit for bit (tests-nccl-ring-gather-flags: cp 2 and 4)
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
#   doc-flags-<row>.log, doc-flags-cp<GPUs>/<row>/gather/metrics.jsonl, doc-flags-cp<GPUs>/summary.md
#                             ready flags in the real path (issue 46): the training step of doc-cp-e2e's gather run
#                             (packed documents, 64K tokens per GPU, all GPUs) per row: flags-off
#                             (RT_ATTN_READY_FLAGS=0, the default), m4 / m8 / m16 (RT_ATTN_READY_FLAGS=1,
#                             RT_ATTN_READY_FREE_SMS = M SMs left to the delivery), list-off
#                             (RT_ATTN_WORK_LIST=0: no work list either way); ms/step,
#                             attn_ms, comm_exposed_ms per row (why no M = 0 there: the comment above the rows)
#   doc-steps-m<M>.{log,json} bench_doc_ring_steps on one GPU, the stdlib mix at the same sample size and cp: the
#                             forward with the exchange under it (--deliver model, copy-engine delivery, so M = 0 too)
#                             for M = 0, 4, 8, 16, and the one-launch backward as attn_bwd_work_list beside
#                             attn_bwd_block_fresh_two_kv (--bwd-work-list)
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
usage="usage: bench/multi_gpu.sh [--dry-run] <out-dir> [steps_e2e] | --help"
dry=0
case "${1:-}" in
  -h | --help) sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  --dry-run) dry=1; shift ;;
esac
if [ $dry -eq 1 ]; then out="${1:-multi-gpu-out}"; else out="${1:?$usage}"; fi
steps="${2:-4}"
build="${BUILD_DIR:-$root/build-gpu}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ $dry -eq 1 ]; then
  gpus="${MULTI_GPU_GPUS:-8}"
  echo "multi_gpu.sh --dry-run: $gpus GPUs (MULTI_GPU_GPUS), build $build, out $out; the parts it would run:"
else
  mkdir -p "$out"
  gpus="$(nvidia-smi -L | grep -c '^GPU')"
  [ "$gpus" -ge 2 ] || { echo "multi_gpu.sh: $gpus GPU(s) visible; this job needs at least 2" >&2; exit 2; }
  echo "multi_gpu.sh: $gpus GPUs, build $build, out $out" | tee "$out/summary.txt"
  nvidia-smi topo -m > "$out/topo.txt" 2>&1
fi
failed=0
part_rc=0 part_s=0  # the latest part's exit status and seconds
part() {  # part <name> <timeout_s> <command...>: runs, logs to <out>/<name>.log, records the status
  local name="$1" limit="$2"
  shift 2
  if [ $dry -eq 1 ]; then  # the command as it would run (shell-quoted), nothing run
    printf 'part %s (%s s):' "$name" "$limit"
    printf ' %q' "$@"
    printf '\n'
    part_rc=0 part_s=0
    return
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  part_rc=$rc part_s=$((SECONDS - t0))
  echo "part $name: exit $rc in $part_s s" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || failed=$((failed + 1))
}

export RINGTRAIN_TEST_COMM=nccl
part tests-nccl-ring 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_ring_attention"
part tests-nccl-model-grid 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_model_grid"
part tests-nccl-ring-gather 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_ring_gather"  # packed documents, both schemes
part tests-nccl-fp8-grid 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_fp8_grid"  # precision fp8 on the grids
# The gather's one-launch forward with ready flags (exchange on NCCL's kernel, unpack and flag on a side stream, the
# list kernel on SMs - 8) against RT_ATTN_READY_FLAGS=0 within reassociation, two layers, cp 2 and 4: on one GPU the
# ranks time-slice it (passed on the H200, 2026-12-04); here each rank has its GPU, so the flag is raised while the
# kernel runs: the check that decides whether the flags can go on by default.
part tests-nccl-ring-gather-flags 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_ring_gather_flags"
part tests-nccl-kv-fp8-wire 240 mpirun -np "$gpus" "$build/tests/test_mpi_gpu_ring_kv_fp8_wire"  # fp8.attention_kv
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
# Ready flags in the real path (issue 46; parallel/cp/ring_attention_gather.cpp gather_forward_flagged,
# kernels/attn_ready_flags.h): doc-cp-e2e's gather run once per row, each in doc-flags-cp<GPUs>/<row>/ (doc_cp_e2e.sh
# with DOC_CP_SCHEMES=gather: the same corpus, model, 64K tokens per GPU and steps), the knobs read when each rank's
# ring is built, the three of them cleared first so that only the row's differ:
#   flags-off    RT_ATTN_READY_FLAGS=0: wait for the exchange, unpack, then the list kernel (the order before flags)
#   m4, m8, m16  flags on (RT_ATTN_READY_FLAGS=1, experimental; off by default): the list kernel launched before
#                the exchange's wait, its own keys under it, in its persistent form leaving M =
#                RT_ATTN_READY_FREE_SMS SMs free of units for NCCL's kernel, the unpack (gather_rows) and the flag
#                kernel; m8 leaves RT_ATTN_READY_FREE_SMS unset (kAttnReadyFreeSmsDefault = 8)
#   list-off     RT_ATTN_WORK_LIST=0: both one launches as attn_fwd_whole_two_kv / attn_bwd_block_fresh_two_kv, so
#                no flags either; against flags-off, the work lists' gain: the forward's list and the one-launch
#                backward's (attn_bwd_work_list) together (the backward's alone, per rank: doc-steps below)
# Read ms/step and attn_ms (rank 0's time in ring attention, its waits inside the list kernel counted as compute),
# comm_exposed_ms, in doc-flags-cp<GPUs>/summary.md; the first losses should agree (the flags change when a tile is
# loaded, never what is computed). The rows can only differ where a rank's batch runs its forward (list-off: or
# backward) in one launch (plan_gather's choice per batch), which no step line records: rows within noise of each
# other may mean that no batch did.
# No M = 0 row here: the rows are delivered by kernels (NCCL's, gather_rows, attn_ready_release), and with M = 0 the
# list kernel runs one CTA per (task, head) unit (16 heads x up to 512 query tiles of a 64K rank: thousands of CTAs on
# 132 SMs), whose units waiting for the flag can hold every SM, so the delivery may never get one: the watchdog's
# fault after parallel.timeout_s, NaN rows and the run stopped naming the layer; a failure, not a time (one H200, job
# 8: the flag never rose on most mixes). M = 0 cannot deadlock where the delivery needs no SM: doc-steps below.
# parallel.timeout_s=60 so that a deadlocked wait (M too small for NCCL's channels) ends in that fault inside the part.
flag_rows=()
for row in flags-off m4 m8 m16 list-off; do
  case "$row" in
    flags-off) knob=(RT_ATTN_READY_FLAGS=0) ;;
    m8) knob=(RT_ATTN_READY_FLAGS=1) ;;
    m*) knob=(RT_ATTN_READY_FLAGS=1 RT_ATTN_READY_FREE_SMS="${row#m}") ;;
    list-off) knob=(RT_ATTN_WORK_LIST=0) ;;
  esac
  part "doc-flags-$row" 480 env -u RT_ATTN_READY_FLAGS -u RT_ATTN_READY_FREE_SMS -u RT_ATTN_WORK_LIST \
    ${knob[@]+"${knob[@]}"} BUILD_DIR="$build" DOC_CP_SCHEMES=gather "$root/bench/doc_cp_e2e.sh" \
    "$out/doc-flags-cp$gpus/$row" "$root/configs/gpt-1b-64k.yaml" "$gpus" "$steps" -- \
    --set data.seq_len=$((65536 * gpus)) --set parallel.comm=nccl --set parallel.timeout_s=60
  flag_rows+=(--run "$row/gather:$part_rc:$part_s")
done
part doc-flags-summary 60 python3 "$root/bench/doc_cp_summary.py" --out-dir "$out/doc-flags-cp$gpus" "${flag_rows[@]}"
# The same per rank on one GPU (GPU 0 alone), where each piece is timed by itself: bench_doc_ring_steps on the stdlib
# mix (bench/doc_mixes.py, seed 1) at the real path's sample size (65536 x GPUs tokens) at cp = <GPUs>, the gather
# scheme over the best gatherpack order (at 8 GPUs the chooser's pick for this sample, as with cp_scheme gather:
# --list-candidates), 16 heads of 128 (the 1.41B model's), with
#   --deliver model   each receiving rank's own-first list forward launched under ready flags, the flag raised at the
#                     NVLink model's exchange time C_kv by a copy-engine copy after a 1-thread delay kernel resident
#                     from the start: the delivery needs no SM, so M = 0 cannot deadlock here, and the sweep M = 0, 4,
#                     8, 16 (RT_ATTN_READY_FREE_SMS) reads what leaving M SMs free costs the launch;
#   --bwd-work-list   each receiving rank's one-launch backward as attn_bwd_work_list beside
#                     attn_bwd_block_fresh_two_kv (RT_ATTN_WORK_LIST=1 against 0 for that call), their bits compared.
lengths="$out/doc-steps-stdlib-$((65536 * gpus)).txt"
if [ $dry -eq 1 ]; then
  printf 'python3 %q --n %s --mix stdlib --seed 1 > %q\n' "$root/bench/doc_mixes.py" $((65536 * gpus)) "$lengths"
else
  python3 "$root/bench/doc_mixes.py" --n $((65536 * gpus)) --mix stdlib --seed 1 > "$lengths" ||
    echo "multi_gpu.sh: bench/doc_mixes.py failed; the doc-steps parts will fail" | tee -a "$out/summary.txt"
fi
for m in 0 4 8 16; do
  part "doc-steps-m$m" 300 env -u RT_ATTN_READY_FLAGS -u RT_ATTN_WORK_LIST CUDA_VISIBLE_DEVICES=0 \
    RT_ATTN_READY_FREE_SMS="$m" "$build/bench/bench_doc_ring_steps" --lengths "$lengths" --cp "$gpus" \
    --scheme gather --layout gatherpack --h 16 --d 128 --deliver model --bwd-work-list --json "$out/doc-steps-m$m.json"
done
# Packed documents over NCCL are also in tests-nccl-model-grid (GpuModelGridDocuments: zigzag, striped, balanced with
# the chooser and hop skipping; GpuModelGridA2a: the all-to-all and hybrid grids with documents).
# The Llama-3-8B shape at ZeRO 3: the longest data.seq_len the plan allows on these GPUs (compare the run's measured
# memory with it).
part plan-llama3-8b 120 "$build/ringtrain" plan "$root/configs/llama3-8b-2m-8gpu.yaml" --max-seq-len \
  --set parallel.cp="$gpus"
if [ $dry -eq 1 ]; then exit 0; fi
echo "multi_gpu.sh: $failed part(s) failed" | tee -a "$out/summary.txt"
exit "$failed"
