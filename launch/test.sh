#!/usr/bin/env bash
# Installs what is missing, builds everything (the tests and benchmarks that launch/quickstart.sh leaves out), and
# runs every test (unit, mpi, gpu, integration).
# GPU tests skip with a message when no CUDA device is present.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/launch/install-deps.sh"
# + the kernel lab, so that it keeps compiling; RINGTRAIN_CUDA=AUTO compiles the CUDA code wherever nvcc is (a
# quickstart on a machine without a GPU built the trainer without it).
"$root/launch/build.sh" -DRINGTRAIN_DEV_KERNELS=ON -DRINGTRAIN_CUDA=AUTO
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)" "$@"
