#!/usr/bin/env bash
# The FP8 linear-layer study on one GPU (issue 44), one command: every measurement issue 44 asks for that one GPU can
# give, each of ours fp8 beside ours bf16 in the same run (bench/results/2026-12-03-h200-fp8.md holds the tables).
#   tests    the FP8 GPU tests (the GEMMs, the quantizer, the first step against the CPU per recipe)
#   step     bench_train_step, bf16 / fp8 tensorwise / fp8 rowwise: the 1.41B at 16K and the Llama-3-8B shape at
#            16K (16 layers, as many as fit the H200; checkpointing none), with --profile (the quantization's share)
#   chunk    the 1.41B at 64K under selective checkpointing: bf16, fp8 at its auto MLP chunk (8,192 tokens: half
#            bf16's, so the arena is no larger) and fp8 at bf16's chunk (16,384): what the smaller chunk costs
#   docs     the 1.41B at 64K on packed documents of a real length mix (bench/stdlib_doc_corpus.py), bf16 / fp8
#   peer     bench/torch_gpt_side_by_side.py: ours bf16 / fp8 beside torch.compile per block with and without
#            torchao float8 (tensorwise, rowwise) on the 1.41B at 16K; torchao is a peer, never a dependency: put
#            its wheel's directory in TORCHAO_PATH (../shared/peers/torchao says how), else the step says it skips
#   peer8b   the same on the Llama-3-8B shape at 16K (SwiGLU, 32 query / 8 K/V heads), 12 layers so that the PyTorch
#            model's fp32 weights, AdamW state and activations fit the GPU beside nothing else
#   peerdocs the packed-documents step (the docs part's corpus and shape) beside torch.compile with and without
#            torchao float8: the PyTorch model runs on ours' document lengths step by step, its attention a
#            FlexAttention document mask (torchtitan's); TORCHAO_PATH as for peer; not in the default parts
#   parity   the rowwise loss-parity run against bf16 (rowwise's forward promotes to f32 by default since its
#            fast-accumulation run ended 1.16% behind bf16: bench/NOTES.md "Rowwise's loss gap"; RT_FP8_FAST_ACCUM=1
#            in the environment repeats that run); ~5 minutes on an H200; not in the default parts
# usage: bench/fp8_study.sh [build-dir (build-gpu)] [out-dir (fp8-study)] [parts (tests,step,chunk,docs,peer,peer8b)]
# Every step runs under `timeout` and logs to <out-dir>/<step>.log; a failed step is reported and the rest go on.
# At the end one line per bench_train_step run: the median ms/step, and its speed-up over its part's bf16 run.
# DRY_RUN=1 prints the commands instead of running them (tests/integration/fp8_study_dry_run.sh checks them).
set -uo pipefail
build=${1:-build-gpu}
out=${2:-fp8-study}
parts=",${3:-tests,step,chunk,docs,peer,peer8b},"
dry=${DRY_RUN:-0}
mkdir -p "$out"
start=$SECONDS
want() { [[ "$parts" == *",$1,"* ]]; }
step() {  # step <name> <timeout-s> <command...>: runs it, logs to $out/<name>.log, prints the outcome
  local name=$1 limit=$2; shift 2
  if [ "$dry" = 1 ]; then
    echo "[fp8_study] $name: $*"
    return 0
  fi
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "[fp8_study] $name: rc $rc at $((SECONDS - start)) s (log $out/$name.log)"
  return $rc
}
B=$build/bench/bench_train_step
if [ "$dry" != 1 ]; then
  nvidia-smi -L > "$out/gpu.txt" 2>&1
  git log --oneline -1 > "$out/commit.txt" 2>&1
  if [ ! -f "$build/build.ninja" ]; then
    step configure 300 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release || exit 1
  fi
  step build 1200 cmake --build "$build" --target ringtrain bench_train_step test_gpu -- -j "$(nproc)" || exit 1
fi
if want tests; then
  step tests 600 "$build/tests/test_gpu" --gtest_filter='*Fp8*:Op/EveryOp.CudaMatchesCpu/*fp8*'
  [ "$dry" = 1 ] || tail -n 3 "$out/tests.log"
fi
run="--warmup 2 --steps 4"
llama8b="configs/llama3-8b-2m-8gpu.yaml --set parallel.cp=1 --set parallel.zero=0 --set data.seq_len=16384
  --set model.n_layer=16 --set train.checkpointing=none --set train.lm_head_chunk=2048"
