#!/usr/bin/env python3
"""CI checks that import-hf, export-hf and eval --dump-logits fail cleanly (issue 31, rows 4, 6, 8, 10, 14).

  test_hf_failures.py --ringtrain build/ringtrain CASE

CASE:
  out_paths   --out "X/" writes X (no hidden X/.tmp_); --out "", ".", a path under a file and an existing X are
              refused with exit 2 before anything is written; export-hf --max-position-embeddings 0 / -7 and a bad
              --dtype are refused with exit 2; no error points at train.run_dir
  disk_full   import-hf, export-hf and eval --dump-logits under a file-size limit (RLIMIT_FSIZE, SIGXFSZ
              ignored: every write past the limit fails with EFBIG, as on a full disk) fail saying so and leave
              nothing behind: no .tmp_<out>, no output, no truncated .npy; the same commands then succeed
  bad_models  config.json values training cannot use (rms_norm_eps <= 0, max_position_embeddings <= 0, a
              rope_scaling / rope_parameters with a factor but no type) and NaN / Inf weights are refused with exit
              2, one error line naming the field or tensor and its value, and no checkpoint
"""
import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import hf_fixture as fx
except ImportError as e:  # CI installs python3-numpy (.ci/run, launch/install-deps.sh)
    print(f"test_hf_failures: NumPy is required ({e}); install python3-numpy", file=sys.stderr)
    sys.exit(1)

EXIT_USAGE = 2  # README "When things go wrong": config, data and checkpoint errors
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def run(cmd, cwd=None, file_limit=None, env=None):
    """Runs cmd (stdout and stderr together); file_limit: the largest file it may write, in bytes."""
    def limit_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, **MPI_ENV, **(env or {})), preexec_fn=limit_files if file_limit else None, timeout=300)
    return p


def tail(p):
    return p.stdout.strip()[-300:]


