#!/usr/bin/env python3
"""Fails when ptxas serializes the wgmmas of a shipping Hopper kernel.

ptxas reports a broken wgmma pipeline (C7510-C7519, "Potential Performance Loss: wgmma.mma_async instructions are
serialized ...") as `info`, not as a warning, so the build passes while the kernel runs up to a third slower
(bench/NOTES.md, "Mbarrier releases one arrival per warp": fwd d128 -27%). This test compiles every CUDA source
under kernels/cuda (and its sub-folders) that reaches a wgmma header, for each sm_90a-class architecture of the build, with
`-Xptxas -v`, and fails on any such line, naming the file, the kernel and the reason.

  check_wgmma_pipelines.py --nvcc PATH --root SRC_DIR --archs "90a;80"
  check_wgmma_pipelines.py --self-test     # the parser on canned ptxas lines (no compiler needed)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

SERIALIZED = re.compile(r"\((C75\d\d)\) Potential Performance Loss: (wgmma[^']*?)(?: in the function '([^']+)')?\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"(kernels/[^"]+)"', re.M)
WGMMA_HEADERS = ("kernels/cuda/attention/attn_sm90_wgmma_ops.cuh",)


def serialization_findings(ptxas_output):
    """(code, reason, function) for each ptxas line that reports serialized wgmmas."""
    found = []
    for line in ptxas_output.splitlines():
        m = SERIALIZED.search(line)
        if m:
            found.append((m.group(1), m.group(2).strip(), m.group(3) or "?"))
    return found


def reaches_wgmma(path, root, seen=None):
    """True when `path` (relative to root) includes a wgmma header, directly or through project headers."""
    seen = set() if seen is None else seen
    if path in seen:
        return False
    seen.add(path)
    try:
        text = open(os.path.join(root, path)).read()
    except OSError:
        return False
    for inc in INCLUDE.findall(text):
        if inc in WGMMA_HEADERS or reaches_wgmma(inc, root, seen):
            return True
    return False


def self_test():
    canned = (
        "ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
        "wgmma instructions defining input registers of a wgmma between start and end of the pipeline stage in the "
        "function '_Z6kernelv'\n"
        "ptxas info    : Used 168 registers, used 16 barriers\n"
        "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
        "insufficient register resources for the wgmma pipeline in the function '_Z5otherv'\n")
    got = serialization_findings(canned)
    assert [g[0] for g in got] == ["C7513", "C7512"], got
    assert got[0][2] == "_Z6kernelv" and got[1][2] == "_Z5otherv", got
    assert serialization_findings("ptxas info    : Used 168 registers\n") == []
    print("check_wgmma_pipelines: self-test passed (2 findings in the canned output, none in a clean one)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvcc")
    ap.add_argument("--root")
    ap.add_argument("--archs", default="90a")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.nvcc or not args.root:
        ap.error("--nvcc and --root are required (or --self-test)")
    archs = [a for a in args.archs.replace(",", ";").split(";") if a.startswith("90")]
    if not archs:
        print(f"check_wgmma_pipelines: no sm_90-class architecture in {args.archs!r}; nothing to check")
        return 0
    cuda_dir = os.path.join(args.root, "kernels/cuda")
    candidates = [os.path.relpath(os.path.join(d, f), args.root) for d, _, fs in os.walk(cuda_dir) for f in fs]
    sources = sorted(f for f in candidates if f.endswith(".cu") and reaches_wgmma(f, args.root))
    if not sources:
        print("check_wgmma_pipelines: no source reaches a wgmma header; is --root the source tree?")
        return 1
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, src in enumerate(sources):
            for arch in archs:
                cmd = [args.nvcc, "-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr",
                       f"-gencode=arch=compute_{arch},code=sm_{arch}", "-DRINGTRAIN_HAVE_CUDA=1", "-I", args.root,
                       "-Xptxas", "-v", "-c", os.path.join(args.root, src), "-o", os.path.join(tmp, "k.o")]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    print(r.stdout + r.stderr)
                    print(f"check_wgmma_pipelines: {src} did not compile for sm_{arch}")
                    return 1
                for code, reason, fn in serialization_findings(r.stdout + r.stderr):
                    bad.append((src, arch, code, reason, fn))
            print(f"[{i + 1}/{len(sources)}] {src}: checked for sm_{', sm_'.join(archs)}", flush=True)
    for src, arch, code, reason, fn in bad:
        print(f"FAIL {src} (sm_{arch}) {code}: {reason}\n     kernel: {fn}")
    if bad:
        print(f"check_wgmma_pipelines: {len(bad)} kernel(s) with serialized wgmmas. Move the instructions ptxas names "
              "out of the stretch between a wgmma's issue and its wait, or give it back registers; "
              "`nvcc -Xptxas -v` shows the line again.")
        return 1
    print(f"check_wgmma_pipelines: {len(sources)} sources, no serialized wgmma pipeline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
