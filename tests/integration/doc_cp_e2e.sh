#!/usr/bin/env bash
# bench/doc_cp_e2e.sh on CPU ranks: configs/tiny.yaml at cp = 2 (comm mpi, 2 ranks) trains 3 steps on packed
# standard-library documents under each parallel.cp_scheme (ring, gather, auto); tests/integration/doc_cp_e2e_check.py
# then requires every run to exit 0, ring never and gather always to run the gather, and the three first-step losses
# to agree within 1e-4 relative, and shows that it catches each of those going wrong (negative controls).
# Corpus: only the stdlib files of at most 512 bytes (DOC_CORPUS_MAX_FILE_BYTES: 46 files, 10 KB, median 187 bytes in
# Debian 12's /usr/lib/python3.11; 206 files, 38 KB with CPython's test/ package), so a 512-token sample holds two
# to three documents. ~5 s on 2 cores.
#   tests/integration/doc_cp_e2e.sh <build dir> <work dir> [python3]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
work="$2"
py="${3:-python3}"
rm -rf "$work"
mkdir -p "$work"
steps=3
status=0
BUILD_DIR="$build" DOC_CORPUS_MAX_FILE_BYTES=512 "$root/bench/doc_cp_e2e.sh" "$work" "$root/configs/tiny.yaml" 2 \
  "$steps" -- --set device=cpu --set parallel.comm=mpi --set data.seq_len=512 || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: bench/doc_cp_e2e.sh exited with $status ($status failed run(s))" >&2
  for log in "$work"/*.log; do echo "---- $log ----" >&2; tail -n 20 "$log" >&2; done
  exit 1
fi
"$py" "$root/tests/integration/doc_cp_e2e_check.py" "$work" --steps "$steps" --negative-controls
