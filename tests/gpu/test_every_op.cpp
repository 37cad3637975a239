// Every op of kernels/op_list.inc, run on CPU and on CUDA from the same inputs and compared (the pattern of
// ggml's test-backend-ops). The op names come from the op list itself, so an op added to the list without a case
// here fails EveryOp/CudaMatchesCpu.Op/<op> (on any machine: the check comes before the device check).
// Each case builds its inputs on the device it is given: f32 on the CPU, the dtype the CUDA path uses (bf16
// activations, f32 accumulators) on the GPU, with values rounded to bf16 wherever the GPU reads bf16, so both
// sides see identical numbers. Outputs are poisoned (NaN) before the call unless the op accumulates into them.
// Error: ||cuda - cpu|| / ||cpu|| over finite entries; infinities must match; any NaN fails.
#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "kernels/rope_table.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

const std::vector<std::string>& listed_ops() {
  static const std::vector<std::string> names = {
#define RT_OP(ret, name, params, args, first, dispatch) #name,
#define RT_ATTN_OP RT_OP
#include "kernels/op_list.inc"
  };
  return names;
}

// The tensors of one run of one case on one device.
class OpRun {
 public:
  explicit OpRun(Device device) : device_(device) {}
  Device device() const { return device_; }
  // A tensor holding `values`: f32 on the CPU, `gpu_dtype` on CUDA (i32 stays i32).
  Tensor in(DType gpu_dtype, std::initializer_list<int64_t> dims, const std::vector<float>& values) {
    Tensor t = make(gpu_dtype, dims);
    upload(t, gpu_dtype == DType::bf16 ? bf16_rounded(values) : values);
    return t;
  }
  Tensor in_i32(std::initializer_list<int64_t> dims, std::vector<int32_t> values) {
    Tensor t = make(DType::i32, dims);
    upload_i32(t, std::move(values));
    return t;
  }
  // An output tensor, poisoned.
  Tensor out(DType gpu_dtype, std::initializer_list<int64_t> dims) {
    Tensor t = make(gpu_dtype, dims);
    poison(t);
    return t;
  }
  // An e4m3 tensor (e4m3 on both devices) holding `codes`; an e4m3 output poisoned with 0xFF (NaN).
  Tensor in_fp8(std::initializer_list<int64_t> dims, std::vector<uint8_t> codes) {
    Tensor t = make(DType::e4m3, dims);
    copy_cast(t, Tensor(codes.data(), DType::e4m3, Device::cpu(), {int64_t(codes.size())}));
    return t;
  }
  Tensor out_fp8(std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (const int64_t d : dims) n *= d;
    return in_fp8(dims, std::vector<uint8_t>(size_t(n), 0xFF));
  }

