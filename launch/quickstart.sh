#!/usr/bin/env bash
# Installs what is missing, builds the trainer (the `ringtrain` binary and the libraries it links, not the tests or
# benchmarks: launch/test.sh builds those), and runs the main job: configs/tiny.yaml (a cp=2 ring on 2 CPU ranks,
# or on the GPU when one is present), over any earlier quickstart run in runs/tiny. Extra arguments go to
# launch/train.sh (e.g. --set train.steps=50).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/launch/install-deps.sh"
"$root/launch/build.sh" --target ringtrain
# train.overwrite: running the quickstart again starts the job over instead of refusing its used run_dir.
exec "$root/launch/train.sh" "$root/configs/tiny.yaml" --set train.overwrite=true "$@"
