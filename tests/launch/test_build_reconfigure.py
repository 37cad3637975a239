#!/usr/bin/env python3
"""launch/build.sh re-configures an existing build when an option it is given differs from the cache (issue 30):
launch/test.sh's -DRINGTRAIN_DEV_KERNELS=ON after launch/quickstart.sh's plain build must reach cmake.

A stand-in `cmake` first on PATH records its arguments, so no real build runs.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_SH = os.path.join(ROOT, "launch", "build.sh")


def run_build(build_dir, bin_dir, log, *args):
    env = dict(os.environ, BUILD_DIR=build_dir, PATH=bin_dir + os.pathsep + os.environ["PATH"], CMAKE_LOG=log)
    open(log, "w").close()
    r = subprocess.run(["bash", BUILD_SH, *args], env=env, capture_output=True, text=True, timeout=60)
    calls = [line.split() for line in open(log).read().splitlines()]
    return r, calls


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = os.path.join(tmp, "bin")
        os.makedirs(bin_dir)
        fake = os.path.join(bin_dir, "cmake")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\necho "$@" >> "$CMAKE_LOG"\n')
        os.chmod(fake, 0o755)
        build = os.path.join(tmp, "build")
        os.makedirs(build)
        with open(os.path.join(build, "CMakeCache.txt"), "w") as f:
            f.write("CMAKE_BUILD_TYPE:STRING=Release\nRINGTRAIN_DEV_KERNELS:BOOL=OFF\n")
        log = os.path.join(tmp, "cmake.log")

        def configured(calls):
            return any("-S" in c for c in calls)

        r, calls = run_build(build, bin_dir, log)
        if r.returncode != 0 or configured(calls) or not any("--build" in c for c in calls):
            failures.append(f"no options: expected a build without configuring, got {calls} ({r.stderr})")
        r, calls = run_build(build, bin_dir, log, "-DRINGTRAIN_DEV_KERNELS=ON")
        if r.returncode != 0 or not configured(calls) or "-DRINGTRAIN_DEV_KERNELS=ON" not in sum(calls, []):
            failures.append(f"a differing option: expected a configure with it, got {calls} ({r.stderr})")
        if "re-configuring" not in r.stdout or "RINGTRAIN_DEV_KERNELS" not in r.stdout:
            failures.append(f"a differing option: build.sh must say it re-configures, printed {r.stdout!r}")
        r, calls = run_build(build, bin_dir, log, "-DRINGTRAIN_DEV_KERNELS=OFF")
        if r.returncode != 0 or configured(calls):
            failures.append(f"an option equal to the cache: expected no configure, got {calls}")
        r, calls = run_build(build, bin_dir, log, "--target", "ringtrain")
        if r.returncode != 0 or configured(calls) or ["--target", "ringtrain"] != [
                a for c in calls if "--build" in c for a in c[c.index("--target"):] if "--target" in c]:
            failures.append(f"--target ringtrain: expected a build of that target alone, no configure, got {calls}")
        r, calls = run_build(os.path.join(tmp, "fresh"), bin_dir, log)
        if r.returncode != 0 or not configured(calls):
            failures.append(f"no cache: expected a configure, got {calls}")
    for f in failures:
        print("FAIL", f)
    print(f"test_build_reconfigure: {len(failures)} check(s) failed" if failures else "test_build_reconfigure: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
