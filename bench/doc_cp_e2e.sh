#!/usr/bin/env bash
# Packed documents end to end, per context-parallel scheme: trains <config> on real documents at parallel.cp = <cp>
# once with each parallel.cp_scheme (ring, gather, auto) and tabulates step time, attention time, exposed
# communication, how often the gather ran and the first step's loss (the schemes are exact, so the three first
# losses agree to float rounding).
#   bench/doc_cp_e2e.sh <out-dir> <config.yaml> <cp> [steps] [-- --set key=value ...]
# Examples:
#   BUILD_DIR=build-gpu bench/doc_cp_e2e.sh /tmp/doc-cp8 configs/gpt-1b-64k.yaml 8 4 -- \
#     --set data.seq_len=524288 --set parallel.comm=nccl                    # 64K tokens per GPU on 8 GPUs
#   BUILD_DIR=build-cpu bench/doc_cp_e2e.sh /tmp/doc-cp2 configs/tiny.yaml 2 3 -- --set device=cpu \
#     --set parallel.comm=mpi --set data.seq_len=512                        # CPU ranks (the CI test's run)
# Data: the .py files of `python3`'s standard library, sorted by path, whole files joined with one NUL byte between
# two (bench/stdlib_doc_corpus.py), first ~8 MB (DOC_CORPUS_MAX_BYTES, default 8000000; DOC_CORPUS_MAX_FILE_BYTES=N
# keeps only files of at most N bytes, several documents per sample at a short seq_len). Built once under
# <out-dir> (reused when there). Byte-level training on it: data.source bytes, data.documents eot, data.eot_token 0,
# model.vocab_size 256; the held-out tail is not used (train.eval_every 0).
# Each run: launch/train.sh <config> with those sets, parallel.cp = <cp>, the scheme, train.steps = <steps> (default
# 4), optim.warmup_steps 1, log.every 1, no eval and no checkpoint, train.run_dir <out-dir>/<scheme>, then the extra
# sets (they win; a further `--` and what follows it go to mpirun, as in launch/train.sh).
# DOC_CP_SCHEMES picks the runs (default "ring gather auto", in that order; DOC_CP_SCHEMES=gather runs one scheme, as
# bench/multi_gpu.sh's ready-flag rows do under several environments). BUILD_DIR picks the build (default build/, as
# launch/train.sh). Each run is under `timeout` (DOC_CP_TIMEOUT_S, default 420 s: at the limit launch/train.sh gets
# TERM and stops its ranks, see its header). Writes under <out-dir>:
#   corpus-<max bytes>-<max file bytes>.bin  the documents (and .lengths: one length per line, the input of
#                                            `ringtrain plan <config> --doc-lengths`)
#   <scheme>.log, <scheme>/metrics.jsonl     each run's output and step lines
#   summary.md, summary.jsonl                per scheme (bench/doc_cp_summary.py): exit status, medians over the
#                                            steps after the first of ms/step, tok/s, attn_ms and comm_exposed_ms
#                                            (rank 0), the share of steps that ran the gather, the first step's loss
# A failed run is reported and the others still run. Exit status: the number of failed runs (0-3, or up to the
# number of DOC_CP_SCHEMES); 64 for a usage error or a corpus that could not be built.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
usage() {
  echo "usage: bench/doc_cp_e2e.sh <out-dir> <config.yaml> <cp> [steps] [-- --set key=value ...]" >&2
  exit 64
}
[ $# -ge 3 ] || usage
out="$1" config="$2" cp="$3"
shift 3
steps=4
if [ $# -gt 0 ] && [ "$1" != "--" ]; then steps="$1"; shift; fi
if [ $# -gt 0 ]; then [ "$1" = "--" ] || usage; shift; fi
extra=("$@")
[[ "$cp" =~ ^[1-9][0-9]*$ ]] && [[ "$steps" =~ ^[1-9][0-9]*$ ]] || usage
[ -f "$config" ] || { echo "doc_cp_e2e.sh: config '$config' not found" >&2; exit 64; }
read -r -a schemes <<<"${DOC_CP_SCHEMES:-ring gather auto}"
[ ${#schemes[@]} -gt 0 ] || usage
for scheme in "${schemes[@]}"; do
  case "$scheme" in
    ring | gather | auto) ;;
    *) echo "doc_cp_e2e.sh: DOC_CP_SCHEMES: '$scheme' is not a parallel.cp_scheme (ring, gather, auto)" >&2; exit 64 ;;
  esac
done
build="${BUILD_DIR:-$root/build}"
limit="${DOC_CP_TIMEOUT_S:-420}"
max_bytes="${DOC_CORPUS_MAX_BYTES:-8000000}"
max_file_bytes="${DOC_CORPUS_MAX_FILE_BYTES:-0}"
mkdir -p "$out" || { echo "doc_cp_e2e.sh: cannot create the out-dir '$out'" >&2; exit 64; }
out="$(cd "$out" && pwd)"

corpus="$out/corpus-$max_bytes-$max_file_bytes.bin"
if [ ! -s "$corpus" ]; then
  python3 "$root/bench/stdlib_doc_corpus.py" --out "$corpus" --lengths "${corpus%.bin}.lengths" \
    --max-bytes "$max_bytes" --max-file-bytes "$max_file_bytes" ||
    { echo "doc_cp_e2e.sh: could not build the corpus $corpus" >&2; exit 64; }
fi
echo "doc_cp_e2e.sh: $config at cp=$cp, $steps steps, build $build, corpus $corpus ($(wc -c <"$corpus") bytes)"

failed=0
runs=()
for scheme in "${schemes[@]}"; do
  rm -rf "${out:?}/$scheme"
  t0=$SECONDS
  timeout "$limit" env BUILD_DIR="$build" "$root/launch/train.sh" "$config" \
    --set parallel.cp="$cp" --set parallel.cp_scheme="$scheme" \
    --set data.source=bytes --set data.path="$corpus" --set data.eval_path= --set data.documents=eot \
    --set data.eot_token=0 --set model.vocab_size=256 \
    --set train.steps="$steps" --set optim.warmup_steps=1 --set train.eval_every=0 \
    --set log.every=1 --set log.metrics_file=metrics.jsonl \
    --set checkpoint.every=0 --set checkpoint.save_final=false --set checkpoint.resume= \
    --set train.run_dir="$out/$scheme" ${extra[@]+"${extra[@]}"} > "$out/$scheme.log" 2>&1
  rc=$?
  seconds=$((SECONDS - t0))
  echo "doc_cp_e2e.sh: scheme $scheme: exit $rc in $seconds s (log $out/$scheme.log)"
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    tail -n 5 "$out/$scheme.log" | sed 's/^/    /'
  fi
  runs+=(--run "$scheme:$rc:$seconds")
done
python3 "$root/bench/doc_cp_summary.py" --out-dir "$out" "${runs[@]}" ||
  echo "doc_cp_e2e.sh: the summary failed" >&2
echo "doc_cp_e2e.sh: $failed run(s) failed"
exit "$failed"