 private:
  Tensor make(DType gpu_dtype, std::initializer_list<int64_t> dims) {
    const bool keep = device_.is_cuda() || gpu_dtype == DType::i32 || gpu_dtype == DType::e4m3;
    const DType dt = keep ? gpu_dtype : DType::f32;
    buffers_.push_back(std::make_unique<Buffer>(device_, dt, dims));
    return buffers_.back()->t();
  }
  Device device_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

using Outputs = std::vector<std::vector<float>>;
struct OpCase {
  double tol;                          // on ||cuda - cpu|| / ||cpu||
  std::function<Outputs(OpRun&)> run;  // runs the op on run.device(), returns its outputs on the host
};

std::vector<float> rand_vec(int64_t n, uint64_t seed, float stddev = 1.f, float mean = 0.f) {
  return random_vector(n, seed, stddev, mean);
}
// The codes of an e4m3 tensor as floats (0..255), so the comparison is bit for bit.
std::vector<float> fp8_codes(const Tensor& t) {
  std::vector<uint8_t> codes(size_t(t.numel()));
  copy_cast(Tensor(codes.data(), DType::e4m3, Device::cpu(), {t.numel()}), t);
  return std::vector<float>(codes.begin(), codes.end());
}
// An FP8 operand (R,K) on r's device quantized on the host from normal(0, stddev) values, for gemm_fp8's case.
Fp8Operand fp8_operand(OpRun& r, int64_t R, int64_t K, Fp8Scaling scaling, uint64_t seed, float stddev) {
  std::vector<float> x = random_vector(R * K, seed, stddev);
  const Fp8ScaleShape ss = fp8_scale_shape(scaling, R, K);
  std::vector<uint8_t> codes(size_t(R * K));
  std::vector<float> factors(size_t(ss.numel())), amax(size_t(scaling == Fp8Scaling::tensor ? 1 : R));
  const Tensor xh = host_view(x, {R, K});
  Fp8Operand h{Tensor(codes.data(), DType::e4m3, Device::cpu(), {R, K}),
               ss.ndim == 1 ? host_view(factors, {ss.d0}) : host_view(factors, {ss.d0, ss.d1}), scaling};
  const bool given = scaling == Fp8Scaling::tensor || scaling == Fp8Scaling::row;
  if (given) fp8_amax(host_view(amax, {int64_t(amax.size())}), Tensor{}, xh, scaling);
  fp8_quantize(h, Fp8Operand{}, xh, given ? host_view(amax, {int64_t(amax.size())}) : Tensor{}, Tensor{});
  Fp8Operand o{r.in_fp8({R, K}, codes),
               ss.ndim == 1 ? r.in(DType::f32, {ss.d0}, factors) : r.in(DType::f32, {ss.d0, ss.d1}, factors),
               scaling};
  return o;
}

std::vector<float> positive_vec(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// gate_up (N, 2F) for the SwiGLU cases: per row F gate values (std 2) then F up values (std 1).
std::vector<float> gate_up_values(int64_t N, int64_t F, uint64_t seed) {
  const std::vector<float> g = rand_vec(N * F, seed, 2.f), u = rand_vec(N * F, seed + 1);
  std::vector<float> gu(size_t(2 * N * F));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < F; ++c) {
      gu[size_t(r * 2 * F + c)] = g[size_t(r * F + c)];
      gu[size_t(r * 2 * F + F + c)] = u[size_t(r * F + c)];
    }
  return gu;
}

// Attention inputs shared by the attention cases: q (B,N,H,D), k, v (B,N,Hkv,D), dout like q, all bf16-rounded;
// out, lse (B,H,N) and delta (B,H,N) from the CPU forward, so both backends' backward sees the same statistics.
constexpr int64_t kB = 1, kN = 256, kH = 2, kHkv = 1, kD = 64;
struct AttnInputs {
  std::vector<float> q, k, v, k2, v2, dout, out, lse, delta;
};
const AttnInputs& attn_inputs() {
  static const AttnInputs in = [] {
    AttnInputs a;
    a.q = bf16_rounded(rand_vec(kB * kN * kH * kD, 901));
    a.k = bf16_rounded(rand_vec(kB * kN * kHkv * kD, 902));
    a.v = bf16_rounded(rand_vec(kB * kN * kHkv * kD, 903));
    a.k2 = bf16_rounded(rand_vec(kB * kN * kHkv * kD, 904));
    a.v2 = bf16_rounded(rand_vec(kB * kN * kHkv * kD, 905));
    a.dout = bf16_rounded(rand_vec(kB * kN * kH * kD, 906));
    a.out.resize(a.q.size());
    a.lse.resize(size_t(kB * kH * kN));
    a.delta.resize(a.lse.size());
    std::vector<float> acc(a.q.size()), m(a.lse.size()), l(a.lse.size());
    AttnState scratch{host_view(acc, {kB, kH, kN, kD}), host_view(m, {kB, kH, kN}), host_view(l, {kB, kH, kN})};
    AttnMask mask;
    mask.causal = true;
    attn_fwd_whole(host_view(a.q, {kB, kN, kH, kD}), host_view(a.k, {kB, kN, kHkv, kD}),
                   host_view(a.v, {kB, kN, kHkv, kD}), scratch, mask, host_view(a.out, {kB, kN, kH, kD}),
                   host_view(a.lse, {kB, kH, kN}));
    a.out = bf16_rounded(a.out);
    attn_bwd_delta(host_view(a.out, {kB, kN, kH, kD}), host_view(a.dout, {kB, kN, kH, kD}),
                   host_view(a.delta, {kB, kH, kN}));
    return a;
  }();
  return in;
}
AttnMask causal_mask() {
  AttnMask mask;
  mask.causal = true;
  return mask;
}
AttnState attn_state(OpRun& r) {
  return AttnState{r.out(DType::f32, {kB, kH, kN, kD}), r.out(DType::f32, {kB, kH, kN}), r.out(DType::f32, {kB, kH, kN})};
}

// The two-source ops' case (attn_fwd_whole_two_kv, attn_bwd_block_fresh_two_kv): queries at positions 256..511;
// source 1: n1 keys at 256.. (the queries' first rows), then the gap to attn_second_kv_row(n1) (position 512: no
// query sees it); source 2: kN keys at 0..kN-1. Documents start at 0, 100 and 400, so rows 256..399 see source 2's
// keys from 100 and rows 400.. only source 1's.
AttnMask two_kv_mask(OpRun& r, int64_t n1) {
  const int64_t list = attn_second_kv_row(n1) + kN;
  std::vector<int32_t> q_pos, q_doc, k_pos;  // int64 as (low, high) words
  auto push = [](std::vector<int32_t>& w, int64_t x) { w.push_back(int32_t(x)), w.push_back(int32_t(x >> 32)); };
  for (int64_t i = 0; i < kN; ++i) push(q_pos, 256 + i), push(q_doc, 256 + i < 400 ? 100 : 400);
  for (int64_t j = 0; j < list; ++j) {
    const int64_t s2 = j - attn_second_kv_row(n1);
    push(k_pos, j < n1 ? 256 + j : s2 < 0 ? 512 : s2);
  }
  Tensor qp = r.in_i32({kB, kN, 2}, q_pos), qd = r.in_i32({kB, kN, 2}, q_doc), kp = r.in_i32({kB, list, 2}, k_pos);
  AttnMask mask;
  mask.docs.q_pos = static_cast<const int64_t*>(qp.data);
  mask.docs.q_doc_start = static_cast<const int64_t*>(qd.data);
  mask.docs.k_pos = static_cast<const int64_t*>(kp.data);
  mask.docs.q_stride = kN, mask.docs.k_stride = list;
  return mask;
}

// The forward ops' inputs on r's device: q (B,N,H,D); k, v of the causal diagonal block and k2, v2 of an earlier
// block (B,N,Hkv,D).
struct FwdOpInputs {
  Tensor q, k, v, k2, v2;
};
FwdOpInputs fwd_op_inputs(OpRun& r) {
  const AttnInputs& a = attn_inputs();
  return FwdOpInputs{r.in(DType::bf16, {kB, kN, kH, kD}, a.q), r.in(DType::bf16, {kB, kN, kHkv, kD}, a.k),
                     r.in(DType::bf16, {kB, kN, kHkv, kD}, a.v), r.in(DType::bf16, {kB, kN, kHkv, kD}, a.k2),
                     r.in(DType::bf16, {kB, kN, kHkv, kD}, a.v2)};
}
// A state reset and continued with the earlier block, every key visible.
AttnState state_after_earlier_block(OpRun& r, const FwdOpInputs& in) {
  AttnState s = attn_state(r);
  attn_state_reset(s);
  attn_fwd_block(in.q, in.k2, in.v2, s, AttnMask{});
  return s;
}

// One case per op. The tolerances: f32 results of f32 math 1e-4 (summation order), results written in bf16 or
// computed from bf16 intermediates 1.5e-2, attention 2e-2 (bf16 P and dS tiles).
const std::map<std::string, OpCase>& op_cases() {
  static const std::map<std::string, OpCase> cases = {
      {"gemm", {5e-3, [](OpRun& r) -> Outputs {
         const int64_t M = 72, N = 48, K = 136;
         Tensor a = r.in(DType::bf16, {M, K}, rand_vec(M * K, 1)), b = r.in(DType::bf16, {N, K}, rand_vec(N * K, 2));
         Tensor c = r.in(DType::f32, {M, N}, rand_vec(M * N, 3));
         gemm(c, a, b, false, true, 0.7f, 0.3f);
         return {download(c)};
       }}},
      // fp8: the amaxes and the quantizer bit for bit (codes compared as integers, factors exactly); the GEMM
      // to f32 summation order and Hopper's FP8 accumulation (promoted to f32 every few k-blocks).
      {"fp8_amax", {0.0, [](OpRun& r) -> Outputs {
         const int64_t R = 200, K = 72;
         Tensor x = r.in(DType::bf16, {R, K}, rand_vec(R * K, 61, 3.f));
         Tensor all = r.out(DType::f32, {1}), rows = r.out(DType::f32, {R}), cols = r.out(DType::f32, {K});
         fp8_amax(all, Tensor{}, x, Fp8Scaling::tensor);
         fp8_amax(rows, cols, x, Fp8Scaling::row);
         return {download(all), download(rows), download(cols)};
       }}},
      {"fp8_quantize", {0.0, [](OpRun& r) -> Outputs {
         // 136 x 264: partial 128-blocks at both edges, K and R multiples of 8 (the vector paths).
         const int64_t R = 136, K = 264;
         Tensor x = r.in(DType::bf16, {R, K}, rand_vec(R * K, 62, 2.f));
         Outputs got;
         for (const Fp8Scaling s : {Fp8Scaling::tensor, Fp8Scaling::row, Fp8Scaling::block_1x128,
                                    Fp8Scaling::block_128x128}) {
           const Fp8ScaleShape sq = fp8_scale_shape(s, R, K), st = fp8_scale_shape(s, K, R);
           auto scale_out = [&](const Fp8ScaleShape& ss) {
             return ss.ndim == 1 ? r.out(DType::f32, {ss.d0}) : r.out(DType::f32, {ss.d0, ss.d1});
           };
           Fp8Operand q{r.out_fp8({R, K}), scale_out(sq), s}, qt{r.out_fp8({K, R}), scale_out(st), s};
           Tensor amax, amax_t;
           if (s == Fp8Scaling::tensor) {
             amax = r.out(DType::f32, {1});
             fp8_amax(amax, Tensor{}, x, s);
           } else if (s == Fp8Scaling::row) {
             amax = r.out(DType::f32, {R}), amax_t = r.out(DType::f32, {K});
             fp8_amax(amax, amax_t, x, s);
           }
           fp8_quantize(q, qt, x, amax, amax_t);
           got.push_back(fp8_codes(q.data));
           got.push_back(download(q.scale));
           got.push_back(fp8_codes(qt.data));
           got.push_back(download(qt.scale));
         }
         return got;
       }}},
      {"fp8_dequantize", {4e-3, [](OpRun& r) -> Outputs {
         // Every finite code (not 0x7F / 0xFF), 1024 of them (the 8-wide path) and 77 (element by element); out bf16
         // on CUDA (its rounding is the tolerance), f32 on the CPU.
         Outputs got;
         for (const int64_t n : {int64_t(1024), int64_t(77)}) {
           std::vector<uint8_t> codes(static_cast<size_t>(n), 0);
           for (int64_t i = 0; i < n; ++i) {
             const uint8_t b = uint8_t((i * 37 + 11) % 256);
             codes[size_t(i)] = (b & 0x7F) == 0x7F ? uint8_t(b - 1) : b;
           }
           Tensor q = r.in_fp8({n}, codes);
           Tensor amax = r.in(DType::f32, {1}, {3.7f});
           Tensor out = r.out(DType::bf16, {n});
           fp8_dequantize(out, q, amax);
           got.push_back(download(out));
         }
         return got;
       }}},
      {"gemm_fp8", {2e-3, [](OpRun& r) -> Outputs {
         const int64_t M = 128, N = 256, K = 384;
         Outputs got;
         const std::pair<Fp8Scaling, Fp8Scaling> pairs[] = {{Fp8Scaling::tensor, Fp8Scaling::tensor},
                                                            {Fp8Scaling::row, Fp8Scaling::row},
                                                            {Fp8Scaling::block_1x128, Fp8Scaling::block_128x128},
                                                            {Fp8Scaling::block_1x128, Fp8Scaling::block_1x128}};
         for (const auto& [sa, sb] : pairs) {
           const Fp8Operand a = fp8_operand(r, M, K, sa, 63, 1.f), b = fp8_operand(r, N, K, sb, 64, 0.05f);
           Tensor c = r.out(DType::f32, {M, N});
           gemm_fp8(c, a, b, 0.f, false);
           got.push_back(download(c));
         }
         return got;
       }}},
      {"gemm_fp8_gelu", {1.5e-2, [](OpRun& r) -> Outputs {
         // Tensorwise operands (precision fp8's GELU MLP): out, pre and out's amax (cuBLASLt's AMAX_D where offered).
         const int64_t m = 128, F = 256, C = 384;
         const Fp8Operand x = fp8_operand(r, m, C, Fp8Scaling::tensor, 65, 1.f);
         const Fp8Operand w = fp8_operand(r, F, C, Fp8Scaling::tensor, 66, 0.08f);
         Tensor out = r.out(DType::bf16, {m, F}), pre = r.out(DType::bf16, {m, F}), amax = r.out(DType::f32, {1});
         gemm_fp8_gelu(out, pre, amax, x, w);
         return {download(out), download(pre), download(amax)};
       }}},
      {"gemm_fp8_dgelu", {1.5e-2, [](OpRun& r) -> Outputs {
         const int64_t m = 128, F = 256, C = 384;
         const Fp8Operand dy = fp8_operand(r, m, C, Fp8Scaling::tensor, 67, 1.f);
         const Fp8Operand wt = fp8_operand(r, F, C, Fp8Scaling::tensor, 68, 0.08f);
         Tensor pre = r.in(DType::bf16, {m, F}, rand_vec(m * F, 69, 2.f));
         Tensor dpre = r.out(DType::bf16, {m, F}), amax = r.out(DType::f32, {1});
         gemm_fp8_dgelu(dpre, amax, dy, wt, pre);
         return {download(dpre), download(amax)};
       }}},
      {"linear_gelu_fwd", {1.5e-2, [](OpRun& r) -> Outputs {
         // F = 136: the cuBLASLt GELU_AUX epilogue where it has an algorithm; F = 100 (not a multiple of 8): the
         // unfused fallback. pre is compared too (the backward reads it).
         Outputs got;
         for (const int64_t F : {int64_t(136), int64_t(100)}) {
           const int64_t m = 40, C = 96;
           Tensor x = r.in(DType::bf16, {m, C}, rand_vec(m * C, 51));
           Tensor w = r.in(DType::bf16, {F, C}, rand_vec(F * C, 52, 0.15f));
           Tensor out = r.out(DType::bf16, {m, F}), pre = r.out(DType::bf16, {m, F});
           linear_gelu_fwd(out, pre, x, w);
           got.push_back(download(out));
           got.push_back(download(pre));
         }
         return got;
       }}},
      {"linear_dgelu", {1.5e-2, [](OpRun& r) -> Outputs {
         Outputs got;
         for (const int64_t F : {int64_t(136), int64_t(100)}) {  // the DGELU epilogue; the fallback
           const int64_t m = 40, C = 96;
           Tensor dout = r.in(DType::bf16, {m, C}, rand_vec(m * C, 53));
           Tensor w = r.in(DType::bf16, {C, F}, rand_vec(C * F, 54, 0.15f));
           Tensor pre = r.in(DType::bf16, {m, F}, rand_vec(m * F, 55, 2.f));
           Tensor dpre = r.out(DType::bf16, {m, F});
           linear_dgelu(dpre, dout, w, pre);
           got.push_back(download(dpre));
         }
         return got;
       }}},
      {"add_rmsnorm_fwd", {1.5e-2, [](OpRun& r) -> Outputs {
         Outputs got;
         // (N, C): 16-byte vectors kept in registers (96: a partial chunk of lanes), wider than kept (4200: the
         // re-read part ends in a partial chunk), C % 8 != 0 (100: the block-per-row kernel), and more rows than
         // the grid has warps (4500 x 256: each warp walks several rows).
         const std::pair<int64_t, int64_t> shapes[] = {{40, 96}, {40, 4200}, {40, 100}, {4500, 256}};
         for (const auto& [N, C] : shapes) {
           Tensor res = r.in(DType::bf16, {N, C}, rand_vec(N * C, 56)), x = r.in(DType::bf16, {N, C}, rand_vec(N * C, 57));
           Tensor w = r.in(DType::bf16, {C}, rand_vec(C, 58, 0.2f, 1.f));
           Tensor out = r.out(DType::bf16, {N, C}), rstd = r.out(DType::f32, {N});
           add_rmsnorm_fwd(res, x, out, rstd, w, 1e-5f);
           got.push_back(download(res));
           got.push_back(download(out));
           got.push_back(download(rstd));
         }
         return got;
       }}},
      {"rmsnorm_fwd", {1.5e-2, [](OpRun& r) -> Outputs {
         const int64_t N = 40, C = 96;
         Tensor x = r.in(DType::bf16, {N, C}, rand_vec(N * C, 11)), w = r.in(DType::bf16, {C}, rand_vec(C, 12, 0.2f, 1.f));
         Tensor out = r.out(DType::bf16, {N, C}), rstd = r.out(DType::f32, {N});
         rmsnorm_fwd(out, rstd, x, w, 1e-5f);
         return {download(out), download(rstd)};
       }}},
      {"rmsnorm_bwd", {1.5e-2, [](OpRun& r) -> Outputs {
         Outputs got;
         // (N, C): bf16 rows of 16-byte vectors kept in registers (96: a partial chunk of lanes), wider than kept
         // (2056: the re-read part ends in a one-lane chunk), C % 8 != 0 (2500: one element per lane access), and
         // more rows than the grid has warps (4500 x 256: each warp walks several rows, its block sums their dweight).
         const std::pair<int64_t, int64_t> shapes[] = {{40, 96}, {40, 2056}, {40, 2500}, {4500, 256}};
         for (const auto& [N, C] : shapes) {
           std::vector<float> xv = bf16_rounded(rand_vec(N * C, 21));
           std::vector<float> rstd(static_cast<size_t>(N));
           for (int64_t i = 0; i < N; ++i) {
             double ss = 0;
             for (int64_t j = 0; j < C; ++j) ss += double(xv[i * C + j]) * xv[i * C + j];
             rstd[i] = float(1.0 / std::sqrt(ss / C + 1e-5));
           }
           Tensor x = r.in(DType::bf16, {N, C}, xv), w = r.in(DType::bf16, {C}, rand_vec(C, 22, 0.2f, 1.f));
           Tensor dout = r.in(DType::bf16, {N, C}, rand_vec(N * C, 23)), rs = r.in(DType::f32, {N}, rstd);
           Tensor dx = r.in(DType::bf16, {N, C}, rand_vec(N * C, 24)), dw = r.in(DType::f32, {C}, rand_vec(C, 25));
           rmsnorm_bwd(dx, dw, dout, x, w, rs);
           got.push_back(download(dx));
           got.push_back(download(dw));
         }
         return got;
       }}},
      {"rope", {1.5e-2, [](OpRun& r) -> Outputs {
         const int64_t B = 2, T = 24, H = 3, D = 64;
         std::vector<int32_t> pos(static_cast<size_t>(T));
         for (int64_t t = 0; t < T; ++t) pos[t] = int32_t(70000 + 3 * t);
         Tensor p = r.in_i32({T}, pos);
         Tensor x = r.in(DType::bf16, {B, T, H, D}, rand_vec(B * T * H * D, 31));
         Tensor y = r.in(DType::bf16, {B, T, H, D}, rand_vec(B * T * H * D, 32));
         RopeFreqs scaled = RopeFreqs::plain(500000.0, D);  // a yarn-like ramp with a cos/sin factor
         for (int i = 0; i < scaled.pairs; ++i) scaled.inv_freq[i] /= 1.0 + 3.0 * double(i) / double(scaled.pairs);
         scaled.cos_sin_scale = 1.1f;
         rope(x, p, RopeFreqs::plain(10000.0, D), false);
         rope(y, p, scaled, true);
         return {download(x), download(y)};
       }}},
      {"rope_from_table", {1.5e-2, [](OpRun& r) -> Outputs {
         // The table from plain and from yarn-scaled frequencies; D = 64 and 128 take 16-byte vectors of 8 pairs,
         // D = 12 (D/2 % 8 != 0) one pair per access.
         Outputs got;
         for (const int64_t D : {int64_t(64), int64_t(128), int64_t(12)}) {
           const int64_t B = 2, T = 24, H = 3;
           std::vector<int32_t> pos(static_cast<size_t>(T));
           for (int64_t t = 0; t < T; ++t) pos[t] = int32_t(70000 + 3 * t);
           RopeFreqs scaled = RopeFreqs::plain(500000.0, D);
           for (int i = 0; i < scaled.pairs; ++i) scaled.inv_freq[i] /= 1.0 + i % 5;
           scaled.cos_sin_scale = 1.1f;
           std::vector<float> t1, t2;
           const RopeFreqs plain = RopeFreqs::plain(10000.0, D);
           build_rope_table(t1, pos.data(), T, plain.inv_freq, plain.pairs, plain.cos_sin_scale);
           build_rope_table(t2, pos.data(), T, scaled.inv_freq, scaled.pairs, scaled.cos_sin_scale);
           Tensor tab1 = r.in(DType::f32, {T, D / 2, 2}, t1), tab2 = r.in(DType::f32, {T, D / 2, 2}, t2);
           Tensor x = r.in(DType::bf16, {B, T, H, D}, rand_vec(B * T * H * D, 33));
           Tensor y = r.in(DType::bf16, {B, T, H, D}, rand_vec(B * T * H * D, 34));
           rope_from_table(x, tab1, false);
           rope_from_table(y, tab2, true);
           got.push_back(download(x));
           got.push_back(download(y));
         }
         return got;
       }}},
      {"gelu_fwd", {1.5e-2, [](OpRun& r) -> Outputs {
         Tensor x = r.in(DType::bf16, {33, 64}, rand_vec(33 * 64, 41, 2.f)), out = r.out(DType::bf16, {33, 64});
         gelu_fwd(out, x);
         return {download(out)};
       }}},
      {"gelu_bwd", {1.5e-2, [](OpRun& r) -> Outputs {
         Tensor x = r.in(DType::bf16, {33, 64}, rand_vec(33 * 64, 42, 2.f));
         Tensor dout = r.in(DType::bf16, {33, 64}, rand_vec(33 * 64, 43)), dx = r.out(DType::bf16, {33, 64});
         gelu_bwd(dx, dout, x);
         return {download(dx)};
       }}},
      // The fused gate|up layout (N, 2F): gate columns (std 2), then up columns (std 1); odd F so that rows do not
      // line up with any vector width.
      {"swiglu_fwd", {1.5e-2, [](OpRun& r) -> Outputs {
         const int64_t N = 33, F = 65;
         Tensor gu = r.in(DType::bf16, {N, 2 * F}, gate_up_values(N, F, 44)), out = r.out(DType::bf16, {N, F});
         swiglu_fwd(out, gu);
         return {download(out)};
       }}},
      {"swiglu_bwd", {1.5e-2, [](OpRun& r) -> Outputs {
         const int64_t N = 33, F = 65;
         Tensor gu = r.in(DType::bf16, {N, 2 * F}, gate_up_values(N, F, 46));
         Tensor dout = r.in(DType::bf16, {N, F}, rand_vec(N * F, 48)), dgu = r.out(DType::bf16, {N, 2 * F});
         swiglu_bwd(dgu, dout, gu);
         return {download(dgu)};
       }}},
      {"embedding_fwd", {1e-6, [](OpRun& r) -> Outputs {
         const int64_t V = 50, C = 48, N = 37;
         std::vector<int32_t> tok(static_cast<size_t>(N));
         for (int64_t i = 0; i < N; ++i) tok[i] = int32_t((i * 17 + 3) % V);
         Tensor table = r.in(DType::bf16, {V, C}, rand_vec(V * C, 51)), t = r.in_i32({N}, tok);
         Tensor out = r.out(DType::bf16, {N, C});
         embedding_fwd(out, t, table);
         return {download(out)};
       }}},
      {"embedding_bwd", {1e-5, [](OpRun& r) -> Outputs {
         const int64_t V = 20, C = 48, N = 37;  // N > V: rows repeat, the adds collide
         std::vector<int32_t> tok(static_cast<size_t>(N));
         for (int64_t i = 0; i < N; ++i) tok[i] = int32_t((i * 7 + 1) % V);
         Tensor dtable = r.in(DType::f32, {V, C}, rand_vec(V * C, 52)), t = r.in_i32({N}, tok);
         Tensor dout = r.in(DType::bf16, {N, C}, rand_vec(N * C, 53));
         embedding_bwd(dtable, dout, t);
         return {download(dtable)};
       }}},
      {"cross_entropy", {1e-4, [](OpRun& r) -> Outputs {
         const int64_t n = 19, V = 300;
         std::vector<int32_t> tgt(static_cast<size_t>(n));
         for (int64_t i = 0; i < n; ++i) tgt[i] = i == 5 ? -1 : int32_t((i * 37) % V);
         Tensor logits = r.in(DType::f32, {n, V}, rand_vec(n * V, 61, 3.f)), t = r.in_i32({n}, tgt);
         Tensor losses = r.out(DType::f32, {n});
         cross_entropy(logits, t, losses, 0.25f, true);
         return {download(logits), download(losses)};
       }}},
      {"adamw", {1e-4, [](OpRun& r) -> Outputs {
         const int64_t n = 1000;
         Tensor p = r.in(DType::f32, {n}, rand_vec(n, 71)), g = r.in(DType::f32, {n}, rand_vec(n, 72));
         Tensor m = r.in(DType::f32, {n}, rand_vec(n, 73, 0.1f)), v = r.in(DType::f32, {n}, positive_vec(n, 74, 0.f, 0.1f));
         Tensor lowp = r.out(DType::bf16, {n}), scale = r.in(DType::f32, {1}, {0.6f});
         AdamWArgs args;
         args.lr = 1e-2f;
         args.weight_decay = 0.1f;
         args.step = 7;
         adamw(p, g, m, v, args, r.device().is_cuda() ? lowp : Tensor{}, scale);
         Outputs outs{download(p), download(m), download(v)};
         if (r.device().is_cuda()) {
           // The CPU path keeps no bf16 copy; the GPU's copy must be the rounded f32 weights.
           std::vector<float> want = bf16_rounded(outs[0]), got = download(lowp);
           EXPECT_CLOSE(got, want, 1e-6);
         }
         return outs;
       }}},
      {"grad_clip_scale", {1e-6, [](OpRun& r) -> Outputs {
         Tensor big = r.in(DType::f32, {1}, {400.f}), small = r.in(DType::f32, {1}, {0.25f});
         Tensor s1 = r.out(DType::f32, {1}), s2 = r.out(DType::f32, {1}), s3 = r.out(DType::f32, {1});
         grad_clip_scale(big, s1, 2.f);    // norm 20 > 2: clipped
         grad_clip_scale(small, s2, 2.f);  // norm 0.5 <= 2: 1
         grad_clip_scale(big, s3, 0.f);    // off: 1
         return {download(s1), download(s2), download(s3)};
       }}},
      {"add_inplace", {1e-2, [](OpRun& r) -> Outputs {
         Tensor y = r.in(DType::bf16, {513}, rand_vec(513, 81)), x = r.in(DType::bf16, {513}, rand_vec(513, 82));
         Tensor yf = r.in(DType::f32, {513}, rand_vec(513, 83));
         add_inplace(y, x);
         add_inplace(yf, x);
         return {download(y), download(yf)};
       }}},
      {"scale_inplace", {1e-2, [](OpRun& r) -> Outputs {
         Tensor y = r.in(DType::bf16, {513}, rand_vec(513, 84)), yf = r.in(DType::f32, {513}, rand_vec(513, 85));
         scale_inplace(y, -0.37f);
         scale_inplace(yf, 1.7f);
         return {download(y), download(yf)};
       }}},
      {"fill", {0, [](OpRun& r) -> Outputs {
         Tensor y = r.out(DType::bf16, {517}), yf = r.out(DType::f32, {3, 7});
         fill(y, 0.375f);
         fill(yf, -2.5f);
         return {download(y), download(yf)};
       }}},
      {"copy_cast", {1e-6, [](OpRun& r) -> Outputs {
         std::vector<float> v = rand_vec(301, 91);
         Tensor f = r.in(DType::f32, {301}, v), b = r.out(DType::bf16, {301}), back = r.out(DType::f32, {301});
         copy_cast(b, f);     // f32 -> bf16 (CPU: f32 -> f32)
         copy_cast(back, b);  // and back
         std::vector<float> got = download(back);
         if (!r.device().is_cuda()) got = bf16_rounded(got);  // the CPU path holds f32: round as the GPU did
         return {got};
       }}},
      {"copy_rows", {1e-6, [](OpRun& r) -> Outputs {
         // src (3, 5, 8) bf16; rows of width 4 from column 2, blocks of 5 rows, every other row, into dst (4, 6, 6).
         Tensor src = r.in(DType::bf16, {3, 5, 8}, rand_vec(120, 93));
         Tensor dst = r.in(DType::f32, {4, 6, 6}, rand_vec(144, 94));  // accumulated into
         Tensor dst_b = r.in(DType::bf16, {4, 6, 6}, rand_vec(144, 98));  // overwritten, rest kept
         StridedRows g;
         g.blocks = 3, g.rows = 3, g.width = 4;
         g.src_offset = 2, g.src_block_stride = 40, g.src_row_stride = 16;
         g.dst_offset = 7, g.dst_block_stride = 36, g.dst_row_stride = 6;
         copy_rows(dst, src, g, /*accumulate=*/true);
         copy_rows(dst_b, src, g, /*accumulate=*/false);
         return {download(dst), download(dst_b)};
       }}},
      {"gather_rows", {1e-6, [](OpRun& r) -> Outputs {
         // src (9, 64) bf16 (16-byte rows: the vector path on CUDA) and (9, 5) f32 (the element path); index with
         // -1 entries (zero rows) and repeats (a row read twice). f32 -> bf16 rows round once on CUDA, where the
         // CPU run keeps f32 (its bf16 tensors are f32): that output is rounded to bf16 (nearest even) on both
         // runs before the comparison, so both must agree exactly.
         const std::vector<int32_t> idx = {4, -1, 0, 8, 4, 2, -1};
         Tensor src = r.in(DType::bf16, {9, 64}, rand_vec(9 * 64, 120));
         Tensor dst = r.out(DType::bf16, {7, 64});
         Tensor src_f = r.in(DType::f32, {9, 5}, rand_vec(45, 121));
         Tensor dst_b = r.out(DType::bf16, {7, 5});
         gather_rows(dst, src, r.in_i32({7}, idx));
         gather_rows(dst_b, src_f, r.in_i32({7}, idx));
         std::vector<float> cast = download(dst_b);  // (35)
         for (float& x : cast) {
           uint32_t u;
           std::memcpy(&u, &x, 4);
           u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;  // round to nearest even at bf16 (finite inputs)
           std::memcpy(&x, &u, 4);
         }
         return {download(dst), cast};
       }}},
      {"scatter_add_rows", {1e-6, [](OpRun& r) -> Outputs {
         // dst (10, 12) f32 accumulated into at distinct rows; src bf16 and f32; -1 adds nothing.
         const std::vector<int32_t> idx = {7, -1, 0, 3, 9, 1};
         Tensor dst = r.in(DType::f32, {10, 12}, rand_vec(120, 122));
         scatter_add_rows(dst, r.in(DType::bf16, {6, 12}, rand_vec(72, 123)), r.in_i32({6}, idx));
         scatter_add_rows(dst, r.in(DType::f32, {6, 12}, rand_vec(72, 124)), r.in_i32({6}, idx));
         return {download(dst)};
       }}},
      {"sum_squares", {1e-5, [](OpRun& r) -> Outputs {
         Tensor x = r.in(DType::bf16, {4097}, rand_vec(4097, 95));
         return {{float(sum_squares(x))}};
       }}},
      {"sum_squares_accumulate", {1e-5, [](OpRun& r) -> Outputs {
         Tensor x = r.in(DType::bf16, {4097}, rand_vec(4097, 96)), xf = r.in(DType::f32, {333}, rand_vec(333, 97));
         Tensor acc = r.in(DType::f32, {1}, {3.f});
         sum_squares_accumulate(x, acc);
         sum_squares_accumulate(xf, acc);
         return {download(acc)};
       }}},
      {"attn_state_reset", {0, [](OpRun& r) -> Outputs {
         AttnState s = attn_state(r);
         attn_state_reset(s);
         return {download(s.acc), download(s.m), download(s.l)};
       }}},
      {"attn_fwd_block", {2e-2, [](OpRun& r) -> Outputs {
         const FwdOpInputs in = fwd_op_inputs(r);
         AttnState s = state_after_earlier_block(r, in);
         attn_fwd_block(in.q, in.k, in.v, s, causal_mask());  // then the causal diagonal block
         Tensor out = r.out(DType::bf16, {kB, kN, kH, kD}), lse = r.out(DType::f32, {kB, kH, kN});
         attn_fwd_finalize(s, out, lse);
         return {download(out), download(lse), download(s.l)};
       }}},
      {"attn_fwd_finalize", {1.5e-2, [](OpRun& r) -> Outputs {
         AttnState s{r.in(DType::f32, {kB, kH, kN, kD}, rand_vec(kB * kH * kN * kD, 110)),
                     r.in(DType::f32, {kB, kH, kN}, rand_vec(kB * kH * kN, 111, 2.f)),
                     r.in(DType::f32, {kB, kH, kN}, positive_vec(kB * kH * kN, 112, 0.5f, 20.f))};
         Tensor out = r.out(DType::bf16, {kB, kN, kH, kD}), lse = r.out(DType::f32, {kB, kH, kN});
         attn_fwd_finalize(s, out, lse);
         return {download(out), download(lse)};
       }}},
      {"attn_fwd_whole", {2e-2, [](OpRun& r) -> Outputs {
         const FwdOpInputs in = fwd_op_inputs(r);
         AttnState scratch = attn_state(r);
         Tensor out = r.out(DType::bf16, {kB, kN, kH, kD}), lse = r.out(DType::f32, {kB, kH, kN});
         attn_fwd_whole(in.q, in.k, in.v, scratch, causal_mask(), out, lse);
         return {download(out), download(lse)};
       }}},
      {"attn_fwd_whole_two_kv", {2e-2, [](OpRun& r) -> Outputs {
         // two_kv_mask's case: source 1 of 200 keys, a gap of 56 rows, source 2 of kN keys.
         const AttnInputs& a = attn_inputs();
         const int64_t n1 = 200;
         std::vector<float> k1(a.k.begin(), a.k.begin() + n1 * kHkv * kD), v1(a.v.begin(), a.v.begin() + n1 * kHkv * kD);
         const AttnMask mask = two_kv_mask(r, n1);
         AttnState scratch = attn_state(r);
         Tensor out = r.out(DType::bf16, {kB, kN, kH, kD}), lse = r.out(DType::f32, {kB, kH, kN});
         attn_fwd_whole_two_kv(r.in(DType::bf16, {kB, kN, kH, kD}, a.q), r.in(DType::bf16, {kB, n1, kHkv, kD}, k1),
                               r.in(DType::bf16, {kB, n1, kHkv, kD}, v1), r.in(DType::bf16, {kB, kN, kHkv, kD}, a.k2),
                               r.in(DType::bf16, {kB, kN, kHkv, kD}, a.v2), scratch, mask, out, lse);
         return {download(out), download(lse)};
       }}},
      {"attn_fwd_block_first", {2e-2, [](OpRun& r) -> Outputs {
         const FwdOpInputs in = fwd_op_inputs(r);
         AttnState s = attn_state(r);  // poisoned: the op must not read it
         attn_fwd_block_first(in.q, in.k, in.v, s, causal_mask());
         return {download(s.acc), download(s.m), download(s.l)};
       }}},
      {"attn_fwd_block_last", {2e-2, [](OpRun& r) -> Outputs {
         const FwdOpInputs in = fwd_op_inputs(r);
         AttnState s = state_after_earlier_block(r, in);
         Tensor out = r.out(DType::bf16, {kB, kN, kH, kD}), lse = r.out(DType::f32, {kB, kH, kN});
         attn_fwd_block_last(in.q, in.k, in.v, s, causal_mask(), out, lse);  // the causal diagonal block, finalized
         return {download(out), download(lse)};
       }}},
      {"attn_bwd_delta", {1e-2, [](OpRun& r) -> Outputs {
         const AttnInputs& a = attn_inputs();
         Tensor out = r.in(DType::bf16, {kB, kN, kH, kD}, a.out), dout = r.in(DType::bf16, {kB, kN, kH, kD}, a.dout);
         Tensor delta = r.out(DType::f32, {kB, kH, kN});
         attn_bwd_delta(out, dout, delta);
         return {download(delta)};
       }}},
      {"attn_bwd_block", {2e-2, [](OpRun& r) -> Outputs {
         const AttnInputs& a = attn_inputs();
         Tensor q = r.in(DType::bf16, {kB, kN, kH, kD}, a.q), dout = r.in(DType::bf16, {kB, kN, kH, kD}, a.dout);
         Tensor k = r.in(DType::bf16, {kB, kN, kHkv, kD}, a.k), v = r.in(DType::bf16, {kB, kN, kHkv, kD}, a.v);
         Tensor lse = r.in(DType::f32, {kB, kH, kN}, a.lse), delta = r.in(DType::f32, {kB, kH, kN}, a.delta);
         Tensor dq = r.in(DType::f32, {kB, kN, kH, kD}, rand_vec(kB * kN * kH * kD, 120, 0.1f));
         Tensor dk = r.in(DType::f32, {kB, kN, kHkv, kD}, rand_vec(kB * kN * kHkv * kD, 121, 0.1f));
         Tensor dv = r.in(DType::f32, {kB, kN, kHkv, kD}, rand_vec(kB * kN * kHkv * kD, 122, 0.1f));
         attn_bwd_block(q, k, v, dout, lse, delta, dq, dk, dv, causal_mask());
         return {download(dq), download(dk), download(dv)};
       }}},
      {"attn_bwd_block_fresh", {2e-2, [](OpRun& r) -> Outputs {
         const AttnInputs& a = attn_inputs();
         Tensor q = r.in(DType::bf16, {kB, kN, kH, kD}, a.q), dout = r.in(DType::bf16, {kB, kN, kH, kD}, a.dout);
         Tensor k = r.in(DType::bf16, {kB, kN, kHkv, kD}, a.k), v = r.in(DType::bf16, {kB, kN, kHkv, kD}, a.v);
         Tensor lse = r.in(DType::f32, {kB, kH, kN}, a.lse), delta = r.in(DType::f32, {kB, kH, kN}, a.delta);
         Tensor dq = r.in(DType::f32, {kB, kN, kH, kD}, rand_vec(kB * kN * kH * kD, 123, 0.1f));
         Tensor dk = r.out(DType::f32, {kB, kN, kHkv, kD}), dv = r.out(DType::f32, {kB, kN, kHkv, kD});
         attn_bwd_block_fresh(q, k, v, dout, lse, delta, dq, dk, dv, causal_mask());
         return {download(dq), download(dk), download(dv)};
       }}},
      {"attn_bwd_block_fresh_two_kv", {2e-2, [](OpRun& r) -> Outputs {
         // two_kv_mask's case: source 1 of 200 keys, a gap of 56 rows, source 2 of kN keys.
         const AttnInputs& a = attn_inputs();
         const int64_t n1 = 200;
         std::vector<float> k1(a.k.begin(), a.k.begin() + n1 * kHkv * kD), v1(a.v.begin(), a.v.begin() + n1 * kHkv * kD);
         const AttnMask mask = two_kv_mask(r, n1);
         Tensor q = r.in(DType::bf16, {kB, kN, kH, kD}, a.q), dout = r.in(DType::bf16, {kB, kN, kH, kD}, a.dout);
         Tensor lse = r.in(DType::f32, {kB, kH, kN}, a.lse), delta = r.in(DType::f32, {kB, kH, kN}, a.delta);
         Tensor dq = r.in(DType::f32, {kB, kN, kH, kD}, rand_vec(kB * kN * kH * kD, 124, 0.1f));
         Tensor dk = r.out(DType::f32, {kB, n1, kHkv, kD}), dv = r.out(DType::f32, {kB, n1, kHkv, kD});
         Tensor dk2 = r.out(DType::f32, {kB, kN, kHkv, kD}), dv2 = r.out(DType::f32, {kB, kN, kHkv, kD});
         attn_bwd_block_fresh_two_kv(q, r.in(DType::bf16, {kB, n1, kHkv, kD}, k1), r.in(DType::bf16, {kB, n1, kHkv, kD}, v1),
                                     r.in(DType::bf16, {kB, kN, kHkv, kD}, a.k2), r.in(DType::bf16, {kB, kN, kHkv, kD}, a.v2),
                                     dout, lse, delta, dq, dk, dv, dk2, dv2, mask);
         return {download(dq), download(dk), download(dv), download(dk2), download(dv2)};
       }}},
      {"attn_state_merge", {1e-4, [](OpRun& r) -> Outputs {
         // Rows where one side or both saw no key (m = -inf, l = 0, acc = 0) next to ordinary rows.
         const int64_t n = kB * kH * kN;
         auto state = [&](uint64_t seed, int64_t empty_every) {
           std::vector<float> acc = rand_vec(n * kD, seed), m = rand_vec(n, seed + 1, 3.f), l = positive_vec(n, seed + 2, 0.5f, 9.f);
           for (int64_t i = 0; i < n; i += empty_every) {
             m[size_t(i)] = -INFINITY, l[size_t(i)] = 0.f;
             for (int64_t e = 0; e < kD; ++e) acc[size_t(i * kD + e)] = 0.f;
           }
           return AttnState{r.in(DType::f32, {kB, kH, kN, kD}, acc), r.in(DType::f32, {kB, kH, kN}, m),
                            r.in(DType::f32, {kB, kH, kN}, l)};
         };
         AttnState s = state(130, 5), other = state(140, 7);
         attn_state_merge(s, other);
         return {download(s.acc), download(s.m), download(s.l)};
       }}},
      {"attn_fwd_merge", {1e-2, [](OpRun& r) -> Outputs {
         // Result 2 covers rows [5, kN - 4); rows with lse = -inf on one side (out 0 there), or on both, among
         // ordinary rows; out is bf16 on CUDA, so the tolerance is bf16's.
         const int64_t q0 = 5, M = kN - 9, n = kB * kH * kN, n2 = kB * kH * M;
         std::vector<float> out = rand_vec(n * kD, 160), lse = rand_vec(n, 161, 4.f);
         std::vector<float> out2 = rand_vec(kB * M * kH * kD, 162), lse2 = rand_vec(n2, 163, 4.f);
         for (int64_t i = 0; i < n; i += 5) lse[size_t(i)] = -INFINITY;
         for (int64_t i = 0; i < n2; i += 7) lse2[size_t(i)] = -INFINITY;
         for (int64_t row = 0; row < kB * kN * kH; ++row) {  // out 0 where lse is -inf: row (b, i, h)
           const int64_t h = row % kH, i = (row / kH) % kN, b = row / (kH * kN);
           if (lse[size_t((b * kH + h) * kN + i)] == -INFINITY)
             for (int64_t e = 0; e < kD; ++e) out[size_t(row * kD + e)] = 0.f;
         }
         Tensor o = r.in(DType::bf16, {kB, kN, kH, kD}, out), l = r.in(DType::f32, {kB, kH, kN}, lse);
         attn_fwd_merge(o, l, r.in(DType::bf16, {kB, M, kH, kD}, out2), r.in(DType::f32, {kB, kH, M}, lse2), q0);
         return {download(o), download(l)};
       }}},
      {"attn_decode", {2e-2, [](OpRun& r) -> Outputs {
         // B 2 of lengths 200 (the whole cache) and 77, a group of 4 query heads per K/V head, d 64.
         const int64_t B = 2, H = 4, Hkv = 1, D = 64, Nk = 200;
         Tensor q = r.in(DType::bf16, {B, 1, H, D}, rand_vec(B * H * D, 150));
         Tensor k = r.in(DType::bf16, {B, Nk, Hkv, D}, rand_vec(B * Nk * Hkv * D, 151));
         Tensor v = r.in(DType::bf16, {B, Nk, Hkv, D}, rand_vec(B * Nk * Hkv * D, 152));
         Tensor len = r.in_i32({B}, {200, 77}), work = r.out(DType::f32, {attn_decode_work_elems(B, H, Hkv, D, Nk)});
         fill(work.slice(0, attn_decode_counter_elems(B, H)), 0.f);  // the arrival counters start at zero
         Tensor out = r.out(DType::bf16, {B, 1, H, D}), lse = r.out(DType::f32, {B, H, 1});
         attn_decode(q, k, v, len, work, out, lse);
         return {download(out), download(lse)};
       }}},
      {"attn_decode_partial", {2e-2, [](OpRun& r) -> Outputs {
         // d 128, 2 groups of 4, lengths 333 (the cache) and 0 (m = -inf, l = 0, acc = 0).
         const int64_t B = 2, H = 8, Hkv = 2, D = 128, Nk = 333;
         Tensor q = r.in(DType::bf16, {B, 1, H, D}, rand_vec(B * H * D, 160));
         Tensor k = r.in(DType::bf16, {B, Nk, Hkv, D}, rand_vec(B * Nk * Hkv * D, 161));
         Tensor v = r.in(DType::bf16, {B, Nk, Hkv, D}, rand_vec(B * Nk * Hkv * D, 162));
         Tensor len = r.in_i32({B}, {333, 0}), work = r.out(DType::f32, {attn_decode_work_elems(B, H, Hkv, D, Nk)});
         fill(work.slice(0, attn_decode_counter_elems(B, H)), 0.f);  // the arrival counters start at zero
         AttnState s{r.out(DType::f32, {B, H, 1, D}), r.out(DType::f32, {B, H, 1}), r.out(DType::f32, {B, H, 1})};
         attn_decode_partial(q, k, v, len, work, s);
         return {download(s.acc), download(s.m), download(s.l)};
       }}},
  };
  return cases;
}

// ||out - ref|| / ||ref|| over finite reference entries; infinite entries must be equal; NaN anywhere fails.
::testing::AssertionResult close(const std::vector<float>& out, const std::vector<float>& ref, double tol) {
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << out.size() << " vs " << ref.size();
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) || std::isnan(ref[i]))
      return ::testing::AssertionFailure() << "NaN at [" << i << "]: cuda " << out[i] << ", cpu " << ref[i];
    if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (out[i] != ref[i])
        return ::testing::AssertionFailure() << "at [" << i << "]: cuda " << out[i] << ", cpu " << ref[i];
      continue;
    }
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  const double err = den == 0 ? std::sqrt(num) : std::sqrt(num / den);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << err << " > " << tol << "; "
                                       << worst_mismatch(out, ref);
}

