#!/usr/bin/env bash
# The README's main job, end to end: launch/train.sh configs/tiny.yaml (a cp=2 zigzag ring on 2 CPU ranks).
# Passes when the job exits 0 within 120 s, its log states cp=2 and layout zigzag, and the last training
# step's repeat-half loss in metrics.jsonl is below 0.05 nats/token.
#   tests/integration/tiny_main.sh <build dir> <work dir>
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
work="$2"
rm -rf "$work"
mkdir -p "$work"
log="$work/train.log"
fail() { echo "FAIL: $*" >&2; echo "---- log ($log) ----" >&2; tail -n 40 "$log" >&2 || true; exit 1; }

start=$(date +%s)
BUILD_DIR="$build" "$root/launch/train.sh" "$root/configs/tiny.yaml" --set device=cpu --set "train.run_dir=$work/run" >"$log" 2>&1 ||
  fail "launch/train.sh configs/tiny.yaml exited with $?"
seconds=$(( $(date +%s) - start ))
echo "tiny.yaml finished in ${seconds} s"

grep -q "cp=2" "$log" || fail "the log does not state cp=2"
grep -q "zigzag" "$log" || fail "the log does not state layout zigzag"
[ "$seconds" -lt 120 ] || fail "took ${seconds} s; the main job must finish in under 2 minutes"

metrics="$work/run/metrics.jsonl"
[ -s "$metrics" ] || fail "no $metrics"
# The last training line's "loss_repeat_half" (eval lines carry "eval_loss_repeat_half", not matched here).
final=$(grep -o '"loss_repeat_half":[^,}]*' "$metrics" | tail -n 1 | cut -d: -f2)
[ -n "$final" ] && [ "$final" != "null" ] || fail "no loss_repeat_half in $metrics"
echo "final repeat-half loss ${final} nats/token (target < 0.05)"
awk -v x="$final" 'BEGIN { exit !(x + 0 < 0.05) }' || fail "final repeat-half loss ${final} is not below 0.05"

# `ringtrain eval` on the saved checkpoint, on a different grid (one process) and on the training grid
# (2 ranks), must reproduce the run's last held-out loss.
ckpt=$(ls -d "$work"/run/checkpoints/main/step_* | tail -n 1)
[ -d "$ckpt" ] || fail "no checkpoint saved under $work/run/checkpoints"
want=$(grep -o '"eval_loss":[^,}]*' "$metrics" | tail -n 1 | cut -d: -f2)
eval_loss() { grep -o 'mean loss [0-9.]*' | tail -n 1 | cut -d' ' -f3; }
one=$("$build/ringtrain" eval "$root/configs/tiny.yaml" --checkpoint "$ckpt" --set parallel.cp=1 --set device=cpu \
      2>>"$log" | tee -a "$log" | eval_loss) || fail "ringtrain eval (1 process) failed"
two=$(mpirun -np 2 --oversubscribe "$build/ringtrain" eval "$root/configs/tiny.yaml" --checkpoint "$ckpt" \
      --set device=cpu 2>>"$log" | tee -a "$log" | eval_loss) || fail "ringtrain eval (2 ranks) failed"
# The README's own eval example, run as written (from a directory where runs/tiny is this run and build/ the
# build under test): one process although configs/tiny.yaml says cp=2 (on the CPU, like the training run above,
# so that the losses compare to 1e-3).
readme_line=$(grep -o 'build/ringtrain eval configs/tiny.yaml --checkpoint [^ ]*' "$root/README.md" | head -n 1)
[ -n "$readme_line" ] || fail "README.md has no 'build/ringtrain eval configs/tiny.yaml --checkpoint' example"
mkdir -p "$work/readme/runs"
ln -sfn "$root/configs" "$work/readme/configs"
ln -sfn "$build" "$work/readme/build"
ln -sfn "$work/run" "$work/readme/runs/tiny"
readme=$(cd "$work/readme" && CUDA_VISIBLE_DEVICES= $readme_line 2>>"$log" | tee -a "$log" | eval_loss) ||
  fail "the README example '$readme_line' failed"
echo "README example '$readme_line': ${readme}"
one="$one $readme"
echo "eval: training run ${want}, 1 process ${one}, 2 ranks ${two}"
for got in $one "$two"; do
  [ -n "$got" ] || fail "ringtrain eval printed no 'mean loss'"
  awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-3) }' ||
    fail "ringtrain eval gave ${got}, the training run's last eval ${want}"
done
echo "PASS"
