#!/usr/bin/env bash
# TensorBoard event files (log.tensorboard) through the real binary, read back with TensorBoard's own reader
# (tests/integration/tensorboard_check.py) and compared with metrics.jsonl, on 2 CPU ranks (cp=2):
#   - configs/tiny.yaml for 5 steps, a checkpoint at step 3 only (steps 4 and 5 logged past it), then resumed to
#     step 8: two event files (one per start, rank 0 alone writes); TensorBoard's view equals metrics.jsonl,
#     steps 4 and 5 once each (the second run's);
#   - `ringtrain eval --task loss-by-position` and `--task needle` on the final checkpoint: their event files
#     equal their .jsonl;
#   - log.tensorboard=false writes no event file.
# Skips (77) when the build has no protobuf or the tensorboard package is missing.
#   tests/integration/tensorboard.sh <build dir> <work dir> <python3>
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
work="$2"
py="${3:-python3}"
rm -rf "$work"
mkdir -p "$work"
log="$work/log"
fail() { echo "FAIL: $*" >&2; echo "---- log ($log) ----" >&2; tail -n 30 "$log" >&2 || true; exit 1; }
"$py" -c "import tensorboard" 2>/dev/null || { echo "SKIP: the tensorboard Python package is missing for $py" \
  "(pip install tensorboard)"; exit 77; }
tiny="$root/configs/tiny.yaml"
run="$work/run"
train() { BUILD_DIR="$build" "$root/launch/train.sh" "$tiny" --set device=cpu --set "train.run_dir=$run" \
  --set log.every=1 --set optim.warmup_steps=2 --set train.eval_every=2 --set train.eval_batches=1 --set checkpoint.every=3 "$@"; }

train --set train.steps=5 --set checkpoint.save_final=false >>"$log" 2>&1 || fail "the first run failed"
if grep -q "event files are off" "$log"; then
  echo "SKIP: this build has no protobuf: $(grep -m1 'event files are off' "$log")"
  exit 77
fi
grep -q "tensorboard: .*events.out.tfevents" "$log" || fail "the first run did not say where its event files are"
[ -d "$run/checkpoints/main/step_3" ] && [ ! -d "$run/checkpoints/main/step_5" ] || fail "expected a checkpoint at step 3 only"
sleep 1  # not needed for order (names sort after earlier ones), only for distinct wall times
train --set train.steps=8 --set checkpoint.resume=auto >>"$log" 2>&1 || fail "the resumed run failed"
grep -q "resumed from .*step_3" "$log" || fail "the second run did not resume from step 3"
"$py" "$root/tests/integration/tensorboard_check.py" train "$run" --starts 2 | tee -a "$log" ||
  fail "the event files differ from metrics.jsonl"

ckpt="$run/checkpoints/main/step_8"
[ -d "$ckpt" ] || fail "no final checkpoint $ckpt"
mpirun -np 2 "$build/ringtrain" eval "$tiny" --checkpoint "$ckpt" --set device=cpu --task loss-by-position \
  --out "$work/position.jsonl" >>"$log" 2>&1 || fail "eval --task loss-by-position failed"
"$py" "$root/tests/integration/tensorboard_check.py" eval "$run/tensorboard/eval/loss_by_position_step_8" \
  loss-by-position "$work/position.jsonl" | tee -a "$log" || fail "loss-by-position events differ from its .jsonl"
"$py" "$root/launch/make_needles.py" --out "$work/cases" --copy-task --vocab-size 32 --max-length 64 \
  --lengths 32,64 --samples 2 >>"$log" 2>&1 || fail "make_needles.py --copy-task failed"
mpirun -np 2 "$build/ringtrain" eval "$tiny" --checkpoint "$ckpt" --set device=cpu --task needle \
  --cases "$work/cases" --out "$work/needle.jsonl" >>"$log" 2>&1 || fail "eval --task needle failed"
"$py" "$root/tests/integration/tensorboard_check.py" eval "$run/tensorboard/eval/needle_step_8" needle \
  "$work/needle.jsonl" | tee -a "$log" || fail "needle events differ from its .jsonl"

off="$work/off"
BUILD_DIR="$build" "$root/launch/train.sh" "$tiny" --set device=cpu --set "train.run_dir=$off" --set train.steps=2 --set optim.warmup_steps=1 \
  --set train.eval_every=0 --set log.tensorboard=false >>"$log" 2>&1 || fail "the log.tensorboard=false run failed"
[ ! -e "$off/tensorboard" ] || fail "log.tensorboard=false wrote $off/tensorboard"
echo "PASS"
