#!/usr/bin/env python3
"""TensorBoard event files read back with the `tensorboard` package's own reader, compared with the JSONL they mirror.

  tensorboard_check.py train <run_dir> --starts N     run_dir/tensorboard against run_dir/metrics.jsonl
  tensorboard_check.py eval <events_dir> <task> <results.jsonl>

train: EventAccumulator (TensorBoard's reader: it checks every record's CRC, and on a SessionLog START drops the steps
an earlier file logged past it, as a resumed run needs) gives every (tag, step) once, and the scalars are exactly the
JSONL's numeric fields (each the float32 of the JSONL value; tag "<group>/<key>"), no more and no fewer; the
directory holds N event files (one per start: only one rank writes).
eval: the task's scalars equal the rows of its .jsonl (loss-by-position) or their per (kind, length, depth) means
(needle), in float32.
Exit 77 (skip) with a message when the tensorboard package is missing.
"""
import collections
import json
import os
import sys

try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as e:
    print(f"SKIP: the tensorboard Python package is missing ({e}); pip install tensorboard", file=sys.stderr)
    sys.exit(77)


def f32(x):
    return float(np.float32(x))


def read_scalars(events_dir):
    """{(tag, step): [values]} through TensorBoard's EventAccumulator, keeping every scalar."""
    acc = event_accumulator.EventAccumulator(events_dir, size_guidance={event_accumulator.SCALARS: 0},
                                             purge_orphaned_data=True)
    acc.Reload()
    out = collections.defaultdict(list)
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            out[(tag, ev.step)].append(ev.value)
    return out


def compare(got, want, what):
    problems = []
    for key, values in sorted(got.items()):
        if len(values) != 1:
            problems.append(f"{what}: {key} appears {len(values)} times in the event files: {values}")
    for key in sorted(set(want) - set(got)):
        problems.append(f"{what}: {key} = {want[key]} is in the JSONL but not in the event files")
    for key in sorted(set(got) - set(want)):
        problems.append(f"{what}: {key} = {got[key]} is in the event files but not in the JSONL")
    for key in sorted(set(got) & set(want)):
        if got[key][0] != want[key]:
            problems.append(f"{what}: {key}: event file {got[key][0]!r}, JSONL {want[key]!r} (as float32)")
    return problems


def check_train(run_dir, starts):
    events_dir = os.path.join(run_dir, "tensorboard")
    files = sorted(f for f in os.listdir(events_dir) if f.startswith("events.out.tfevents."))
    problems = []
    if len(files) != starts:
        problems.append(f"{len(files)} event files in {events_dir} ({files}), {starts} expected: one per start, "
                        "written by one rank")
    got = read_scalars(events_dir)
    # By key: the tag's group is a label, the key after it is the JSONL's.
    by_key = collections.defaultdict(list)
    for (tag, step), values in got.items():
        by_key[(tag.split("/", 1)[1], step)] += values
    want = {}
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        row = json.loads(line)
        for key, value in row.items():
            if key in ("step", "total_steps") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            want[(key, row["step"])] = f32(value)
    problems += compare(by_key, want, "train")
    steps = sorted({s for (_, s) in want})
    tags = sorted({t for (t, _) in got})
    print(f"train: {len(want)} values over steps {steps[0]}..{steps[-1]} in {len(files)} event files, "
          f"{len(tags)} tags: {', '.join(tags)}")
    return problems, want


def check_eval(events_dir, task, results):
    rows = [json.loads(l) for l in open(results) if l.strip()]
    want = {}
    if task == "loss-by-position":
        for r in rows:
            tag = "loss_by_position/" + r["by"]
            want[(tag, r["lo"])] = f32(r["mean_loss"])
            want[(tag + "_targets", r["lo"])] = f32(r["targets"])
    else:
        groups = collections.OrderedDict()
        for r in rows:
            key = (r["kind"], r["length"], round(100 * r["depth"]))
            g = groups.setdefault(key, [0.0, 0.0, 0.0, 0])
            g[0] += r["accuracy"]
            g[1] += 1.0 if r["exact"] else 0.0
            g[2] += r["mean_logprob"]
            g[3] += 1
        for (kind, length, depth), g in groups.items():
            tag = f"needle/{kind}_len{length}/"
            for i, name in enumerate(("accuracy", "exact", "mean_logprob")):
                want[(tag + name, depth)] = f32(g[i] / g[3])
    got = read_scalars(events_dir)
    print(f"eval {task}: {len(want)} values from {len(rows)} rows; {len(got)} in {events_dir}")
    return compare(got, want, f"eval {task}")


def main():
    if sys.argv[1] == "train":
        problems, _ = check_train(sys.argv[2], int(sys.argv[sys.argv.index("--starts") + 1]))
    else:
        problems = check_eval(sys.argv[2], sys.argv[3], sys.argv[4])
    for p in problems[:40]:
        print("FAIL", p)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
