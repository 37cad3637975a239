#!/usr/bin/env python3
"""numpy emulation of the narrow formats the FP8 attention study (bench/fp8_attention_accuracy.py) rounds to:
E4M3 (kernels/fp8.h's rule, bit for bit), E5M2 (the same rule on E5M2's grid) and bf16 (round to nearest even).

  python3 bench/fp8_formats.py     # the self-check: hand-worked values and every E4M3 code against fp8.h's rule

E4M3 as in kernels/fp8.h (OCP e4m3fn): bias 7, no infinities, max 448, smallest subnormal 2^-9; f32 -> E4M3 rounds
to nearest even, saturates to +-448 (infinities too), keeps NaN and the sign of zero. The input is first rounded to
f32 (the kernel rounds an f32 product x * s). E5M2 here: bias 15, max 57344, smallest subnormal 2^-16, the same
saturating rule (the project has no E5M2 path; this is for the dO study only).
Quantization of a group with amax a (fp8.h): s = max / a (a = 0: s = 1), q = round(x * s), value = q * (1 / s),
with s and 1 / s in f32.
"""
import math
import sys

import numpy as np

E4M3 = dict(name="e4m3", max=448.0, mant_bits=3, min_normal_exp=-6)   # subnormal unit 2^-9
E5M2 = dict(name="e5m2", max=57344.0, mant_bits=2, min_normal_exp=-14)  # subnormal unit 2^-16
FORMATS = {"e4m3": E4M3, "e5m2": E5M2}


def round_to_format(x, fmt):
    """x (any shape, float) -> the nearest value of `fmt`'s grid (float64 array), RNE, saturating, NaN kept."""
    a32 = np.asarray(x, dtype=np.float32).astype(np.float64)  # the kernel's input is an f32
    mag = np.abs(a32)
    # The spacing of the grid at |x|: 2^(e - mant_bits) for |x| in [2^e, 2^(e+1)), the subnormal unit below.
    _, e = np.frexp(np.where(np.isfinite(mag) & (mag > 0), mag, 1.0))  # mag = f 2^e, f in [0.5, 1)
    exp = np.maximum(e - 1, fmt["min_normal_exp"])
    ulp = np.ldexp(1.0, exp - fmt["mant_bits"])
    q = np.rint(mag / ulp) * ulp  # np.rint rounds half to even; mag / ulp is exact (a power-of-two division)
    q = np.where(mag >= fmt["max"], fmt["max"], np.minimum(q, fmt["max"]))  # saturate (inf too)
    q = np.copysign(q, a32)
    return np.where(np.isnan(a32), np.nan, q)


