#!/usr/bin/env bash
# RULER-style checks through the real binary (README "RULER-style checks"): the copy task's trained model repeats its
# first half, so every copy-task RULER case is answered by copying on:
#   - configs/tiny.yaml with 2 heads (so that tp and the all-to-all can split them) trained 300 steps (one process)
#     and after one step; launch/make_ruler.py --copy-task cases (5 tasks x 8 at the trained length);
#     `ringtrain eval --task ruler` on the config's grid (cp 2 zigzag ring, 2 ranks): the trained model scores 100
#     on every task, the untrained one near 0 (< 15); progress with an ETA; the JSONL, the task x length table
#     (.md, .csv, stdout);
#   - the same tokens on cp 2 as an all-to-all, cp 4 as the hybrid (a ring of 2 all-to-alls of 2; 4 ranks on the
#     2 cores), tp 2, dp 2 and on one rank; the generated tokens of untrained cases equal `ringtrain generate`'s
#     greedy tokens from the same prompts (its KV-cache decode);
#   - refused with exit 2, writing nothing: a case longer than data.seq_len (the limit named), cases of another
#     tokenizer, needle cases, an existing --out without --overwrite;
#   - the heatmap (launch/plot_ruler.py) when matplotlib is present.
#   tests/integration/ruler.sh <build dir> <work dir> <python3>
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
h2=(--set model.n_head=2 --set model.n_kv_head=2)  # head_dim 32: CPU ranks only (device=cpu throughout)

rt train "$tiny" "${h2[@]}" --set parallel.cp=1 --set device=cpu --set train.steps=300 --set train.eval_every=0 \
  --set log.every=100 --set "train.run_dir=$work/trained" >>"$log" 2>&1 || fail "training tiny.yaml failed"
rt train "$tiny" "${h2[@]}" --set parallel.cp=1 --set device=cpu --set train.steps=1 --set optim.warmup_steps=1 \
  --set train.eval_every=0 --set "train.run_dir=$work/untrained" >>"$log" 2>&1 || fail "the one-step run failed"
trained=$(ls -d "$work"/trained/checkpoints/main/step_* | tail -n 1)
untrained=$(ls -d "$work"/untrained/checkpoints/main/step_* | tail -n 1)

"$py" "$root/launch/make_ruler.py" --out "$work/cases" --copy-task --vocab-size 32 --max-length 64 --samples 8 \
  >>"$log" 2>&1 || fail "make_ruler.py --copy-task failed"
for m in trained untrained; do
  mpirun -np 2 "$build/ringtrain" eval "$tiny" "${h2[@]}" --checkpoint "${!m}" --set device=cpu --task ruler \
    --cases "$work/cases" --out "$work/$m.jsonl" >"$work/$m.stdout" 2>>"$log" || fail "eval --task ruler ($m) failed"
  [ -s "$work/$m.md" ] && [ -s "$work/$m.csv" ] || fail "no table beside $work/$m.jsonl"
  grep -q "| vt |" "$work/$m.stdout" || fail "the table was not printed: $(cat "$work/$m.stdout")"
done
grep -q "ruler: .* cases, .* ETA" "$log" || fail "no progress line with an ETA"
for grid in "a2a 1 2 2 1" "hybrid 1 4 2 1" "tp2 1 1 1 2" "dp2 2 1 1 1"; do
  read -r name dp cp a2a tp <<<"$grid"
  settings="parallel.dp=$dp parallel.cp=$cp parallel.cp_a2a=$a2a parallel.tp=$tp"
  sets=()
  for kv in $settings; do sets+=(--set "$kv"); done
  mpirun -np $((dp * cp * tp)) --oversubscribe "$build/ringtrain" eval "$tiny" "${h2[@]}" "${sets[@]}" \
    --checkpoint "$trained" --set device=cpu \
    --task ruler --cases "$work/cases" --out "$work/trained_$name.jsonl" >>"$log" 2>&1 ||
    fail "eval --task ruler on $name ($settings) failed"
  tail -n 30 "$log" | grep -q "ruler: 40 cases .* on dp=$dp cp=$cp cp_a2a=$a2a tp=$tp," ||
    fail "eval --task ruler ($name) did not run on dp=$dp cp=$cp cp_a2a=$a2a tp=$tp"
done
rt eval "$tiny" "${h2[@]}" --checkpoint "$trained" --set device=cpu --set parallel.cp=1 --task ruler \
  --cases "$work/cases" --out "$work/trained_one.jsonl" >>"$log" 2>&1 || fail "eval --task ruler on one rank failed"
"$py" - "$work" <<'PY' || fail "ruler scores"
import json, sys
work = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl") if l.strip()]
trained, untrained = rows("trained"), rows("untrained")
assert len(trained) == len(untrained) == 40, (len(trained), len(untrained))
by_task = {}
for r in trained:
    by_task.setdefault(r["task"], []).append(r["score"])
for task, scores in by_task.items():
    print(f"trained: {task}: {sum(scores) / len(scores):.1f}")
    assert all(s == 100 for s in scores), (task, scores)
