#!/usr/bin/env python3
"""README command 1 builds only the trainer; command 2 builds the rest (issue 45).

launch/quickstart.sh and launch/test.sh run as written, from a copy of launch/ where install-deps.sh and train.sh
are stand-ins that record their calls and the real launch/build.sh runs under stand-in `cmake` and `ctest` first on
PATH (they record their arguments), so nothing is installed or built. Checks:
  quickstart: every `cmake --build` names exactly one target, `ringtrain`, and train.sh then runs configs/tiny.yaml;
  test.sh: `cmake --build` names no target (everything: the tests and benchmarks), then ctest runs.
  CUDA: with no GPU visible (a stand-in nvidia-smi that fails) and no build yet, quickstart configures
  -DRINGTRAIN_CUDA=OFF (the main job runs on CPU ranks); with a GPU visible it does not; test.sh configures
  -DRINGTRAIN_CUDA=AUTO, so the CUDA code is compiled wherever nvcc is.
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RECORDER = '#!/bin/sh\necho "{name} $*" >> "$CALL_LOG"\n'


def write_exec(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run(tree, bin_dir, script, log):
    open(log, "w").close()
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], CALL_LOG=log,
               BUILD_DIR=os.path.join(tree, "build"))
    r = subprocess.run(["bash", os.path.join(tree, "launch", script)], env=env, capture_output=True, text=True,
                       timeout=60)
    return r, [line.split() for line in open(log).read().splitlines()]


def configure_args(calls):
    """The arguments of every cmake configure call (not --build)."""
    return [c[1:] for c in calls if c[0] == "cmake" and "--build" not in c]


def build_targets(calls):
    """The --target names of every `cmake --build` call (one list per call)."""
    out = []
    for c in calls:
        if c[0] == "cmake" and "--build" in c:
            out.append([c[i + 1] for i, a in enumerate(c) if a == "--target" and i + 1 < len(c)])
    return out


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "tree")
        os.makedirs(os.path.join(tree, "launch"))
        for script in ("quickstart.sh", "test.sh", "build.sh"):
            shutil.copy(os.path.join(ROOT, "launch", script), os.path.join(tree, "launch", script))
        for stub in ("install-deps.sh", "train.sh"):
            write_exec(os.path.join(tree, "launch", stub), RECORDER.format(name=stub))
        bin_dir = os.path.join(tmp, "bin")
        os.makedirs(bin_dir)
        for tool in ("cmake", "ctest"):
            write_exec(os.path.join(bin_dir, tool), RECORDER.format(name=tool))
        log = os.path.join(tmp, "calls.log")
        no_gpu = '#!/bin/sh\nexit 6\n'  # nvidia-smi's answer on a machine without a visible GPU
        write_exec(os.path.join(bin_dir, "nvidia-smi"), no_gpu)

        r, calls = run(tree, bin_dir, "quickstart.sh", log)
        if not any("-DRINGTRAIN_CUDA=OFF" in a for a in configure_args(calls)):
            failures.append(f"quickstart.sh without a GPU must configure -DRINGTRAIN_CUDA=OFF, got {configure_args(calls)}")
        builds = build_targets(calls)
        if r.returncode != 0:
            failures.append(f"quickstart.sh exited {r.returncode}: {r.stderr}")
        if not builds or any(t != ["ringtrain"] for t in builds):
            failures.append(f"quickstart.sh: every cmake --build must name only --target ringtrain, got {builds} "
                            f"(calls {calls})")
        names = [c[0] for c in calls]
        if "install-deps.sh" not in names or "train.sh" not in names or names.index("train.sh") < max(
                i for i, c in enumerate(calls) if c[0] == "cmake"):
            failures.append(f"quickstart.sh: expected install-deps, cmake, then train.sh; got {names}")
        elif not any(a.endswith("configs/tiny.yaml") for a in calls[names.index("train.sh")]):
            failures.append(f"quickstart.sh: train.sh must run configs/tiny.yaml, got {calls[names.index('train.sh')]}")

        write_exec(os.path.join(bin_dir, "nvidia-smi"), '#!/bin/sh\necho "GPU 0: NVIDIA H200"\n')
        r, gpu_calls = run(tree, bin_dir, "quickstart.sh", log)
        if any("-DRINGTRAIN_CUDA=OFF" in a for a in configure_args(gpu_calls)):
            failures.append(f"quickstart.sh with a GPU visible must not turn CUDA off, got {configure_args(gpu_calls)}")
        write_exec(os.path.join(bin_dir, "nvidia-smi"), no_gpu)

        # test.sh after the quickstart's build (a cache now exists, as on a newcomer's machine).
        os.makedirs(os.path.join(tree, "build"), exist_ok=True)
        with open(os.path.join(tree, "build", "CMakeCache.txt"), "w") as f:
            f.write("CMAKE_BUILD_TYPE:STRING=Release\nRINGTRAIN_DEV_KERNELS:BOOL=OFF\n")
        r, calls = run(tree, bin_dir, "test.sh", log)
        builds = build_targets(calls)
        if r.returncode != 0:
            failures.append(f"test.sh exited {r.returncode}: {r.stderr}")
        if not builds or any(t for t in builds):
            failures.append(f"test.sh: cmake --build must build everything (no --target), got {builds}")
        if not any("-DRINGTRAIN_CUDA=AUTO" in a for a in configure_args(calls)):
            failures.append(f"test.sh must configure -DRINGTRAIN_CUDA=AUTO after a CPU-only quickstart, got "
                            f"{configure_args(calls)}")
        if not any(c[0] == "ctest" for c in calls):
            failures.append(f"test.sh: no ctest call after the build ({calls})")
    for f in failures:
        print("FAIL", f)
    print(f"test_quickstart_build: {len(failures)} check(s) failed" if failures else "test_quickstart_build: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
