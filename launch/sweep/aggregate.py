"""From the points' status files and metrics to results.csv and summary.md.

Definitions (also in README.md "Scaling studies"):
- step_ms: median step time over the steps after warm-up; tok_per_s = batch x seq_len / step time.
- gpus: devices the ranks run on (the sweep's `gpus`, else one per rank); tok_per_s_per_gpu = tok_per_s / gpus.
- mfu: the trainer's MFU (model FLOPs, peak per device), rescaled to `gpus` devices when ranks share one.
- tflops_per_gpu: achieved model TFLOP/s per device, from the plan's FLOPs per step.
- strong_scaling_eff: among points equal in every swept key but parallel.cp, t(cp0) * ranks(cp0) /
  (t * ranks), cp0 the smallest cp of the group.
- weak_scaling_eff: among points equal in every swept key but cp and seq_len and with the same tokens per
  rank (seq_len / cp), model FLOP/s per rank relative to the smallest cp. FLOPs, not time, because
  attention work per token grows with the context length.
- comm_exposed_share: exposed communication time / step time.
- comm_exposed_ms_per_ring_step: the trainer's value if it reports one, else comm_exposed_ms / ring_steps
  (the trainer's "ring_steps", else estimated as n_layer x cp x (2, or 3 with full checkpointing: forward,
  backward, recomputed forward), counting cp steps per ring call as parallel/cp/ring_timing.h does).
"""
import csv
import math
import os

import measure

FIXED_COLUMNS = [
    "device", "ranks", "gpus", "dp", "cp", "tp", "layout", "seq_len", "batch_size", "tokens_per_step",
    "steps_measured", "step_ms", "step_ms_min", "step_ms_max", "tok_per_s", "tok_per_s_per_gpu", "mfu",
    "tflops_per_gpu", "peak_mem_gib", "plan_peak_gib", "plan_total_gib", "plan_error_pct", "plan_flops_per_step", "params",
    "attn_ms", "comm_exposed_ms", "comm_exposed_ms_per_ring_step", "comm_exposed_share", "loss",
    "strong_scaling_eff", "weak_scaling_eff", "duration_s", "note",
]
GIB = 2.0**30


def _plan_total_bytes(plan):
    """The plan's predicted device memory per rank: arena peak + the non-arena allowance (CUDA context etc.)."""
    if plan.get("total_bytes_per_rank") is not None:
        return float(plan["total_bytes_per_rank"])
    return float(plan["peak_bytes_per_rank"]) + float(plan.get("reserve_bytes_per_rank") or 0)


def columns(swept_keys):
    return ["point", "status", "error"] + list(swept_keys) + FIXED_COLUMNS


def _ring_steps(summary, plan, resolved):
    if summary.get("ring_steps"):
        return summary["ring_steps"]
    cp = int(plan.get("cp") or 1)
    if cp < 2:
        return None
    full = ((resolved.get("train") or {}).get("checkpointing") == "full")
    return int(plan.get("n_layer") or 0) * cp * (3 if full else 2)