if want step; then
  for p in "bf16" "fp8 --recipe tensorwise" "fp8 --recipe rowwise"; do
    tag=${p//[ -]/}; tag=${tag/recipe/-}
    # shellcheck disable=SC2086
    step "step-1b-$tag" 600 "$B" configs/bench/gpt-1b-16k.yaml $run --profile --precision $p
  done
  for p in "bf16" "fp8 --recipe tensorwise"; do
    tag=${p//[ -]/}; tag=${tag/recipe/-}
    # shellcheck disable=SC2086
    step "step-8b-$tag" 600 "$B" $llama8b $run --profile --precision $p
  done
fi
if want chunk; then
  step chunk-bf16 600 "$B" configs/bench/gpt-1b-64k-selective.yaml $run --precision bf16
  step chunk-fp8-auto 600 "$B" configs/bench/gpt-1b-64k-selective.yaml $run --precision fp8 --recipe tensorwise
  step chunk-fp8-16384 600 "$B" configs/bench/gpt-1b-64k-selective.yaml $run --precision fp8 --recipe tensorwise \
    --set train.mlp_chunk=16384
fi
if want docs; then
  corpus=$out/stdlib_corpus.bin
  step docs-corpus 300 python3 bench/stdlib_doc_corpus.py --out "$corpus"
  docs="--set data.source=bytes --set data.path=$corpus --set data.eval_path= --set data.documents=eot
    --set data.eot_token=0"
  for p in "bf16" "fp8 --recipe tensorwise"; do
    tag=${p//[ -]/}; tag=${tag/recipe/-}
    # shellcheck disable=SC2086
    step "docs-$tag" 900 "$B" configs/bench/gpt-1b-64k.yaml $docs $run --profile --precision $p
  done
fi
if want peer; then
  if [ -n "${TORCHAO_PATH:-}" ] || [ "$dry" = 1 ]; then
    PYTHONPATH="${TORCHAO_PATH:-}${PYTHONPATH:+:$PYTHONPATH}" step peer 1200 python3 bench/torch_gpt_side_by_side.py \
      --ours "$B" --configs configs/bench/gpt-1b-16k.yaml --torch-compile --fp8 --fp8-recipes tensorwise rowwise \
      --contenders ours ours_fp8_tensorwise ours_fp8_rowwise compiled float8_tensorwise float8_rowwise \
      --out "$out/peer.md"
    [ "$dry" = 1 ] || cat "$out/peer.md" 2>/dev/null
  else
    echo "[fp8_study] peer: skipped (TORCHAO_PATH names no torchao wheel directory; ../shared/peers/torchao says how)"
  fi
fi
if want peer8b; then
  if [ -n "${TORCHAO_PATH:-}" ] || [ "$dry" = 1 ]; then
    PYTHONPATH="${TORCHAO_PATH:-}${PYTHONPATH:+:$PYTHONPATH}" step peer8b 1200 python3 bench/torch_gpt_side_by_side.py \
      --ours "$B" --configs configs/llama3-8b-2m-8gpu.yaml --set parallel.cp=1 --set parallel.zero=0 \
      --set data.seq_len=16384 --set model.n_layer=12 --set train.checkpointing=none --set train.lm_head_chunk=2048 \
      --torch-compile --fp8 --fp8-recipes tensorwise rowwise \
      --contenders ours ours_fp8_tensorwise ours_fp8_rowwise compiled float8_tensorwise float8_rowwise \
      --out "$out/peer8b.md"
    [ "$dry" = 1 ] || cat "$out/peer8b.md" 2>/dev/null
  else
    echo "[fp8_study] peer8b: skipped (TORCHAO_PATH names no torchao wheel directory)"
  fi
fi
if want peerdocs; then
  if [ -n "${TORCHAO_PATH:-}" ] || [ "$dry" = 1 ]; then
    corpus=$out/stdlib_corpus.bin
    [ -f "$corpus" ] || step docs-corpus 300 python3 bench/stdlib_doc_corpus.py --out "$corpus"
    PYTHONPATH="${TORCHAO_PATH:-}${PYTHONPATH:+:$PYTHONPATH}" step peerdocs 1500 python3 bench/torch_gpt_side_by_side.py \
      --ours "$B" --configs configs/bench/gpt-1b-64k.yaml --set data.source=bytes --set "data.path=$corpus" \
      --set data.eval_path= --set data.documents=eot --set data.eot_token=0 --doc-attention flex \
      --torch-compile --fp8 --fp8-recipes tensorwise rowwise --warmup 1 --steps 3 \
      --contenders ours ours_fp8_tensorwise ours_fp8_rowwise compiled float8_tensorwise float8_rowwise \
      --out "$out/peerdocs.md"
    [ "$dry" = 1 ] || cat "$out/peerdocs.md" 2>/dev/null
  else
    echo "[fp8_study] peerdocs: skipped (TORCHAO_PATH names no torchao wheel directory)"
  fi
fi
if want parity; then
  step parity-rowwise 1500 python3 bench/fp8_loss_parity.py \
    --out "$out/parity" --ringtrain "$build/ringtrain" --recipes rowwise --time-budget 1400
  [ "$dry" = 1 ] || tail -n 12 "$out/parity-rowwise.log"
fi
[ "$dry" = 1 ] && exit 0
# One line per run: the median ms/step from its RESULT line, and the speed-up over the bf16 run of its part.
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.log"))):
    for line in open(path, errors="replace"):
        if line.startswith("RESULT "):
            rows[os.path.basename(path)[:-4]] = json.loads(line[7:])
for name, r in rows.items():
    part = name.split("-")[0] + "-" + name.split("-")[1] if name.startswith("step-") else name.split("-")[0]
    base = next((v for k, v in rows.items() if k.startswith(part) and k.endswith("bf16")), None)
    ms = r.get("ms_per_step") or r.get("median_ms")
    ratio = f"{base.get('ms_per_step') / ms:.3f}x the bf16 run's speed" if base and ms and base is not r else ""
    print(f"[fp8_study] {name:28s} {ms} ms/step {ratio}")
PY
echo "[fp8_study] done at $((SECONDS - start)) s; logs in $out"