class EveryOp : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryOp, CudaMatchesCpu) {
  const std::string& op = GetParam();
  const auto it = op_cases().find(op);
  ASSERT_NE(it, op_cases().end()) << op << " is in kernels/op_list.inc but has no case in "
                                  << "tests/gpu/test_every_op.cpp: add one to op_cases()";
  RT_REQUIRE_CUDA();
  OpRun cpu_run(Device::cpu()), cuda_run(gpu());
  const Outputs want = it->second.run(cpu_run);
  const Outputs got = it->second.run(cuda_run);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(close(got[i], want[i], it->second.tol)) << op << " output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Op, EveryOp, ::testing::ValuesIn(listed_ops()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Every case names an op of the list (a renamed op must not leave a stale case behind), and every case runs on
// the CPU and gives finite, non-trivial outputs (the CPU half of the comparison works without a GPU).
TEST(EveryOpTable, CasesMatchTheListAndRunOnCpu) {
  const auto& names = listed_ops();
  for (const auto& [op, c] : op_cases()) {
    EXPECT_NE(std::find(names.begin(), names.end(), op), names.end()) << op << " has a case but is not listed";
    SCOPED_TRACE(op);
    OpRun run(Device::cpu());
    const Outputs outs = c.run(run);
    ASSERT_FALSE(outs.empty());
    for (const auto& o : outs) {
      ASSERT_FALSE(o.empty());
      for (float x : o) ASSERT_FALSE(std::isnan(x));
    }
  }
}

}  // namespace
}  // namespace rt::test
