#!/usr/bin/env bash
# configs/tiny.yaml on the GPU: the same job as the README main command (cp=2 zigzag, 2 ranks), with
# device=cuda. The two ranks share the one GPU, so parallel.comm auto must pick mpi (pinned host staging).
# Passes when the job exits 0 and the last training step's repeat-half loss is below 0.05 nats/token, the
# CPU target (tests/integration/tiny_main.sh). Exits 77 (ctest: skipped) without a CUDA device.
#   tests/integration/tiny_gpu.sh <build dir> <work dir>
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
work="$2"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no CUDA device"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
log="$work/train.log"
fail() { echo "FAIL: $*" >&2; echo "---- log ($log) ----" >&2; tail -n 40 "$log" >&2 || true; exit 1; }

start=$(date +%s)
BUILD_DIR="$build" "$root/launch/train.sh" "$root/configs/tiny.yaml" --set device=cuda \
  --set "train.run_dir=$work/run" >"$log" 2>&1 || fail "launch/train.sh configs/tiny.yaml (device=cuda) exited with $?"
seconds=$(( $(date +%s) - start ))
echo "tiny.yaml on the GPU finished in ${seconds} s"
grep -q "cp=2" "$log" || fail "the log does not state cp=2"
grep -q "parallel.comm: auto -> mpi" "$log" || fail "two ranks on one GPU must run over mpi (auto)"
metrics="$work/run/metrics.jsonl"
[ -s "$metrics" ] || fail "no $metrics"
final=$(grep -o '"loss_repeat_half":[^,}]*' "$metrics" | tail -n 1 | cut -d: -f2)
[ -n "$final" ] && [ "$final" != "null" ] || fail "no loss_repeat_half in $metrics"
echo "final repeat-half loss ${final} nats/token (target < 0.05, as on the CPU)"
awk -v x="$final" 'BEGIN { exit !(x + 0 < 0.05) }' || fail "final repeat-half loss ${final} is not below 0.05"
echo "PASS"