def point_row(point, status, runner, warmup_steps):
    """One CSV row (dict, None for empty cells)."""
    row = {c: None for c in columns(point.values)}
    row.update({"point": point.id, "status": (status or {}).get("status", "pending"),
                "error": (status or {}).get("error", "")})
    row.update(point.values)
    if not status:
        return row
    plan = status.get("plan") or {}
    if plan:
        ranks = int(plan["world_size"])
        gpus = runner.devices_for(plan)
        row.update({"device": plan.get("device"), "ranks": ranks, "gpus": gpus, "dp": plan.get("dp"),
                    "cp": plan.get("cp"), "tp": plan.get("tp"), "layout": plan.get("layout"),
                    "seq_len": plan.get("seq_len"), "batch_size": plan.get("batch_size"),
                    "tokens_per_step": plan.get("tokens_per_step"),
                    "plan_peak_gib": float(plan["peak_bytes_per_rank"]) / GIB,
                    "plan_total_gib": _plan_total_bytes(plan) / GIB,
                    "plan_flops_per_step": plan.get("flops_per_step"), "params": plan.get("params")})
    row["duration_s"] = status.get("duration_s")
    row["note"] = status.get("fit_note", "")
    if row["status"] != "done" or not plan:
        return row
    records = runner.records(point)
    if not records:
        return row
    s = measure.summarize(records, warmup_steps)
    ms = s["step_ms_median"]
    row.update({"steps_measured": s["steps_measured"], "step_ms": ms, "step_ms_min": s["step_ms_min"],
                "step_ms_max": s["step_ms_max"], "attn_ms": s["attn_ms"], "comm_exposed_ms": s["comm_exposed_ms"],
                "loss": s["loss"]})
    if ms:
        tok_s = float(plan["tokens_per_step"]) / (ms / 1e3)
        row["tok_per_s"] = tok_s
        row["tok_per_s_per_gpu"] = tok_s / row["gpus"]
        row["tflops_per_gpu"] = float(plan["flops_per_step"]) / (ms / 1e3) / row["gpus"] / 1e12
        if s["comm_exposed_ms"] is not None:
            row["comm_exposed_share"] = s["comm_exposed_ms"] / ms
    if s["mfu_reported"]:
        row["mfu"] = s["mfu_reported"] * row["ranks"] / row["gpus"]
    if s["mem_bytes"]:
        row["peak_mem_gib"] = s["mem_bytes"] / GIB
        # Against the plan's total (arena + its stated non-arena allowance): what the device actually shows.
        row["plan_error_pct"] = 100.0 * (_plan_total_bytes(plan) - s["mem_bytes"]) / s["mem_bytes"]
    if s["comm_exposed_ms_per_ring_step"] is not None:
        row["comm_exposed_ms_per_ring_step"] = s["comm_exposed_ms_per_ring_step"]
    elif s["comm_exposed_ms"] is not None:
        hops = _ring_steps(s, plan, runner.resolved_config(point))
        if hops:
            row["comm_exposed_ms_per_ring_step"] = s["comm_exposed_ms"] / hops
    return row


def add_scaling_efficiency(rows, swept_keys):
    """Fills strong_scaling_eff and weak_scaling_eff in place (see the module comment)."""
    done = [r for r in rows if r["status"] == "done" and r["step_ms"] and r["cp"]]
    others = [k for k in swept_keys if k not in ("parallel.cp", "data.seq_len")]

    def group(rows_, key_fn):
        groups = {}
        for r in rows_:
            groups.setdefault(key_fn(r), []).append(r)
        return groups.values()

    def flops_rate(r):
        return float(r["plan_flops_per_step"]) / (r["step_ms"] / 1e3) / r["ranks"]

    strong = group(done, lambda r: tuple(str(r[k]) for k in others) + (r["seq_len"], r["batch_size"]))
    for g in strong:
        if len({r["cp"] for r in g}) < 2:
            continue
        b = min(g, key=lambda r: r["cp"])
        for r in g:
            r["strong_scaling_eff"] = (b["step_ms"] * b["ranks"]) / (r["step_ms"] * r["ranks"])
    weak = group(done, lambda r: tuple(str(r[k]) for k in others) + (r["seq_len"] / r["cp"], r["batch_size"]))
    for g in weak:
        if len({r["cp"] for r in g}) < 2:
            continue
        b = min(g, key=lambda r: r["cp"])
        for r in g:
            r["weak_scaling_eff"] = flops_rate(r) / flops_rate(b)


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if not math.isfinite(v):
            return ""
        return f"{v:.6g}"
    return str(v)


def write_csv(path, rows, swept_keys):
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        cols = columns(swept_keys)
        w.writerow(cols)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in cols])
    os.replace(tmp, path)


def write_summary(path, rows, swept_keys, meta, label):
    """A Markdown page for bench/results/: what ran where, and the main numbers."""
    lines = [f"# Sweep {meta.get('name', '')}", ""]
    if label:
        lines += [f"**{label}**", ""]
    for k in ("date", "host", "gpu", "commit", "command", "sweep_file"):
        if meta.get(k):
            lines.append(f"- {k}: `{meta[k]}`")
    lines += ["", ("Median step time after warm-up; peak_mem is measured by the trainer (CUDA: device memory in use, "
              "every process on the GPU and the CUDA context included; CPU: peak RSS of rank 0); "
              "plan = `ringtrain plan` (the arena per rank; plan_total adds its non-arena allowance, 2 GiB on CUDA)."), ""]
    cols = ["point", "status", "ranks", "step_ms", "tok_per_s", "tok_per_s_per_gpu", "mfu", "peak_mem_gib",
            "plan_peak_gib", "plan_total_gib", "comm_exposed_share", "loss", "error"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if c == "mfu" and v is not None:
                v = f"{100 * v:.1f}%"
            elif c == "comm_exposed_share" and v is not None:
                v = f"{100 * v:.1f}%"
            elif c == "error" and not v:
                v = r.get("note") if r.get("status") == "skipped" else ""
            cells.append(_cell(v).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
