#!/usr/bin/env python3
"""Issue 47's groundwork: the error of FP8 attention (forward and backward), emulated in numpy, against fp64.

  python3 bench/fp8_attention_accuracy.py [--seq 2048] [--d 64,128] [--heads 4] [--seed 0] [--md OUT.md]
  python3 bench/fp8_attention_accuracy.py --quick --check   # the ctest: small sizes, asserts (exit 1 on failure)

What is emulated: the algorithm a tiled flash-attention kernel runs, with the roundings its data goes through.
- Inputs Q, K, V, dO (heads, seq, d) are bf16 values (rounded from f64 draws); the reference is fp64 on those values.
- Operands of an FP8 GEMM are quantized by kernels/fp8.h's rule (bench/fp8_formats.py): a group's amax, s = 448 / amax,
  E4M3 RNE, dequantized by 1 / s. The emulation multiplies the dequantized values; a kernel applies the same factors
  to its f32 accumulator (per-row / per-tile / per-column factors that are constant along the contraction dimension,
  which is why the backward's P and dS groups are per tile or per column where the contraction runs over rows).
- Every GEMM is an f32 GEMM of the (dequantized or bf16) operands: f32 accumulation, not Hopper's FP8 tensor-core
  accumulator (reported to keep ~14 bits over long K; attention's K is 64-176 per tile, then f32 register sums).
- Forward: key tiles of `key_tile` rows in order, for all query rows at once (the running max per row is what the
  kernel's query tile would hold); S = Q K^T * d^-0.5 in f32, online softmax in f32, l summed from the f32 P, P scaled
  before its cast (x448, or by 448 / its row max in the tile), O += P V rescaled, O / l stored as bf16, LSE in f32.
- Backward (FA2/FA3, recompute): S and P = exp(S - LSE) from the forward's operands and LSE, delta = rowsum(dO * O)
  with the stored O, dV = P^T dO, dP = dO V^T, dS = P * (dP - delta), dQ = dS K d^-0.5, dK = dS^T Q d^-0.5;
  each of the four GEMMs runs FP8 or bf16 by recipe; dQ, dK, dV stored as bf16.
- Rotation (optional): Q R, K R with R a normalized Hadamard or a random orthogonal matrix, before quantization (S is
  unchanged in exact arithmetic); the FP8 dQ / dK GEMMs then give gradients in the rotated basis, turned back by R^T.
Metric: relative RMS error ||x - ref|| / ||ref|| over all heads; goals O <= 1.5e-2, dQ / dK / dV <= 4e-2.
"""
import argparse
import dataclasses
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fp8_formats import E4M3, FORMATS, quantize_dequantize, round_to_bf16, self_check  # noqa: E402

O_GOAL, GRAD_GOAL = 1.5e-2, 4e-2
ROW_BLOCK = 128          # the query tile and the row block of a per-block scale
OUTLIER_CHANNELS, OUTLIER_FACTOR = 4, 20.0
FWD_GEMMS = ("S", "PV")
BWD_GEMMS = ("dV", "dP", "dQ", "dK")


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    fp8: bool = True                 # False: bf16 operands everywhere (the reference point)
    qk: str = "block"                # tensor | block (128 rows of a head) | token (Q per row, K per block)
    v: str = "block"                 # tensor | block
    rotate: str = "none"             # none | hadamard | random
    p_fwd: str = "max"               # one (cast as is) | max (x448) | row (448 / the row's max in the tile)
    p_bwd: str = "max"               # max (x448) | col (448 / the key column's max in the tile)
    fwd_fp8: frozenset = frozenset(FWD_GEMMS)  # S = Q K^T, PV = P V: which forward GEMMs run FP8
    bwd_fp8: frozenset = frozenset(BWD_GEMMS)
    do_fmt: str = "e4m3"             # e4m3 | e5m2
    do: str = "block"                # tensor | block
    ds: str = "tile"                 # tile (128 rows x key tile) | matched (per row for dQ, per column for dK)
    key_tile: int = 128

    def describe(self):
        if not self.fp8:
            return "bf16 operands, f32 accumulation"
        rot = "" if self.rotate == "none" else f", {self.rotate} rotation"
        bwd = ",".join(g for g in BWD_GEMMS if g in self.bwd_fp8) or "none"
        fwd = ",".join(g for g in FWD_GEMMS if g in self.fwd_fp8) or "none"
        return (f"fwd FP8: {fwd}, Q/K {self.qk}, V {self.v}{rot}, P fwd {self.p_fwd}, P bwd {self.p_bwd}, bwd FP8: {bwd}, "
                f"dO {self.do_fmt} {self.do}, dS {self.ds}, key tile {self.key_tile}")


