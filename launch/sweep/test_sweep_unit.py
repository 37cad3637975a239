"""Unit tests of the sweep driver's pure parts (no ringtrain needed): the sweep file, the expansion, the
metrics summary, the scaling efficiencies and the ETA model.
    python3 -m unittest discover -s launch/sweep -p 'test_sweep_unit.py'
"""
import json
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aggregate  # noqa: E402
import measure  # noqa: E402
import spec  # noqa: E402
import sweep as sweep_main  # noqa: E402


def write(dirname, name, text):
    path = os.path.join(dirname, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class SpecTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def load(self, text):
        return spec.load_sweep(write(self.dir, "s.yaml", text), self.dir)

    def test_product_order_overrides_and_ids(self):
        s = self.load("base: {model: {n_layer: 2}}\nset: {train.batch_size: 1, model.tied_embeddings: true}\n"
                      "axes:\n  data.seq_len: [32, 64]\n  parallel.layout: [zigzag, contiguous, striped]\n"
                      "measure: {steps: 5, warmup_steps: 2}\n")
        points = s.points(["parallel.comm=mpi"])
        self.assertEqual(len(points), 6)
        self.assertEqual([p.id for p in points[:3]],
                         ["seq_len-32__layout-zigzag", "seq_len-32__layout-contiguous", "seq_len-32__layout-striped"])
        o = points[4].overrides
        self.assertEqual(o[-1], "train.steps=5")
        self.assertIn("model.tied_embeddings=true", o)
        self.assertIn("log.every=1", o)
        # Order: defaults, fixed set, command-line set, axes, steps (later wins in ringtrain).
        self.assertLess(o.index("train.batch_size=1"), o.index("parallel.comm=mpi"))
        self.assertLess(o.index("parallel.comm=mpi"), o.index("data.seq_len=64"))
        self.assertEqual(points[4].values, {"data.seq_len": 64, "parallel.layout": "contiguous"})

    def test_zipped_axis(self):
        s = self.load('axes:\n  "parallel.cp, data.seq_len": [[1, 64], [2, 128], [4, 256]]\n'
                      "  parallel.layout: [zigzag]\nmeasure: {steps: 2}\n")
        points = s.points()
        self.assertEqual(len(points), 3)
        self.assertEqual(points[2].values, {"parallel.cp": 4, "data.seq_len": 256, "parallel.layout": "zigzag"})
        self.assertEqual(s.zipped_with("data.seq_len"), ["parallel.cp"])
        self.assertEqual(s.swept_keys(), ["parallel.cp", "data.seq_len", "parallel.layout"])

    def test_per_point_step_counts(self):
        s = self.load("axes:\n  data.seq_len: [16, 32, 64]\n  parallel.cp: [1, 2]\n"
                      "measure:\n  steps: 5\n  warmup_steps: 2\n  per_point:\n"
                      "    - {when: {data.seq_len: 64, parallel.cp: 1}, steps: 2, warmup_steps: 1}\n"
                      "    - {when: {data.seq_len: 64}, steps: 3}\n")
        got = [(p.values["data.seq_len"], p.values["parallel.cp"], p.steps, p.warmup_steps) for p in s.points()]
        self.assertEqual(got, [(16, 1, 5, 2), (16, 2, 5, 2), (32, 1, 5, 2), (32, 2, 5, 2), (64, 1, 2, 1), (64, 2, 3, 2)])
        self.assertIn("train.steps=2", s.points()[4].overrides)
        self.assertIn("optim.warmup_steps=2", s.points()[4].overrides)
        with self.assertRaises(spec.SpecError) as ctx:
            self.load("axes: {data.seq_len: [16]}\nmeasure: {steps: 3, per_point: [{when: {parallel.cp: 1}, steps: 2}]}\n")
        self.assertIn("not a swept key", str(ctx.exception))
        with self.assertRaises(spec.SpecError) as ctx:
            self.load("axes: {data.seq_len: [16]}\nmeasure: {steps: 3, warmup_steps: 2, "
                      "per_point: [{when: {data.seq_len: 16}, steps: 2}]}\n")
        self.assertIn("per_point[0].warmup_steps", str(ctx.exception))

    def test_ids_use_full_key_when_short_names_clash(self):
        s = self.load("axes:\n  optim.eps: [1.0e-8]\n  model.norm_eps: [1.0e-5]\n  data.seed: [1, 2]\n"
                      "  train.seed: [3]\nmeasure: {steps: 2}\n")
        self.assertEqual(s.points()[0].id, "eps-1e-08__norm_eps-1e-05__data.seed-1__train.seed-3")

    def test_errors_name_the_problem(self):
        cases = {
            "axes: {data.seq_len: [1]}\n": "measure",
            "axes: {data.seq_len: [1]}\nmeasure: {steps: 2, warmup_steps: 2}\n": "warmup_steps",
            "axes: {data.seq_len: []}\nmeasure: {steps: 2}\n": "non-empty list",
            "axes: {train.steps: [1, 2]}\nmeasure: {steps: 2}\n": "set by the sweep itself",
            "axes: {'a,b': [[1]]}\nmeasure: {steps: 2}\n": "2 values",
            "axes: {data.seq_len: [1, 1]}\nmeasure: {steps: 2}\n": "repeats",
            "base: nowhere.yaml\nmeasure: {steps: 2}\n": "not found",
            "axis: {}\nmeasure: {steps: 2}\n": "unknown key",
            "measure: {steps: 2, warmup: 1}\n": "unknown key",
        }
        for text, needle in cases.items():
            with self.assertRaises(spec.SpecError, msg=text) as ctx:
                self.load(text)
            self.assertIn(needle, str(ctx.exception), msg=text)

    def test_base_path_relative_to_repo_root_or_file(self):
        os.makedirs(os.path.join(self.dir, "configs"))
        write(self.dir, "configs/b.yaml", "model: {n_layer: 1}\n")
        s = self.load("base: configs/b.yaml\nmeasure: {steps: 1}\n")
        self.assertEqual(s.base_path, os.path.join(self.dir, "configs", "b.yaml"))
        self.assertEqual(len(s.points()), 1)
        self.assertEqual(s.points()[0].id, "single")


class MeasureTest(unittest.TestCase):
    def test_median_after_warmup_last_loss_max_memory(self):
        rng = random.Random(7)
        times = [rng.uniform(50, 150) for _ in range(7)]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "w") as f:
                for i, ms in enumerate(times):
                    f.write(json.dumps({"step": i + 1, "loss": 5.0 - i, "ms": ms, "mem_bytes": 100 + i,
                                        "mfu": 0.0, "comm_exposed_ms": ms / 10}) + "\n")
                    if i == 3:
                        f.write(json.dumps({"step": i + 1, "eval_loss": 1.0}) + "\n")
                f.write('{"step": 8, "loss"')  # cut short by a crash
            records = measure.read_step_records(path)
        s = measure.summarize(records, warmup_steps=2)
        timed = sorted(times[2:])
        self.assertEqual(s["steps_recorded"], 7)
        self.assertEqual(s["steps_measured"], 5)
        self.assertAlmostEqual(s["step_ms_median"], timed[2])
        self.assertAlmostEqual(s["comm_exposed_ms"], timed[2] / 10)
        self.assertEqual(s["loss"], -1.0)
        self.assertEqual(s["mem_bytes"], 106)
        self.assertIsNone(s["mfu_reported"])  # 0 means no peak known
        self.assertIsNone(s["attn_ms"])