assert len(by_task) == 5, by_task
assert all(r["stop"] == "answers" for r in trained), "a trained case ran past its answers"
mean = sum(r["score"] for r in untrained) / len(untrained)
print(f"untrained: mean {mean:.1f}")
assert mean < 15, f"the untrained model scores {mean:.1f}: not near 0"
for other in ("trained_a2a", "trained_hybrid", "trained_tp2", "trained_dp2", "trained_one"):
    ids = [r["new_ids"] for r in rows(other)]
    assert ids == [r["new_ids"] for r in trained], f"{other}: other tokens than on the cp 2 ring"
table = open(f"{work}/trained.csv").read()
assert "vt,64,8,100.0" in table and "niah_multikey,all,8,100.0" in table, table
PY

# The generated tokens of three untrained cases against `ringtrain generate` (greedy, the KV-cache decode).
"$py" - "$work" <<'PY' >"$work/prompts.txt" || fail "reading the cases"
import json, struct, sys
work = sys.argv[1]
results = {r["id"]: r for r in (json.loads(l) for l in open(f"{work}/untrained.jsonl") if l.strip())}
picked = sorted((c for c in (json.loads(l) for l in open(f"{work}/cases/cases.jsonl"))
                 if results[c["id"]]["stop"] == "max_new_tokens"), key=lambda c: -c["max_new_tokens"])[:3]
for c in picked:
    raw = open(f"{work}/cases/{c['file']}", "rb").read()
    prompt = struct.unpack(f"<{c['prompt_tokens']}i", raw[:4 * c["prompt_tokens"]])
    print(c["id"], ",".join(map(str, prompt)), ",".join(map(str, results[c["id"]]["new_ids"])))
PY
[ "$(wc -l <"$work/prompts.txt")" = 3 ] || fail "fewer than 3 untrained cases ran to max_new_tokens"
while read -r id prompt expected; do
  n=$(echo "$expected" | tr ',' '\n' | wc -l)
  got=$(rt generate "$tiny" "${h2[@]}" --checkpoint "$untrained" --set device=cpu --prompt "$prompt" \
          --max-new-tokens "$n" --eos-id -1 2>>"$log" |
        "$py" -c "import json, sys; print(','.join(map(str, json.load(sys.stdin)['new_ids'])))")
  [ "$got" = "$expected" ] || fail "case $id: eval --task ruler generated $expected, ringtrain generate $got"
done <"$work/prompts.txt"

# Refusals (exit 2), nothing written.
refuse() {  # refuse <name> <cases dir> <text the message must hold> [eval options...]
  local name="$1" cases="$2" text="$3"
  shift 3
  set +e
  rt eval "$tiny" "${h2[@]}" --checkpoint "$trained" --set parallel.cp=1 --set device=cpu --task ruler \
    --cases "$cases" \
    --out "$work/$name.jsonl" "$@" >"$work/$name.log" 2>&1
  local code=$?
  set -e
  [ "$code" = 2 ] || fail "$name: exit $code, not 2: $(cat "$work/$name.log")"
  grep -q -- "$text" "$work/$name.log" || fail "$name: the refusal does not name '$text': $(cat "$work/$name.log")"
  grep -q "Traceback\|terminate called" "$work/$name.log" && fail "$name: not a clean refusal"
  return 0
}
"$py" "$root/launch/make_ruler.py" --out "$work/long" --copy-task --vocab-size 32 --max-length 128 \
  --tasks niah_single >>"$log" 2>&1 || fail "make_ruler.py (128) failed"
refuse long "$work/long" "data.seq_len=64"
"$py" "$root/launch/make_ruler.py" --out "$work/bytes" --bytes --max-length 1024 --tasks niah_single \
  --lengths 1024 >>"$log" 2>&1 || fail "make_ruler.py --bytes failed"
refuse bytes "$work/bytes" "tokenizer bytes"
"$py" "$root/launch/make_needles.py" --out "$work/needles" --copy-task --vocab-size 32 --max-length 64 \
  --lengths 64 --depths 0.5 >>"$log" 2>&1 || fail "make_needles.py failed"
refuse needles "$work/needles" "--task needle"
[ ! -e "$work/long.jsonl" ] && [ ! -e "$work/bytes.jsonl" ] && [ ! -e "$work/needles.jsonl" ] &&
  [ ! -e "$work/long.md" ] || fail "a refused eval wrote its --out"
cp "$work/trained.jsonl" "$work/again.jsonl"
refuse again "$work/cases" "--overwrite"
cmp -s "$work/trained.jsonl" "$work/again.jsonl" || fail "a refused eval changed an existing --out"

if "$py" -c "import matplotlib" 2>/dev/null; then
  "$py" "$root/launch/plot_ruler.py" "$work/trained.jsonl" "$work/untrained.jsonl" --out "$work/ruler.png" \
    >>"$log" 2>&1 || fail "plot_ruler.py failed"
  [ -s "$work/ruler.png" ] || fail "the heatmap was not written"
else
  echo "matplotlib is missing: the heatmap was not checked"
fi
echo "PASS"
