#!/usr/bin/env bash
# Teacher-forced needles and loss by position through the real binary (README "Does the model use its context?").
# The copy task's trained model repeats its first half, so a passkey in the first half is answered in the second:
#   - configs/tiny.yaml trained 300 steps (one process); launch/make_needles.py --copy-task cases at the trained
#     length, 11 depths x 4; `ringtrain eval --task needle` on the config's grid (cp 2 zigzag, 2 ranks):
#     >= 99% of the answer tokens argmax-correct at every depth;
#   - the same cases on the model after one step: near chance (< 15%; chance is 1/31);
#   - refused with exit 2: a case longer than data.seq_len (the limit named), cases of another tokenizer;
#   - loss-by-position on 2 ranks: its JSONL and CSV, and its buckets average back to the plain eval loss;
#   - the plots (launch/plot_needles.py, launch/plot_loss_by_position.py) when matplotlib is present.
#   tests/integration/needles.sh <build dir> <work dir> <python3>
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
work="$2"
py="${3:-python3}"
rm -rf "$work"
mkdir -p "$work"
log="$work/log"
fail() { echo "FAIL: $*" >&2; echo "---- log ($log) ----" >&2; tail -n 30 "$log" >&2 || true; exit 1; }
rt() { "$build/ringtrain" "$@"; }
tiny="$root/configs/tiny.yaml"

rt train "$tiny" --set parallel.cp=1 --set device=cpu --set train.steps=300 --set train.eval_every=300 \
  --set log.every=100 --set "train.run_dir=$work/trained" >>"$log" 2>&1 || fail "training tiny.yaml failed"
rt train "$tiny" --set parallel.cp=1 --set device=cpu --set train.steps=1 --set optim.warmup_steps=1 \
  --set train.eval_every=0 --set "train.run_dir=$work/untrained" >>"$log" 2>&1 || fail "the one-step run failed"
trained=$(ls -d "$work"/trained/checkpoints/main/step_* | tail -n 1)
untrained=$(ls -d "$work"/untrained/checkpoints/main/step_* | tail -n 1)

"$py" "$root/launch/make_needles.py" --out "$work/cases" --copy-task --vocab-size 32 --max-length 64 \
  --lengths 64 --samples 4 >>"$log" 2>&1 || fail "make_needles.py --copy-task failed"
for m in trained untrained; do
  mpirun -np 2 "$build/ringtrain" eval "$tiny" --checkpoint "${!m}" --set device=cpu --task needle \
    --cases "$work/cases" --out "$work/$m.jsonl" >>"$log" 2>&1 || fail "eval --task needle ($m) failed"
done
grep -q "ETA" "$log" || fail "no progress line with an ETA"
"$py" - "$work/trained.jsonl" "$work/untrained.jsonl" <<'PY' || fail "needle scores"
import json, sys
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]
trained, untrained = rows(sys.argv[1]), rows(sys.argv[2])
assert len(trained) == 44, f"{len(trained)} cases scored, 44 expected"
by_depth = {}
for r in trained:
    assert r["answer_tokens"] == 5, r
    by_depth.setdefault(r["depth"], []).append(r)
for depth, rs in sorted(by_depth.items()):
    acc = sum(r["argmax_hits"] for r in rs) / sum(r["answer_tokens"] for r in rs)
    print(f"trained: depth {depth:.1f}: {100 * acc:.1f}% argmax-correct, mean log-prob "
          f"{sum(r['mean_logprob'] for r in rs) / len(rs):.3f}")
    assert acc >= 0.99, f"depth {depth}: {acc:.3f} < 0.99"
chance = sum(r["argmax_hits"] for r in untrained) / sum(r["answer_tokens"] for r in untrained)
print(f"untrained: {100 * chance:.1f}% argmax-correct (chance 3.2%)")
assert chance < 0.15, f"the untrained model scores {chance:.3f}: not near chance"
lp_t = sum(r["mean_logprob"] for r in trained) / len(trained)
lp_u = sum(r["mean_logprob"] for r in untrained) / len(untrained)
assert lp_t > -0.5 and lp_u < -2.5, (lp_t, lp_u)
PY

# Refusals (exit 2): a case longer than data.seq_len, cases of another tokenizer.
"$py" "$root/launch/make_needles.py" --out "$work/long" --copy-task --vocab-size 32 --max-length 128 \
  --lengths 128 --depths 0.5 >>"$log" 2>&1 || fail "make_needles.py (128) failed"
set +e
rt eval "$tiny" --checkpoint "$trained" --set parallel.cp=1 --set device=cpu --task needle --cases "$work/long" \
  --out "$work/long.jsonl" >"$work/long.log" 2>&1
code=$?
set -e
[ "$code" = 2 ] || fail "a case longer than seq_len: exit $code, not 2"
grep -q "data.seq_len=64" "$work/long.log" || fail "the refusal does not name data.seq_len=64: $(cat "$work/long.log")"
"$py" "$root/launch/make_needles.py" --out "$work/bytes" --bytes --max-length 256 --lengths 256 --depths 0.5 \
  >>"$log" 2>&1 || fail "make_needles.py --bytes failed"
set +e
rt eval "$tiny" --checkpoint "$trained" --set parallel.cp=1 --set device=cpu --task needle --cases "$work/bytes" \
  --out "$work/bytes.jsonl" >"$work/bytes.log" 2>&1
code=$?
set -e
[ "$code" = 2 ] || fail "cases of another tokenizer: exit $code, not 2"
grep -q "tokenizer bytes" "$work/bytes.log" || fail "the refusal does not name the tokenizer: $(cat "$work/bytes.log")"
[ ! -e "$work/long.jsonl" ] && [ ! -e "$work/bytes.jsonl" ] || fail "a refused eval wrote its --out"

# Loss by position on the training grid, against the plain eval loss.
mpirun -np 2 "$build/ringtrain" eval "$tiny" --checkpoint "$trained" --set device=cpu --task loss-by-position \
  --out "$work/lbp.jsonl" >>"$log" 2>&1 || fail "eval --task loss-by-position failed"
[ -s "$work/lbp.csv" ] || fail "no $work/lbp.csv"
plain=$(mpirun -np 2 "$build/ringtrain" eval "$tiny" --checkpoint "$trained" --set device=cpu 2>>"$log" |
        grep -o 'mean loss [0-9.]*' | tail -n 1 | cut -d' ' -f3)
"$py" - "$work/lbp.jsonl" "$plain" <<'PY' || fail "loss-by-position does not average back to the eval loss"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n = sum(r["targets"] for r in rows)
mean = sum(r["mean_loss"] * r["targets"] for r in rows) / n
print(f"loss by position: {len(rows)} buckets, {n} targets, mean {mean:.4f} vs eval {sys.argv[2]}")
assert abs(mean - float(sys.argv[2])) < 1e-3, (mean, sys.argv[2])
PY

if "$py" -c "import matplotlib" 2>/dev/null; then
  "$py" "$root/launch/plot_needles.py" "$work/trained.jsonl" "$work/untrained.jsonl" --out "$work/needles.png" \
    >>"$log" 2>&1 || fail "plot_needles.py failed"
  "$py" "$root/launch/plot_loss_by_position.py" "$work/lbp.jsonl" --out "$work/lbp.png" >>"$log" 2>&1 ||
    fail "plot_loss_by_position.py failed"
  [ -s "$work/needles.png" ] && [ -s "$work/lbp.png" ] || fail "a plot was not written"
else
  echo "matplotlib is missing: the plots were not checked"
fi
echo "PASS"
