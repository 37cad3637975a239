"""One point's numbers from its run_dir/metrics.jsonl (one JSON object per step, written by rank 0).

Step records carry at least step, loss and the step time ("ms"; "ms_per_step" is also read); optional keys
are tok_per_s, mfu, mem_bytes / peak_mem_bytes, attn_ms, comm_exposed_ms, ring_steps. Records without a
step time (eval lines) are ignored. The first `warmup_steps` steps are not timed; each number below is the
median over the remaining steps, except loss (the last step's) and memory (the largest).
"""
import json
import math
import statistics


def _number(record, *keys):
    for k in keys:
        v = record.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def read_step_records(path):
    """Step records by step number (a later line for the same step wins, e.g. after a restart)."""
    steps = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            if not isinstance(r, dict) or "step" not in r or _number(r, "ms", "ms_per_step") is None:
                continue
            steps[int(r["step"])] = r
    return [steps[s] for s in sorted(steps)]


def _median(records, *keys):
    values = [x for x in (_number(r, *keys) for r in records) if x is not None]
    return statistics.median(values) if values else None


def summarize(records, warmup_steps):
    """{steps_recorded, steps_measured, step_ms_median/min/max, mfu_reported, mem_bytes, attn_ms,
    comm_exposed_ms, ring_steps, loss}; None where the metrics lack the field."""
    timed = [r for r in records if int(r["step"]) > warmup_steps]
    out = {"steps_recorded": len(records), "steps_measured": len(timed)}
    ms = [_number(r, "ms", "ms_per_step") for r in timed]
    out["step_ms_median"] = statistics.median(ms) if ms else None
    out["step_ms_min"] = min(ms) if ms else None
    out["step_ms_max"] = max(ms) if ms else None
    mfu = _median(timed, "mfu")
    out["mfu_reported"] = mfu if mfu else None  # 0 means "no peak known" (CPU)
    mems = [x for x in (_number(r, "peak_mem_bytes", "mem_bytes") for r in records) if x is not None]
    out["mem_bytes"] = max(mems) if mems else None
    out["attn_ms"] = _median(timed, "attn_ms")
    out["comm_exposed_ms"] = _median(timed, "comm_exposed_ms")
    out["comm_exposed_ms_per_ring_step"] = _median(timed, "comm_exposed_ms_per_ring_step")
    out["ring_steps"] = _median(timed, "ring_steps")
    out["loss"] = _number(records[-1], "loss") if records else None
    return out