def fwd_recipes():
    """The forward study: each row changes one thing against `block` (the backward all FP8)."""
    return [
        Recipe("bf16", fp8=False),
        Recipe("fp8-tensor (baseline)", qk="tensor", v="tensor", do="tensor"),
        Recipe("fp8-block", qk="block"),
        Recipe("fp8-block P-unscaled", p_fwd="one"),
        Recipe("fp8-block P-row", p_fwd="row"),
        Recipe("fp8-block hadamard", rotate="hadamard"),
        Recipe("fp8-block random-rot", rotate="random"),
        Recipe("fp8-tokenQ hadamard", qk="token", rotate="hadamard"),
        Recipe("fp8-block keytile176", key_tile=176),
        Recipe("fp8-block S-only", fwd_fp8=frozenset(["S"])),
        Recipe("fp8-block hadamard S-only", rotate="hadamard", fwd_fp8=frozenset(["S"])),
        Recipe("fp8-block PV-only", fwd_fp8=frozenset(["PV"])),
        Recipe("fwd bf16 (bwd FP8)", fwd_fp8=frozenset()),
    ]


def bwd_recipes(base):
    """The backward study on the chosen forward: one GEMM in FP8 at a time, then all four with variants."""
    rows = [dataclasses.replace(base, name="fwd-only (bwd bf16)", bwd_fp8=frozenset())]
    for g in BWD_GEMMS:
        rows.append(dataclasses.replace(base, name=f"bwd {g} only", bwd_fp8=frozenset([g])))
    rows += [dataclasses.replace(base, name="bwd all, dO e4m3", bwd_fp8=frozenset(BWD_GEMMS)),
             dataclasses.replace(base, name="bwd all, dO e5m2", bwd_fp8=frozenset(BWD_GEMMS), do_fmt="e5m2"),
             dataclasses.replace(base, name="bwd all, dS matched", bwd_fp8=frozenset(BWD_GEMMS), ds="matched"),
             dataclasses.replace(base, name="bwd all, P col", bwd_fp8=frozenset(BWD_GEMMS), p_bwd="col")]
    return rows


# ---- inputs, masks, reference ----

def bf16(x):
    return round_to_bf16(x)


def make_inputs(kind, heads, seq, d, rng):
    """Q, K, V, dO: (heads, seq, d) bf16 values in f64. `outlier`: OUTLIER_CHANNELS channels of Q and K x20."""
    q, k, v, do = (rng.standard_normal((heads, seq, d)) for _ in range(4))
    if kind == "outlier":
        ch = rng.choice(d, OUTLIER_CHANNELS, replace=False)
        q[..., ch] *= OUTLIER_FACTOR
        k[..., ch] *= OUTLIER_FACTOR
    return [bf16(x) for x in (q, k, v, do)]


def make_visible(kind, seq, rng):
    """(seq, seq) bool, query row x key column. causal; docs: causal within 4 packed documents of random lengths."""
    causal = np.tril(np.ones((seq, seq), dtype=bool))
    if kind == "causal":
        return causal
    cuts = np.sort(rng.choice(np.arange(1, seq), 3, replace=False))
    doc = np.searchsorted(cuts, np.arange(seq), side="right")
    return causal & (doc[:, None] == doc[None, :])


