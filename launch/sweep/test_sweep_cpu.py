"""End-to-end test of launch/sweep.sh on CPU ranks (registered with ctest by tests/integration/sweep.cmake):
  1. configs/sweeps/tiny-cpu.yaml (2 axes x 2 values, 2 ranks per point) gives results.csv with the expected
     rows and columns, and non-empty PNGs;
  2. running it again reruns nothing; with one point's status removed, it reruns only that point;
  3. a point with an invalid value is recorded as failed (with ringtrain's error) and the sweep goes on;
  4. points that fail while training are recorded as failed with their error, and the sweep goes on.
    python3 launch/sweep/test_sweep_cpu.py --build-dir build [--work-dir DIR]
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SWEEP_SH = os.path.join(ROOT, "launch", "sweep.sh")
TINY = os.path.join(ROOT, "configs", "sweeps", "tiny-cpu.yaml")
BUILD_DIR = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
WORK_DIR = None

TINY_BASE = """base:
  model: {n_layer: 2, d_model: 32, n_head: 2, n_kv_head: 2, vocab_size: 64, d_ff: 64}
  data: {source: copy, seq_len: 32}
  train: {batch_size: 2, lm_head_chunk: 64}
  device: cpu
  parallel: {cp: 2, comm: mpi}
measure: {steps: 3, warmup_steps: 1, timeout_s: 120}
"""


def sweep(*args):
    proc = subprocess.run(["bash", SWEEP_SH, *args, "--build-dir", BUILD_DIR], capture_output=True, text=True,
                          timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def read_text(path):
    with open(path) as f:
        return f.read()


def is_png(path):
    with open(path, "rb") as f:
        head = f.read(8)
    return head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 2000


class SweepCpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = WORK_DIR or tempfile.mkdtemp(prefix="sweep-test-")
        if os.path.isdir(cls.work):
            shutil.rmtree(cls.work)
        os.makedirs(cls.work)

    def test_1_tiny_sweep_resume(self):
        out = os.path.join(self.work, "tiny")
        rc, log = sweep(TINY, "--out", out)
        self.assertEqual(rc, 0, log)
        header, rows = read_csv(os.path.join(out, "results.csv"))
        for col in ("point", "status", "error", "data.seq_len", "parallel.layout", "ranks", "step_ms", "tok_per_s",
                    "tok_per_s_per_gpu", "mfu", "peak_mem_gib", "plan_peak_gib", "attn_ms", "comm_exposed_ms",
                    "comm_exposed_ms_per_ring_step", "loss", "strong_scaling_eff", "weak_scaling_eff"):
            self.assertIn(col, header)
        self.assertEqual([r["point"] for r in rows],
                         ["seq_len-32__layout-zigzag", "seq_len-32__layout-contiguous",
                          "seq_len-64__layout-zigzag", "seq_len-64__layout-contiguous"])
        for r in rows:
            self.assertEqual(r["status"], "done", r)
            self.assertEqual(r["error"], "")
            self.assertEqual(r["ranks"], "2")
            self.assertEqual(r["cp"], "2")
            self.assertEqual(r["steps_measured"], "3")
            self.assertGreater(float(r["step_ms"]), 0)
            tokens = 2 * int(r["data.seq_len"])
            self.assertAlmostEqual(float(r["tok_per_s"]), tokens / (float(r["step_ms"]) / 1e3), delta=1e-3 *
                                   float(r["tok_per_s"]))
            self.assertGreater(float(r["loss"]), 0)
            self.assertGreater(float(r["plan_peak_gib"]), 0)
            self.assertEqual(r["layout"], r["parallel.layout"])
        plots = os.path.join(out, "plots")
        for name in ("throughput_vs_context.png", "memory_vs_context.png"):
            self.assertTrue(is_png(os.path.join(plots, name)), name)
        self.assertTrue(os.path.getsize(os.path.join(out, "summary.md")) > 0)

        # Everything finished: nothing reruns, and nothing is rewritten.
        statuses = {r["point"]: read_text(os.path.join(out, "points", r["point"], "status.json")) for r in rows}
        rc, log2 = sweep(TINY, "--out", out)
        self.assertEqual(rc, 0, log2)
        self.assertEqual(log2.count("done earlier, not rerun"), 4, log2)
        self.assertNotIn("running on", log2)
        for pid, text in statuses.items():
            self.assertEqual(read_text(os.path.join(out, "points", pid, "status.json")), text)

        # Half-finished (one point's status gone, as after a crash mid-sweep): only that point runs.
        os.remove(os.path.join(out, "points", "seq_len-64__layout-zigzag", "status.json"))
        rc, log3 = sweep(TINY, "--out", out)
        self.assertEqual(rc, 0, log3)
        self.assertEqual(log3.count("running on 2 rank(s)"), 1, log3)
        self.assertIn("seq_len=64 layout=zigzag: running", log3)
        _, rows3 = read_csv(os.path.join(out, "results.csv"))
        self.assertEqual([r["status"] for r in rows3], ["done"] * 4)

    def test_2_invalid_value_fails_and_sweep_continues(self):
        path = os.path.join(self.work, "invalid.yaml")
        with open(path, "w") as f:
            f.write(TINY_BASE + "axes:\n  parallel.layout: [diagonal, zigzag]\n")
        out = os.path.join(self.work, "invalid")
        rc, log = sweep(path, "--out", out)
        self.assertEqual(rc, 0, log)
        _, rows = read_csv(os.path.join(out, "results.csv"))
        self.assertEqual([r["status"] for r in rows], ["failed", "done"], log)
        self.assertIn("layout", rows[0]["error"])
        self.assertIn("diagonal", rows[0]["error"])
        self.assertGreater(float(rows[1]["tok_per_s"]), 0)
        # A failed point is finished: not rerun unless asked.
        rc, log2 = sweep(path, "--out", out)
        self.assertIn("failed earlier, not rerun", log2)

    def test_3_training_failure_recorded_and_sweep_continues(self):
        path = os.path.join(self.work, "fault.yaml")
        with open(path, "w") as f:
            f.write(TINY_BASE + "env: {RINGTRAIN_TEST_FAULT_RANK: 1}\naxes:\n  parallel.layout: [zigzag, contiguous]\n")
        out = os.path.join(self.work, "fault")
        rc, log = sweep(path, "--out", out)
        self.assertEqual(rc, 0, log)
        _, rows = read_csv(os.path.join(out, "results.csv"))
        self.assertEqual([r["status"] for r in rows], ["failed", "failed"], log)
        for r in rows:
            self.assertIn("injected test fault", r["error"])
            self.assertIn("exit code", r["error"])
        status = json.loads(read_text(os.path.join(out, "points", rows[1]["point"], "status.json")))
        self.assertEqual(status["status"], "failed")
        self.assertGreater(status["duration_s"], 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=BUILD_DIR)
    parser.add_argument("--work-dir", default=None, help="scratch directory (emptied first)")
    args, rest = parser.parse_known_args()
    BUILD_DIR = os.path.abspath(args.build_dir)
    WORK_DIR = os.path.abspath(args.work_dir) if args.work_dir else None
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
