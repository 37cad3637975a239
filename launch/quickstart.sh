#!/usr/bin/env bash
# Installs what is missing, builds the trainer (the `ringtrain` binary and the libraries it links, not the tests or
# benchmarks: launch/test.sh builds those), and runs the main job: configs/tiny.yaml (a cp=2 ring on 2 CPU ranks,
# or on the GPU when one is present), over any earlier quickstart run in runs/tiny. Extra arguments go to
# launch/train.sh (e.g. --set train.steps=50).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/launch/install-deps.sh"
# Without a visible GPU the main job runs on CPU ranks, so a first build leaves the CUDA kernels out (3 min instead of
# 5 on a 2-core machine); launch/test.sh builds them (RINGTRAIN_CUDA=AUTO) with the rest. An existing build keeps
# its setting.
cuda=()
if ! nvidia-smi -L >/dev/null 2>&1 && [ ! -f "${BUILD_DIR:-$root/build}/CMakeCache.txt" ]; then
  echo "quickstart: no GPU visible, so the trainer is built for CPU ranks (RINGTRAIN_CUDA=OFF); launch/test.sh adds the CUDA code"
  cuda=(-DRINGTRAIN_CUDA=OFF)
fi
"$root/launch/build.sh" --target ringtrain ${cuda[@]+"${cuda[@]}"}
# train.overwrite: running the quickstart again starts the job over instead of refusing its used run_dir.
exec "$root/launch/train.sh" "$root/configs/tiny.yaml" --set train.overwrite=true "$@"