def round_to_bf16(x):
    """x -> the nearest bf16 value (float64 array), RNE on the f32 bits (finite inputs)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def group_factor(amax, fmt):
    """fp8.h's scale rule for an amax (array): returns (s, factor), both f32 values as float64."""
    amax = np.asarray(amax, dtype=np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        s = np.where(amax == 0, np.float32(1), np.float32(fmt["max"]) / np.where(amax == 0, 1, amax)).astype(np.float32)
    s = np.where(np.isinf(s), np.finfo(np.float32).max, s).astype(np.float32)
    return s.astype(np.float64), (np.float32(1) / s).astype(np.float64)


def quantize_dequantize(x, amax, fmt):
    """x quantized with the group amax `amax` (broadcastable to x) and dequantized: the value a GEMM sees."""
    s, factor = group_factor(amax, fmt)
    xs = (np.asarray(x, dtype=np.float32) * s.astype(np.float32))  # the f32 product x * s
    return round_to_format(xs, fmt) * factor


# ---- a scalar port of kernels/fp8.h (float_to_e4m3 / e4m3_to_float), the self-check's second opinion ----

def float_to_e4m3_bits(x):
    x = float(np.float32(x))
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a >= 448.0:
        return sign | 0x7E
    if a < 0.015625:
        return sign | int(np.rint(a * 512.0))
    f, e = math.frexp(a)
    m = float(np.rint((2.0 * f - 1.0) * 8.0))
    exp = e - 1
    if m == 8.0:
        m, exp = 0.0, exp + 1
    return sign | ((exp + 7) << 3) | int(m)


def e4m3_bits_to_float(b):
    sign = -1.0 if b & 0x80 else 1.0
    if (b & 0x7F) == 0x7F:
        return math.nan
    exp, man = (b >> 3) & 0xF, b & 7
    if exp == 0:
        return sign * math.ldexp(man, -9)
    return sign * math.ldexp(8 + man, exp - 10)


# Hand-worked E4M3 cases: (input, expected value).
E4M3_TABLE = [
    (0.0, 0.0), (-0.0, -0.0), (2.0 ** -9, 2.0 ** -9), (2.0 ** -10, 0.0),  # half the smallest subnormal: to even (0)
    (3 * 2.0 ** -10, 2 * 2.0 ** -9),          # 1.5 units: to even (2 units)
    (5 * 2.0 ** -10, 2 * 2.0 ** -9),          # 2.5 units: to even (2 units)
    (7 * 2.0 ** -9, 7 * 2.0 ** -9),           # the largest subnormal
    (2.0 ** -6, 2.0 ** -6),                   # the smallest normal
    (1.0, 1.0), (1.0625, 1.0), (1.1875, 1.25),  # 1 + 1/16: halfway to 1.125, to even (1.0); 1 + 3/16 -> 1.25
    (1.125, 1.125), (-1.1875, -1.25), (17.0, 16.0), (19.0, 20.0),  # 17 halfway 16/18 -> 16; 19 halfway 18/20 -> 20
    (240.0, 240.0), (248.0, 256.0),           # 248 halfway 240/256 -> 256 (mantissa 0 is even)
    (448.0, 448.0), (464.0, 448.0), (1e6, 448.0), (-500.0, -448.0), (math.inf, 448.0), (-math.inf, -448.0),
    (440.0, 448.0), (415.0, 416.0), (math.nan, math.nan),
]


def self_check(verbose=True):
    """Returns a list of failure strings (empty: the rounding matches fp8.h and the hand-worked values)."""
    fails = []
    xs = np.array([c[0] for c in E4M3_TABLE])
    got = round_to_format(xs, E4M3)
    for (x, want), g in zip(E4M3_TABLE, got):
        same = (math.isnan(want) and math.isnan(g)) or (g == want and math.copysign(1, g) == math.copysign(1, want))
        if not same:
            fails.append(f"e4m3({x!r}) = {g!r}, want {want!r}")
        port = e4m3_bits_to_float(float_to_e4m3_bits(x))
        if not ((math.isnan(port) and math.isnan(want)) or port == want):
            fails.append(f"fp8.h port: e4m3({x!r}) = {port!r}, want {want!r}")
    # Every code decodes, rounds to itself; every midpoint between neighbours goes to the even code, both ways.
    values = sorted({e4m3_bits_to_float(b) for b in range(256) if not math.isnan(e4m3_bits_to_float(b))})
    v = np.array(values)
    if not np.array_equal(round_to_format(v, E4M3), v):
        fails.append("an E4M3 value does not round to itself")
    rng = np.random.default_rng(0)
    probe = np.concatenate([(v[1:] + v[:-1]) / 2, rng.standard_normal(20000) * 10.0 ** rng.uniform(-4, 3, 20000)])
    port = np.array([e4m3_bits_to_float(float_to_e4m3_bits(p)) for p in probe])
    emul = round_to_format(probe, E4M3)
    bad = ~((emul == port) | (np.isnan(emul) & np.isnan(port)))
    if bad.any():
        i = int(np.argmax(bad))
        fails.append(f"{int(bad.sum())} values differ from fp8.h's rule, e.g. {probe[i]!r}: {emul[i]!r} vs {port[i]!r}")
    # E5M2 and bf16 spot checks.
    for x, want in [(57344.0, 57344.0), (61440.0, 57344.0), (2.0 ** -16, 2.0 ** -16), (2.0 ** -17, 0.0),
                    (1.125, 1.0), (1.375, 1.5), (3 * 2.0 ** -17, 2 * 2.0 ** -16)]:
        g = float(round_to_format(np.array([x]), E5M2)[0])
        if g != want:
            fails.append(f"e5m2({x!r}) = {g!r}, want {want!r}")
    for x, want in [(1.0 + 2.0 ** -8, 1.0), (1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -6), (1.0 + 2.0 ** -7, 1.0 + 2.0 ** -7)]:
        g = float(round_to_bf16(np.array([x]))[0])
        if g != want:
            fails.append(f"bf16({x!r}) = {g!r}, want {want!r}")
    s, f = group_factor(np.array([0.0, 448.0, 3.0]), E4M3)
    if not (s[0] == 1 and f[1] == 1 and s[2] == np.float32(448.0) / np.float32(3.0)):
        fails.append(f"scale rule: s={s}, factor={f}")
    if verbose:
        print("fp8 rounding self-check: " + ("ok (%d hand-worked values, %d probes against fp8.h's rule)"
                                              % (len(E4M3_TABLE), probe.size) if not fails else "FAILED"))
        for m in fails:
            print("  " + m)
    return fails


if __name__ == "__main__":
    sys.exit(1 if self_check() else 0)