def reference(q, k, v, do, visible):
    """fp64 attention forward and backward: O, dQ, dK, dV (heads, seq, d)."""
    scale = q.shape[-1] ** -0.5
    s = np.where(visible, q @ k.transpose(0, 2, 1) * scale, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    dv = p.transpose(0, 2, 1) @ do
    dp = do @ v.transpose(0, 2, 1)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    return o, ds @ k * scale, ds.transpose(0, 2, 1) @ q * scale, dv


# ---- quantization of the operands ----

def rotation(kind, d, rng):
    """(d, d) orthogonal: a Sylvester Hadamard / sqrt(d), or the Q of a Gaussian's QR (signs fixed)."""
    if kind == "hadamard":
        h = np.array([[1.0]])
        while h.shape[0] < d:
            h = np.block([[h, h], [h, -h]])
        assert h.shape[0] == d, f"a Hadamard rotation needs d a power of two, got {d}"
        return h / np.sqrt(d)
    qm, r = np.linalg.qr(rng.standard_normal((d, d)))
    return qm * np.sign(np.diag(r))


def quant_rows(x, gran, fmt="e4m3"):
    """An operand (heads, seq, d) quantized with one amax per tensor / 128-row block of a head / row; dequantized."""
    h, n, d = x.shape
    a = np.abs(x)
    if gran == "tensor":
        amax = a.max()
    elif gran == "block":
        nb = -(-n // ROW_BLOCK)
        pad = np.zeros((h, nb * ROW_BLOCK, d))
        pad[:, :n] = a
        amax = np.repeat(pad.reshape(h, nb, ROW_BLOCK * d).max(-1), ROW_BLOCK, axis=1)[:, :n, None]
    elif gran == "token":
        amax = a.max(-1, keepdims=True)
    else:
        raise ValueError(f"unknown granularity {gran!r}: tensor, block or token")
    return quantize_dequantize(x, amax, FORMATS[fmt])


def quant_tile(x, gran, row0, fmt="e4m3"):
    """A tile (heads, rows, cols) of P or dS, rows starting at query row `row0`, quantized and dequantized:
    one (x448 for P in [0, 1]), max (x448), row (per row), col (per column), tile (per 128 query rows)."""
    f = FORMATS[fmt]
    if gran == "one":
        amax = np.float64(f["max"])
    elif gran == "max":
        amax = np.float64(1.0)
    elif gran == "row":
        amax = np.abs(x).max(-1, keepdims=True)
    elif gran == "col":
        amax = np.abs(x).max(-2, keepdims=True)
    elif gran == "tile":
        rows = x.shape[1]
        group = (row0 + np.arange(rows)) // ROW_BLOCK
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        per_row = np.abs(x).max(-1)
        amax = np.repeat(np.maximum.reduceat(per_row, starts, axis=1), np.diff(np.r_[starts, rows]), axis=1)[..., None]
    else:
        raise ValueError(f"unknown tile granularity {gran!r}")
    return quantize_dequantize(x, amax, f)


def operands(recipe, q, k, v, do, rot):
    """The operand every GEMM sees (f32 arrays): dict of q, k, v (forward), and per backward GEMM its inputs."""
    f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
    if not recipe.fp8:
        return dict(q=f32(q), k=f32(k), v=f32(v), do=f32(do), do_dv=f32(do), do_dp=f32(do), v_dp=f32(v),
                    k_dq=f32(k), q_dk=f32(q), rot_dq=None, rot_dk=None)
    qr, kr = (q @ rot, k @ rot) if rot is not None else (q, k)
    qq = quant_rows(qr, "token" if recipe.qk == "token" else recipe.qk)
    kq = quant_rows(kr, "block" if recipe.qk == "token" else recipe.qk)
    vq = quant_rows(v, recipe.v)
    doq = quant_rows(do, recipe.do, recipe.do_fmt)
    g, fg = recipe.bwd_fp8, recipe.fwd_fp8
    return dict(q=f32(qq if "S" in fg else q), k=f32(kq if "S" in fg else k), v=f32(vq if "PV" in fg else v),
                do=f32(do),
                do_dv=f32(doq if "dV" in g else do), do_dp=f32(doq if "dP" in g else do),
                v_dp=f32(vq if "dP" in g else v), k_dq=f32(kq if "dQ" in g else k), q_dk=f32(qq if "dK" in g else q),
                rot_dq=rot if "dQ" in g else None, rot_dk=rot if "dK" in g else None)


# ---- the kernel's algorithm ----

def forward(ops, visible, recipe):
    """Tiled online-softmax forward. Returns O as stored (bf16 values, f64 array) and LSE (f32)."""
    q, k, v = ops["q"], ops["k"], ops["v"]
    h, n, d = q.shape
    scale = np.float32(d ** -0.5)
    m = np.full((h, n), -np.inf, dtype=np.float32)
    l = np.zeros((h, n), dtype=np.float32)
    acc = np.zeros((h, n, d), dtype=np.float32)
    for j0 in range(0, n, recipe.key_tile):
        j1 = min(n, j0 + recipe.key_tile)
        r0 = j0  # every mask is causal: rows above j0 see none of these keys
        s = (q[:, r0:] @ k[:, j0:j1].transpose(0, 2, 1)) * scale
        s = np.where(visible[r0:, j0:j1], s, np.float32(-np.inf))
        m_new = np.maximum(m[:, r0:], s.max(-1))
        m_use = np.where(np.isfinite(m_new), m_new, np.float32(0))
        p = np.exp(s - m_use[..., None])
        alpha = np.exp(m[:, r0:] - m_use)
        l[:, r0:] = l[:, r0:] * alpha + p.sum(-1, dtype=np.float32)
        p_op = quant_tile(p, recipe.p_fwd, r0) if recipe.fp8 and "PV" in recipe.fwd_fp8 else round_to_bf16(p)
        pv = np.asarray(p_op, dtype=np.float32) @ v[:, j0:j1]
        acc[:, r0:] = acc[:, r0:] * alpha[..., None] + pv
        m[:, r0:] = m_new
    o = acc / l[..., None]
    return round_to_bf16(o), (m + np.log(l)).astype(np.float32)


def backward(ops, visible, recipe, o, lse):
    """Recompute-based backward. Returns dQ, dK, dV as stored (bf16 values, f64 arrays)."""
    q, k = ops["q"], ops["k"]
    h, n, d = q.shape
    g = recipe.bwd_fp8
    scale = np.float32(d ** -0.5)
    delta = (ops["do"] * np.asarray(o, dtype=np.float32)).sum(-1, dtype=np.float32)
    dq = np.zeros((h, n, d), dtype=np.float32)
    dk = np.zeros((h, n, d), dtype=np.float32)
    dv = np.zeros((h, n, d), dtype=np.float32)
    for j0 in range(0, n, recipe.key_tile):
        j1 = min(n, j0 + recipe.key_tile)
        r0 = j0
        s = (q[:, r0:] @ k[:, j0:j1].transpose(0, 2, 1)) * scale
        s = np.where(visible[r0:, j0:j1], s, np.float32(-np.inf))
        p = np.exp(s - lse[:, r0:, None]).astype(np.float32)
        p_op = quant_tile(p, recipe.p_bwd, r0) if recipe.fp8 and "dV" in g else round_to_bf16(p)
        dv[:, j0:j1] += np.asarray(p_op, dtype=np.float32).transpose(0, 2, 1) @ ops["do_dv"][:, r0:]
        dp = ops["do_dp"][:, r0:] @ ops["v_dp"][:, j0:j1].transpose(0, 2, 1)
        ds = (p * (dp - delta[:, r0:, None])).astype(np.float32)
        if recipe.fp8 and recipe.ds == "matched":
            ds_q, ds_k = quant_tile(ds, "row", r0), quant_tile(ds, "col", r0)
        elif recipe.fp8:
            ds_q = ds_k = quant_tile(ds, "tile", r0)
        ds_dq = np.asarray(ds_q if "dQ" in g and recipe.fp8 else round_to_bf16(ds), dtype=np.float32)
        ds_dk = np.asarray(ds_k if "dK" in g and recipe.fp8 else round_to_bf16(ds), dtype=np.float32)
        dq[:, r0:] += ds_dq @ ops["k_dq"][:, j0:j1]
        dk[:, j0:j1] += ds_dk.transpose(0, 2, 1) @ ops["q_dk"][:, r0:]
    dq, dk = dq.astype(np.float64) * scale, dk.astype(np.float64) * scale
    if ops["rot_dq"] is not None:
        dq = dq @ ops["rot_dq"].T
    if ops["rot_dk"] is not None:
        dk = dk @ ops["rot_dk"].T
    return round_to_bf16(dq), round_to_bf16(dk), round_to_bf16(dv)


def rel_rms(x, ref):
    return float(np.linalg.norm((np.asarray(x, dtype=np.float64) - ref).ravel()) / np.linalg.norm(ref.ravel()))


# ---- the study ----

def run_case(recipe, case):
    ops = operands(recipe, *case["inputs"], case["rot"].get(recipe.rotate))
    o, lse = forward(ops, case["visible"], recipe)
    dq, dk, dv = backward(ops, case["visible"], recipe, o, lse)
    ro, rdq, rdk, rdv = case["ref"]
    err = dict(O=rel_rms(o, ro), dQ=rel_rms(dq, rdq), dK=rel_rms(dk, rdk), dV=rel_rms(dv, rdv))
    if not all(np.isfinite(list(err.values()))):
        raise RuntimeError(f"{recipe.name} on {case['label']}: a non-finite error {err} (the emulation is broken)")
    return err


def meets(err):
    return err["O"] <= O_GOAL and max(err["dQ"], err["dK"], err["dV"]) <= GRAD_GOAL


def build_cases(args):
    cases = []
    for d in args.d:
        for inp in ("normal", "outlier"):
            for mask in ("causal", "docs"):
                # One generator per case, seeded by (seed, d, input, mask): a case's data does not depend on the others.
                rng = np.random.default_rng([args.seed, d, ("normal", "outlier").index(inp), ("causal", "docs").index(mask)])
                inputs = make_inputs(inp, args.heads, args.seq, d, rng)
                visible = make_visible(mask, args.seq, rng)
                rot = {"none": None, "hadamard": rotation("hadamard", d, rng), "random": rotation("random", d, rng)}
                cases.append(dict(label=f"{inp} {mask} d{d}", input=inp, mask=mask, d=d, inputs=inputs,
                                  visible=visible, rot=rot, ref=reference(*inputs, visible)))
    return cases


def study(recipes, cases):
    rows = []
    for r in recipes:
        for c in cases:
            rows.append(dict(recipe=r, case=c["label"], input=c["input"], err=run_case(r, c)))
    return rows


def worst(rows, recipe, input_kind=None):
    """The largest error per tensor over a recipe's cases (optionally of one input kind)."""
    sel = [x["err"] for x in rows if x["recipe"] == recipe and (input_kind is None or x["input"] == input_kind)]
    return {t: max(e[t] for e in sel) for t in ("O", "dQ", "dK", "dV")}


def choose_forward(rows, recipes):
    """The forward of the recommendation: the first FP8 recipe (list order is cost order: fewest extra passes) whose
    O meets the goal on the N(0,1) inputs; the bf16 forward where none does. Also the rotation with the smallest worst
    O error on the outlier inputs among the full-FP8 block recipes."""
    fwd = [r for r in recipes if r.fp8 and r.p_fwd != "one"]
    ok = [r for r in fwd if r.fwd_fp8 and worst(rows, r, "normal")["O"] <= O_GOAL]
    full = [r for r in fwd if r.fwd_fp8 == frozenset(FWD_GEMMS) and r.qk == "block" and r.p_fwd == "max"
            and r.key_tile == 128]
    # Hadamard first (a fast transform, no stored matrix): another rotation must be 10% better to be chosen.
    order = {"hadamard": 0.9, "random": 1.0, "none": 1.0}
    rot = min(full, key=lambda r: worst(rows, r, "outlier")["O"] * order[r.rotate]).rotate
    if ok:
        return ok[0], rot
    return next(r for r in fwd if not r.fwd_fp8), rot


def choose_backward(rows, recipes, input_kind):
    """The backward GEMMs that can run FP8: those whose FP8-alone run meets the gradient goal on `input_kind`, then
    the whole set checked together (the worst GEMM dropped until it holds)."""
    single = {g: next(r for r in recipes if r.bwd_fp8 == frozenset([g]) and r.name.startswith("bwd ")) for g in BWD_GEMMS}
    grad = lambda r: max(worst(rows, r, input_kind)[t] for t in ("dQ", "dK", "dV"))  # noqa: E731
    chosen = sorted((g for g in BWD_GEMMS if grad(single[g]) <= GRAD_GOAL), key=lambda g: grad(single[g]))
    return chosen, {g: grad(single[g]) for g in BWD_GEMMS}


def table(rows, title):
    out = [f"### {title}", "", "| recipe | input | mask | d | O | dQ | dK | dV | goals |",
           "|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        inp, mask, d = x["case"].split()
        e = x["err"]
        out.append(f"| {x['recipe'].name} | {inp} | {mask} | {d[1:]} | {e['O']:.2e} | {e['dQ']:.2e} | {e['dK']:.2e} | "
                   f"{e['dV']:.2e} | {'yes' if meets(e) else 'no'} |")
    return out


def e4m3_floor(seed):
    """The relative RMS error of an N(0,1) (64 x 128-row blocks of d 128) tensor quantized to E4M3 per block."""
    x = np.random.default_rng([seed, 47]).standard_normal((1, 64 * ROW_BLOCK, 128))
    return rel_rms(quant_rows(x, "block"), x)


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=1024, help="sequence length (a multiple of 128)")
    ap.add_argument("--d", default="64,128", help="head dims, comma separated")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="seq 256, d 64, 2 heads (the ctest's size)")
    ap.add_argument("--check", action="store_true", help="assert the study's sanity conditions; exit 1 on failure")
    ap.add_argument("--md", help="write the markdown report here")
    args = ap.parse_args()
    if args.quick:
        args.seq, args.d, args.heads = 256, "64", 2
    args.d = [int(x) for x in args.d.split(",")]
    if args.seq % ROW_BLOCK:
        sys.exit(f"--seq {args.seq}: must be a multiple of {ROW_BLOCK} (the query tile)")
    fails = self_check(verbose=True)
    t0 = time.time()
    cases = build_cases(args)
    frecipes = fwd_recipes()
    rows = study(frecipes, cases)
    fwd, rot = choose_forward(rows, frecipes)
    base = dataclasses.replace(fwd, rotate=rot if fwd.fwd_fp8 or rot != "none" else "none")
    brecipes = bwd_recipes(base)
    brows = study(brecipes, cases)
    gemms, single = choose_backward(brows, brecipes, "normal")
    while True:  # the chosen GEMMs together; drop the worst until the combination meets the goals on N(0,1)
        rec = dataclasses.replace(base, name="recommended", bwd_fp8=frozenset(gemms))
        rrows = study([rec], cases)
        if all(meets(x["err"]) for x in rrows if x["input"] == "normal") or not gemms:
            break
        gemms = gemms[:-1]
    if rec.rotate != "none":  # the rotation stays only where it is 10% better on the outliers' worst error
        alt = dataclasses.replace(rec, name="recommended, no rotation", rotate="none")
        arows = study([alt], cases)
        bad = lambda rs: max(max(x["err"].values()) for x in rs if x["input"] == "outlier")  # noqa: E731
        if bad(rrows) > 0.9 * bad(arows):
            rec = dataclasses.replace(alt, name="recommended")
            alt = dataclasses.replace(alt, name=f"recommended + {base.rotate} (not kept)", rotate=base.rotate)
            rrows, arows = ([dict(x, recipe=rec) for x in arows], [dict(x, recipe=alt) for x in rrows])
        rrows += arows
    floor = e4m3_floor(args.seed)
    elapsed = time.time() - t0

    lines = [f"seq {args.seq}, d {','.join(map(str, args.d))}, {args.heads} heads, seed {args.seed}; "
             f"commit {git_commit()}; {elapsed:.0f} s on this CPU. Errors: relative RMS against fp64 (goals O <= {O_GOAL:g}, "
             f"dQ/dK/dV <= {GRAD_GOAL:g}); `goals`: both met.", ""]
    lines += table(rows, "Forward recipes (backward all four GEMMs FP8 where the recipe is FP8)") + [""]
    lines += table(brows, f"Backward GEMMs in FP8, on the forward `{base.name}`"
                          f"{' + ' + base.rotate if base.rotate != 'none' else ''}") + [""]
    lines += table(rrows, "Recommended") + [""]
    lines += ["### Recommendation (chosen by the measured error)", "",
              f"- Floor: one N(0,1) operand rounded to E4M3 (per-block scale) has a relative RMS error of {floor:.1e}; "
              f"a GEMM of two such operands gives ~{floor * 2 ** 0.5:.1e} on its output, and on uncorrelated inputs "
              "that reaches O and the gradients undiminished, whatever the scaling granularity.",
              f"- Recipe: {rec.describe()}.",
              f"- Forward: `{fwd.name}` is the first forward (cost order) whose O meets {O_GOAL:g} on N(0,1)"
              if fwd.fwd_fp8 else
              f"- Forward: no FP8 forward GEMM meets O <= {O_GOAL:g} on N(0,1) (best FP8: "
              + ", ".join(f"{r.name} {worst(rows, r, 'normal')['O']:.1e}" for r in frecipes
                          if r.fp8 and r.fwd_fp8 and r.fwd_fp8 != frozenset(FWD_GEMMS)) + "; full FP8 "
              + f"{worst(rows, frecipes[2], 'normal')['O']:.1e}): the forward stays bf16.",
              f"- Rotation: `{rot}` gives the smallest O error on the outlier inputs among the full-FP8 block recipes; "
              + ("kept: 10% better on the outliers' worst error with the chosen GEMMs." if rec.rotate != "none" else
                 "not kept: with the chosen GEMMs it is not 10% better on the outliers' worst error."),
              "- Backward GEMMs alone in FP8 (worst dQ/dK/dV on N(0,1)): "
              + ", ".join(f"{g} {e:.1e}" for g, e in single.items()) + f"; in FP8: {', '.join(gemms) or 'none'}."]
    report = "\n".join(lines)
    print(report)
    if args.md:
        with open(args.md, "w") as f:
            f.write(report + "\n")

    if args.check:
        w = lambda name, kind: worst(rows, next(r for r in frecipes if r.name == name), kind)  # noqa: E731
        bf = w("bf16", "normal")
        if max(bf.values()) >= 1e-2:
            fails.append(f"bf16 errors on N(0,1) {bf}: want all < 1e-2 (bf16 rounding emulation broken?)")
        blk = w("fp8-block", "normal")
        if not 1e-2 <= blk["O"] <= 8e-2:
            fails.append(f"fp8-block O error on N(0,1) {blk['O']:.2e}: want within [1e-2, 8e-2], the E4M3 floor "
                         "(below: operands not quantized; above: scales or tiling broken)")
        for x in rrows:
            if x["recipe"] == rec and x["input"] == "normal" and not meets(x["err"]):
                fails.append(f"recommended recipe misses the goals on {x['case']}: {x['err']}")
        base_out = w("fp8-tensor (baseline)", "outlier")["O"]
        rec_out = max(x["err"]["O"] for x in rrows if x["recipe"] == rec and x["input"] == "outlier")
        had_out = w("fp8-block hadamard", "outlier")["O"]
        if not rec_out < base_out:
            fails.append(f"outlier inputs: recommended O {rec_out:.2e} not below per-tensor unrotated {base_out:.2e}")
        if not had_out < 0.6 * base_out:
            fails.append(f"outlier inputs: hadamard O {had_out:.2e} not below 0.6 x per-tensor unrotated {base_out:.2e}")
        print("check: " + ("ok" if not fails else "FAILED"))
        for m in fails:
            print("  " + m)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