class ScalingTest(unittest.TestCase):
    def row(self, cp, seq_len, ms, layout="zigzag"):
        flops = 1e12 * seq_len * (1 + seq_len / 1e5)
        return {"status": "done", "cp": cp, "ranks": cp, "seq_len": seq_len, "batch_size": 1, "step_ms": ms,
                "plan_flops_per_step": flops, "parallel.layout": layout, "parallel.cp": cp, "data.seq_len": seq_len,
                "strong_scaling_eff": None, "weak_scaling_eff": None}

    def test_strong_and_weak(self):
        rows = [self.row(1, 1024, 100.0), self.row(2, 1024, 80.0), self.row(4, 1024, 40.0),
                self.row(2, 2048, 130.0), self.row(4, 4096, 170.0), self.row(1, 1024, 90.0, "contiguous")]
        aggregate.add_scaling_efficiency(rows, ["parallel.layout", "parallel.cp", "data.seq_len"])
        self.assertAlmostEqual(rows[0]["strong_scaling_eff"], 1.0)
        self.assertAlmostEqual(rows[1]["strong_scaling_eff"], 100.0 / (2 * 80.0))
        self.assertAlmostEqual(rows[2]["strong_scaling_eff"], 100.0 / (4 * 40.0))
        self.assertIsNone(rows[5]["strong_scaling_eff"])  # alone in its layout group
        # Weak: 1024 tokens per rank at cp 1 (1024), 2 (2048), 4 (4096); FLOP rate per rank relative to cp 1.
        rate = lambda r: r["plan_flops_per_step"] / (r["step_ms"] / 1e3) / r["ranks"]
        self.assertAlmostEqual(rows[3]["weak_scaling_eff"], rate(rows[3]) / rate(rows[0]))
        self.assertAlmostEqual(rows[4]["weak_scaling_eff"], rate(rows[4]) / rate(rows[0]))
        self.assertIsNone(rows[1]["weak_scaling_eff"])  # 512 tokens per rank: no partner


class EtaTest(unittest.TestCase):
    def test_linear_fit(self):
        eta = sweep_main.Eta()
        self.assertIsNone(eta.predict(1.0))
        eta.add(10.0, 7.0)  # 2 + 0.5 * work
        self.assertAlmostEqual(eta.predict(20.0), 14.0)  # one sample: proportional
        eta.add(30.0, 17.0)
        self.assertAlmostEqual(eta.predict(50.0), 27.0)


if __name__ == "__main__":
    unittest.main()