def entries(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def import_fixture(args, tmp, name="gqa_llama3"):
    hf = os.path.join(tmp, "hf_" + name)
    fx.write_model_dir(hf, name)
    ckpt = os.path.join(tmp, "ckpt_" + name)
    p = run([args.ringtrain, "import-hf", hf, "--out", ckpt, "--device", "cpu"])
    if p.returncode != 0:
        raise SystemExit(f"import of the fixture failed: {p.stdout}")
    return hf, ckpt


def refused(p, fragment, what, extra=True):
    check(p.returncode == EXIT_USAGE and fragment in p.stdout and p.stdout.count("error") == 1 and extra,
          f"{what}: exit {p.returncode} (want {EXIT_USAGE}), one error naming '{fragment}': {tail(p)}")


def case_out_paths(args, tmp):
    hf, ckpt = import_fixture(args, tmp)
    # A trailing slash names the directory itself.
    for cmd, what, marker in (
            (["import-hf", hf, "--device", "cpu"], "import-hf", "model.safetensors"),
            (["export-hf", ckpt], "export-hf", "config.json")):
        parent = os.path.join(tmp, "slash_" + what)
        os.makedirs(parent)
        p = run([args.ringtrain, *cmd, "--out", os.path.join(parent, "out") + "/"])
        check(p.returncode == 0 and os.path.isfile(os.path.join(parent, "out", marker)) and
              entries(parent) == ["out"] and not any(e.startswith(".tmp_") for e in entries(os.path.join(parent, "out"))),
              f"{what} --out X/: writes X itself, nothing hidden (exit {p.returncode}, {entries(parent)}): {tail(p)}")
        p = run([args.ringtrain, *cmd, "--out", os.path.join(parent, "out") + "/"])
        refused(p, "already exists", f"{what} --out X/ again")
        # "" and "." name no new directory; nothing is written into the working directory.
        cwd = os.path.join(tmp, "cwd_" + what)
        os.makedirs(cwd)
        for out, fragment in (("", "--out is empty"), (".", "names no new directory"), ("sub/..", "names no new")):
            p = run([args.ringtrain, *cmd, "--out", out], cwd=cwd)
            refused(p, fragment, f"{what} --out '{out}'", entries(cwd) == [])
            check(entries(cwd) == [], f"{what} --out '{out}': the working directory stays empty: {entries(cwd)}")
        # A path under a file: refused up front, with a hint about --out (not train.run_dir).
        blocker = os.path.join(tmp, "a_file_" + what)
        open(blocker, "w").close()
        p = run([args.ringtrain, *cmd, "--out", os.path.join(blocker, "x")])
        refused(p, "is a file, not a directory", f"{what} --out under a file", "train.run_dir" not in p.stdout)
    # --max-position-embeddings must be positive; given, it is written as is.
    for bad in ("0", "-7"):
        out = os.path.join(tmp, "mpe" + bad)
        p = run([args.ringtrain, "export-hf", ckpt, "--out", out, "--max-position-embeddings", bad])
        refused(p, f"--max-position-embeddings {bad} must be > 0", f"export-hf --max-position-embeddings {bad}",
                not os.path.exists(out))
    out = os.path.join(tmp, "mpe512")
    p = run([args.ringtrain, "export-hf", ckpt, "--out", out, "--max-position-embeddings", "512"])
    got = json.load(open(os.path.join(out, "config.json")))["max_position_embeddings"] if p.returncode == 0 else None
    check(got == 512, f"export-hf --max-position-embeddings 512 writes 512 (got {got}): {tail(p)}")
    p = run([args.ringtrain, "export-hf", ckpt, "--out", os.path.join(tmp, "fp8"), "--dtype", "fp8"])
    refused(p, "--dtype 'fp8' must be bf16 or fp32", "export-hf --dtype fp8")
    p = run([args.ringtrain, "import-hf", hf, "--out", os.path.join(tmp, "dev"), "--device", "tpu"])
    refused(p, "--device 'tpu' must be auto, cpu or cuda", "import-hf --device tpu")
    p = run([args.ringtrain, "export-hf", os.path.join(tmp, "no_such_ckpt"), "--out", os.path.join(tmp, "nc")])
    refused(p, "no_such_ckpt", "export-hf of a missing checkpoint")


def write_eval_config(path, tmp):
    rng = np.random.default_rng(5)
    data = os.path.join(tmp, "eval.bin")
    fx.write_llmc_shard(data, rng.integers(0, fx.VOCAB, 4000))
    with open(path, "w") as f:
        f.write(f"""device: cpu
data: {{source: shards, path: {data}, eval_path: {data}, seq_len: 96}}
train: {{batch_size: 2, steps: 1, eval_every: 0, eval_batches: 1, run_dir: {os.path.join(tmp, 'run')}}}
optim: {{warmup_steps: 0}}
checkpoint: {{save_final: false}}
""")


def case_disk_full(args, tmp):
    hf, ckpt = import_fixture(args, tmp)
    size = os.path.getsize(os.path.join(ckpt, "model.safetensors"))
    limit = size // 8  # model.safetensors (import) and the first shard (export, after config.json) cross it
    for cmd, what in ((["import-hf", hf, "--device", "cpu"], "import-hf"),
                      (["export-hf", ckpt, "--dtype", "fp32", "--shard-bytes", str(size // 4)], "export-hf")):
        parent = os.path.join(tmp, "full_" + what)
        os.makedirs(parent)
        out = os.path.join(parent, "out")
        p = run([args.ringtrain, *cmd, "--out", out], file_limit=limit)
        check(p.returncode != 0 and "File too large" in p.stdout and "partial output was removed" in p.stdout,
              f"{what} on a full disk: fails saying so (exit {p.returncode}): {tail(p)}")
        check(entries(parent) == [], f"{what} on a full disk: nothing left behind in {parent}: {entries(parent)}")
        p = run([args.ringtrain, *cmd, "--out", out])
        check(p.returncode == 0 and entries(parent) == ["out"], f"{what}: the retry with space succeeds: {tail(p)}")
    # eval --dump-logits: (2, 96, 300) float32 logits are 230 KB. Open MPI's singleton start-up keeps its PMIx
    # data in a shared-memory file of several MB unless told to use a hash table (PMIX_MCA_gds=hash).
    cfg = os.path.join(tmp, "eval.yaml")
    write_eval_config(cfg, tmp)
    dumps = os.path.join(tmp, "dumps")
    os.makedirs(dumps)
    dump = os.path.join(dumps, "logits.npy")
    cmd = [args.ringtrain, "eval", cfg, "--checkpoint", ckpt, "--dump-logits", dump, "--set", "train.init_from=" + ckpt]
    p = run(cmd, file_limit=100_000, env={"PMIX_MCA_gds": "hash"})
    check(p.returncode != 0 and "File too large" in p.stdout, f"eval --dump-logits on a full disk fails: {tail(p)}")
    check(entries(dumps) == [], f"eval --dump-logits on a full disk: no truncated .npy left: {entries(dumps)}")
    p = run(cmd)
    ok = p.returncode == 0 and entries(dumps) == ["logits.npy", "logits.npy.tokens.npy"]
    check(ok and np.load(dump).shape == (2, 96, fx.VOCAB),
          f"eval --dump-logits with space: logits (2, 96, {fx.VOCAB}) and tokens, nothing else: {entries(dumps)}")


def with_bad_weight(hf, tensor, value):
    """Sets element 5 of `tensor` in the fixture's single F32 model.safetensors to `value`."""
    path = os.path.join(hf, "model.safetensors")
    tensors, meta = fx.read_safetensors(path)
    rows = []
    for name, (dtype, shape, raw) in tensors.items():
        x = np.frombuffer(raw, dtype="<f4").copy()
        if name == tensor:
            x[5] = value
        rows.append((name, dtype, x, shape))
    fx.write_safetensors(path, rows, meta)


def case_bad_models(args, tmp):
    cases = [
        ("gqa_llama3", {"rms_norm_eps": 0}, "'rms_norm_eps' = 0 must be a positive"),
        ("tied_mha", {"rms_norm_eps": -1e-5}, "'rms_norm_eps' = -1e-05 must be a positive"),
        ("gqa_llama3", {"max_position_embeddings": 0}, "'max_position_embeddings' = 0 must be > 0"),
        ("tied_mha", {"max_position_embeddings": -4096}, "'max_position_embeddings' = -4096 must be > 0"),
        ("gqa_llama3", {"rope_scaling": {"factor": 4.0}},
         "rope_scaling has no 'rope_type' (or 'type') but sets 'factor' = 4.0"),
        ("tied_mha", {"rope_parameters": {"factor": 2.0, "rope_theta": 1e4}},
         "rope_parameters has no 'rope_type' (or 'type') but sets 'factor' = 2.0"),
    ]
    for i, (name, edits, expect) in enumerate(cases):
        hf = os.path.join(tmp, f"bad{i}")
        fx.write_model_dir(hf, name, config_edits=edits)
        out = os.path.join(tmp, f"c{i}")
        p = run([args.ringtrain, "import-hf", hf, "--out", out, "--device", "cpu"])
        refused(p, expect, f"import-hf refuses {edits}", not os.path.exists(out))
    for value, text in ((float("nan"), "nan"), (float("-inf"), "-inf")):
        hf = os.path.join(tmp, "bad_weight_" + text)
        fx.write_model_dir(hf, "tied_mha")
        with_bad_weight(hf, "model.layers.1.mlp.up_proj.weight", value)
        out = os.path.join(tmp, "c_" + text)
        p = run([args.ringtrain, "import-hf", hf, "--out", out, "--device", "cpu"])
        refused(p, f"tensor 'model.layers.1.mlp.up_proj.weight' in model.safetensors holds 1 non-finite value(s) "
                   f"(the first, {text}, at flat index 5)", f"import-hf refuses a {text} weight", not os.path.exists(out))
    # The unchanged fixture imports (the checks above are not refusing everything).
    hf = os.path.join(tmp, "good")
    fx.write_model_dir(hf, "tied_mha", config_edits={"rope_parameters": {"rope_theta": 1e4}})
    p = run([args.ringtrain, "import-hf", hf, "--out", os.path.join(tmp, "c_good"), "--device", "cpu"])
    check(p.returncode == 0, f"import-hf of the fixture (rope_parameters with rope_theta only) succeeds: {tail(p)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtrain", required=True)
    ap.add_argument("case", choices=["out_paths", "disk_full", "bad_models"])
    args = ap.parse_args()
    args.ringtrain = os.path.abspath(args.ringtrain)
    tmp = tempfile.mkdtemp(prefix="rt_hf_fail_")
    try:
        globals()["case_" + args.case](args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
