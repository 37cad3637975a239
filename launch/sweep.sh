#!/usr/bin/env bash
# Runs a scaling study from a sweep file and writes results.csv, summary.md and PNG plots.
#   launch/sweep.sh configs/sweeps/<name>.yaml [--out DIR] [--set key=value]... [options] [-- mpirun flags]
# Options: --build-dir DIR, --gpus N, --retry-failed, --rerun, --dry-run, --report-only, --time-budget S, -v.
# Run it again with the same arguments to resume: finished points are not rerun. See README.md
# "Scaling studies" and launch/sweep/sweep.py.
# Needs python3 with PyYAML (python3-yaml) and, for the plots, matplotlib (python3-matplotlib).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

# Debian's packages install into /usr/bin/python3, which may not be the first python3 on PATH.
python=""
for candidate in "${RINGTRAIN_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$candidate" ] || continue
  command -v "$candidate" >/dev/null 2>&1 || continue
  if "$candidate" -c 'import yaml' >/dev/null 2>&1; then
    python="$candidate"
    if "$candidate" -c 'import matplotlib' >/dev/null 2>&1; then break; fi
  fi
done
if [ -z "$python" ]; then
  echo "sweep.sh: python3 with PyYAML not found. Install it with: sudo apt-get install -y python3-yaml python3-matplotlib" >&2
  exit 2
fi
exec "$python" "$here/sweep/sweep.py" "$@"
