// bench_fp8_gemm: the FP8 GEMMs (gemm_fp8) of each recipe against our bf16 gemm on the linear layers of the 1.41B
// (configs/gpt-1b-64k.yaml: d 2048, GELU MLP 8192) and the Llama-3-8B shape (configs/llama3-8b-2m-8gpu.yaml: d 4096,
// 8 KV heads of 128, SwiGLU 14336) at T tokens (default 16,384), with the quantization that feeds them.
// Per linear y = x W^T (x (T,in), W (out,in), dy (T,out)), the three GEMMs of a training step:
//   fwd    y (T,out) bf16  = x W^T           fp8: q(x) (T,in)    x q(W) (out,in)
//   dgrad  dx (T,in) bf16  = dy W            fp8: q(dy) (T,out)  x qt(W) (in,out)
//   wgrad  dW (out,in) f32 += dy^T x         fp8: qt(dy) (out,T) x qt(x) (in,T)
// and the quantization of x, W and dy, each to q and qt in one pass (plus fp8_amax for tensor and row scaling).
// Times are per call, queued back to back on a busy GPU (bench/cuda_bench_util.cuh time_queued_ms).
//   bench_fp8_gemm [--tokens T] [--reps N] [--model all|1b|8b]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "kernels/cuda/fp8_tuning.h"

namespace rt::bench {
namespace {

struct Linear {
  const char* model;
  const char* name;
  int64_t in, out;
};
const Linear kLinears[] = {
    {"1.41B", "qkv", 2048, 6144},    {"1.41B", "attn.proj", 2048, 2048}, {"1.41B", "mlp.fc", 2048, 8192},
    {"1.41B", "mlp.proj", 8192, 2048}, {"8B", "qkv", 4096, 6144},       {"8B", "attn.o", 4096, 4096},
    {"8B", "mlp.gate_up", 4096, 28672}, {"8B", "mlp.down", 14336, 4096},
};

struct Recipe {
  const char* name;
  Fp8Recipe recipe;
  bool fast;  // fast accumulation (tensor and row only)
};
const Recipe kRecipes[] = {{"tensorwise", Fp8Recipe::tensorwise, false},
                           {"tensorwise+fast", Fp8Recipe::tensorwise, true},
                           {"rowwise", Fp8Recipe::rowwise, false},
                           {"rowwise+fast", Fp8Recipe::rowwise, true},
                           {"block", Fp8Recipe::block, false}};

// A device tensor that owns its storage.
struct Owned {
  std::unique_ptr<DeviceBuffer> buf;
  Tensor t;
  Owned(DType dt, int64_t a, int64_t b = -1) {
    const int64_t n = b < 0 ? a : a * b;
    buf = std::make_unique<DeviceBuffer>(size_t(n) * dtype_size(dt) + 256);
    t = b < 0 ? Tensor(buf->p, dt, Device::cuda(0), {a}) : Tensor(buf->p, dt, Device::cuda(0), {a, b});
  }
};

// x (R,K) quantized to q (R,K) and qt (K,R) with their factors and the amax buffers the scaling needs.
struct Quantized {
  Fp8Scaling scaling;
  Owned q, qt, q_scale, qt_scale, amax, amax_t;
  static Owned scale_buffer(Fp8Scaling s, int64_t R, int64_t K) {
    const Fp8ScaleShape ss = fp8_scale_shape(s, R, K);
    return ss.ndim == 1 ? Owned(DType::f32, ss.d0) : Owned(DType::f32, ss.d0, ss.d1);
  }
  Quantized(Fp8Scaling s, int64_t R, int64_t K)
      : scaling(s), q(DType::e4m3, R, K), qt(DType::e4m3, K, R), q_scale(scale_buffer(s, R, K)),
        qt_scale(scale_buffer(s, K, R)), amax(DType::f32, s == Fp8Scaling::row ? R : 1),
        amax_t(DType::f32, s == Fp8Scaling::row ? K : 1) {}
  Fp8Operand op() const { return {q.t, q_scale.t, scaling}; }
  Fp8Operand op_t() const { return {qt.t, qt_scale.t, scaling}; }
  // Both copies (or only qt), with the amax pass the scaling needs.
  void run(const Tensor& x, bool only_t = false) const {
    if (scaling == Fp8Scaling::tensor) fp8_amax(amax.t, Tensor{}, x, scaling);
    if (scaling == Fp8Scaling::row) fp8_amax(only_t ? Tensor{} : amax.t, amax_t.t, x, scaling);
    const bool given = scaling == Fp8Scaling::tensor || scaling == Fp8Scaling::row;
    fp8_quantize(only_t ? Fp8Operand{} : op(), op_t(), x, given ? amax.t : Tensor{},
                 scaling == Fp8Scaling::row ? amax_t.t : Tensor{});
  }
};

double tflops(int64_t M, int64_t N, int64_t K, double ms) { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; }

// The first `rows` rows of t (a bf16 or f32 device matrix) on the host as floats.
std::vector<float> head_rows(const Tensor& t, int64_t rows) {
  const Tensor h = t.slice(0, std::min(rows, t.shape[0]));
  std::vector<float> out(size_t(h.numel()));
  copy_cast(Tensor(out.data(), DType::f32, Device::cpu(), {h.numel()}), h);
  return out;
}
double rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - ref[i];
    num += d * d, den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace
}  // namespace rt::bench

int main(int argc, char** argv) {
  using namespace rt;
  using namespace rt::bench;
  int64_t T = 16384;
  int reps = 20;
  std::string model = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--tokens") T = std::stoll(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--model") model = next();
    else {
      std::fprintf(stderr, "usage: bench_fp8_gemm [--tokens T] [--reps N] [--model all|1b|8b]\n");
      return 2;
    }
  }
  if (!cuda_available()) {
    std::printf("bench_fp8_gemm: no CUDA device\n");
    return 0;
  }
  cuda::init(0);
  const cudaDeviceProp& p = cuda::device_props();
  std::printf("# bench_fp8_gemm on %s (sm_%d%d), T = %lld tokens, %d queued reps per call\n\n", p.name, p.major,
              p.minor, (long long)T, reps);
  const size_t nrec = sizeof(kRecipes) / sizeof(kRecipes[0]);
  constexpr int64_t kCheckRows = 512;  // rows of each output compared with the bf16 GEMM's

  std::string gemm_table, layer_table, quant_table, error_table;
  char line[4096];
  auto add = [&](std::string& t, const char* fmt, auto... args) {
    std::snprintf(line, sizeof(line), fmt, args...);
    t += line;
  };
  add(gemm_table, "| model | linear | GEMM | M x N x K | bf16 ms (TF/s) |");
  for (const Recipe& r : kRecipes) add(gemm_table, " %s ms (TF/s, x bf16) |", r.name);
  add(gemm_table, " block, x^T in 128x128 ms (x bf16) |\n|---|---|---|---|---|");
  for (size_t i = 0; i <= nrec; ++i) add(gemm_table, "---|");
  add(gemm_table, "\n");
  add(error_table, "| model | linear | GEMM |");
  for (const Recipe& r : kRecipes) add(error_table, " %s |", r.name);
  add(error_table, " block, x^T in 128x128 |\n|---|---|---|");
  for (size_t i = 0; i <= nrec; ++i) add(error_table, "---|");
  add(error_table, "\n");
  add(quant_table, "| model | linear | tensor (R x K) | scaling | 8 rows/thread ms (GB/s) | 4 rows/thread ms (GB/s) |\n"
                   "|---|---|---|---|---|---|\n");
  add(layer_table, "| layer | bf16 ms |");
  for (const Recipe& r : kRecipes) add(layer_table, " %s: GEMMs + quant ms = total (x bf16) |", r.name);
  add(layer_table, "\n|---|---|");
  for (size_t i = 0; i < nrec; ++i) add(layer_table, "---|");
  add(layer_table, "\n");
  std::vector<double> sum_fp8(nrec, 0.0);
  double sum_bf16 = 0;

  for (const Linear& L : kLinears) {
    if ((model == "1b" && std::strcmp(L.model, "1.41B") != 0) || (model == "8b" && std::strcmp(L.model, "8B") != 0))
      continue;
    Owned x(DType::bf16, T, L.in), w(DType::bf16, L.out, L.in), dy(DType::bf16, T, L.out);
    Owned y(DType::bf16, T, L.out), dx(DType::bf16, T, L.in), dw(DType::f32, L.out, L.in);
    random_bf16(x.t, 1), random_bf16(w.t, 2), random_bf16(dy.t, 3);
    scale_inplace(w.t, 0.02f);
    struct G {
      const char* name;
      int64_t M, N, K;
    };
    const G gemms[3] = {{"fwd", T, L.out, L.in}, {"dgrad", T, L.in, L.out}, {"wgrad", L.out, L.in, T}};
    // The bf16 outputs' first rows, the reference of the error table (dW overwritten: beta 0).
    gemm(y.t, x.t, w.t, false, true);
    gemm(dx.t, dy.t, w.t, false, false);
    gemm(dw.t, dy.t, x.t, true, false, 1.f, 0.f);
    const std::vector<float> ref[3] = {head_rows(y.t, kCheckRows), head_rows(dx.t, kCheckRows),
                                       head_rows(dw.t, kCheckRows)};
    double bf16_ms[3];
    bf16_ms[0] = time_queued_ms([&] { gemm(y.t, x.t, w.t, false, true); }, 3, reps);
    bf16_ms[1] = time_queued_ms([&] { gemm(dx.t, dy.t, w.t, false, false); }, 3, reps);
    bf16_ms[2] = time_queued_ms([&] { gemm(dw.t, dy.t, x.t, true, false, 1.f, 1.f); }, 3, reps);
    const double bf16_total = bf16_ms[0] + bf16_ms[1] + bf16_ms[2];
    double fp8_ms[8][3], err[8][3], gemm_sum[8], quant_sum[8];
    for (size_t ri = 0; ri < nrec; ++ri) {
      const Recipe& r = kRecipes[ri];
      const Fp8Scaling act = fp8_scaling_for(r.recipe, false), wsc = fp8_scaling_for(r.recipe, true);
      Quantized qx(act, T, L.in), qw(wsc, L.out, L.in), qdy(act, T, L.out);
      quant_sum[ri] = 0;
      const struct { const char* name; const Quantized* q; const Tensor* t; } ins[3] = {
          {"x", &qx, &x.t}, {"W", &qw, &w.t}, {"dy", &qdy, &dy.t}};
      for (const auto& in : ins) {
        double ms[2];
        for (const int rows : {8, 4}) {
          cuda::set_fp8_quantize_rows(rows);
          ms[rows == 4] = time_queued_ms([&] { in.q->run(*in.t); }, 3, reps);
        }
        quant_sum[ri] += ms[1];
        if (r.fast) continue;  // the same quantization as the recipe's row above
        const int64_t R = in.t->shape[0], K = in.t->shape[1];
        const bool pre = in.q->scaling == Fp8Scaling::tensor || in.q->scaling == Fp8Scaling::row;
        const double bytes = double(R * K) * (2 + 2 + (pre ? 2 : 0));  // read, q + qt, the amax pass's read
        add(quant_table, "| %s | %s | %s %lld x %lld | %s | %.3f (%.0f) | %.3f (%.0f) |\n", L.model, L.name, in.name,
            (long long)R, (long long)K, fp8_scaling_name(in.q->scaling), ms[0], bytes / (ms[0] * 1e6), ms[1],
            bytes / (ms[1] * 1e6));
      }
      qx.run(x.t), qw.run(w.t), qdy.run(dy.t);
      gemm_fp8(y.t, qx.op(), qw.op(), 0.f, r.fast);
      gemm_fp8(dx.t, qdy.op(), qw.op_t(), 0.f, r.fast);
      gemm_fp8(dw.t, qdy.op_t(), qx.op_t(), 0.f, r.fast);
      err[ri][0] = rel_diff(head_rows(y.t, kCheckRows), ref[0]);
      err[ri][1] = rel_diff(head_rows(dx.t, kCheckRows), ref[1]);
      err[ri][2] = rel_diff(head_rows(dw.t, kCheckRows), ref[2]);
      fp8_ms[ri][0] = time_queued_ms([&] { gemm_fp8(y.t, qx.op(), qw.op(), 0.f, r.fast); }, 3, reps);
      fp8_ms[ri][1] = time_queued_ms([&] { gemm_fp8(dx.t, qdy.op(), qw.op_t(), 0.f, r.fast); }, 3, reps);
      fp8_ms[ri][2] = time_queued_ms([&] { gemm_fp8(dw.t, qdy.op_t(), qx.op_t(), 1.f, r.fast); }, 3, reps);
      gemm_sum[ri] = fp8_ms[ri][0] + fp8_ms[ri][1] + fp8_ms[ri][2];
    }
    // The block recipe's weight gradient with x^T quantized in 128x128 blocks (a 1x128 x 128x128 GEMM).
    double alt_ms = 0, alt_err = 0;
    {
      Quantized qdy(Fp8Scaling::block_1x128, T, L.out), qx128(Fp8Scaling::block_128x128, T, L.in);
      qdy.run(dy.t), qx128.run(x.t, true);
      gemm_fp8(dw.t, qdy.op_t(), qx128.op_t(), 0.f, false);
      alt_err = rel_diff(head_rows(dw.t, kCheckRows), ref[2]);
      alt_ms = time_queued_ms([&] { gemm_fp8(dw.t, qdy.op_t(), qx128.op_t(), 1.f, false); }, 3, reps);
    }
    for (int g = 0; g < 3; ++g) {
      const G& s = gemms[g];
      add(gemm_table, "| %s | %s | %s | %lld x %lld x %lld | %.3f (%.0f) |", L.model, L.name, s.name, (long long)s.M,
          (long long)s.N, (long long)s.K, bf16_ms[g], tflops(s.M, s.N, s.K, bf16_ms[g]));
      add(error_table, "| %s | %s | %s |", L.model, L.name, s.name);
      for (size_t ri = 0; ri < nrec; ++ri) {
        add(gemm_table, " %.3f (%.0f, %.2fx) |", fp8_ms[ri][g], tflops(s.M, s.N, s.K, fp8_ms[ri][g]),
            bf16_ms[g] / fp8_ms[ri][g]);
        add(error_table, " %.2e |", err[ri][g]);
      }
      if (g == 2) add(gemm_table, " %.3f (%.2fx) |\n", alt_ms, bf16_ms[2] / alt_ms), add(error_table, " %.2e |\n", alt_err);
      else add(gemm_table, " |\n"), add(error_table, " |\n");
    }
    add(layer_table, "| %s %s | %.3f |", L.model, L.name, bf16_total);
    sum_bf16 += bf16_total;
    for (size_t ri = 0; ri < nrec; ++ri) {
      const double total = gemm_sum[ri] + quant_sum[ri];
      sum_fp8[ri] += total;
      add(layer_table, " %.3f + %.3f = %.3f (%.2fx) |", gemm_sum[ri], quant_sum[ri], total, bf16_total / total);
    }
    add(layer_table, "\n");
    std::fprintf(stderr, "done %s %s\n", L.model, L.name);
  }
  add(layer_table, "| **all** | %.3f |", sum_bf16);
  for (size_t ri = 0; ri < nrec; ++ri) add(layer_table, " %.3f (%.2fx) |", sum_fp8[ri], sum_bf16 / sum_fp8[ri]);
  add(layer_table, "\n");
  cuda::set_fp8_quantize_rows(4);

  std::printf("## GEMMs (per call; fp8 operands already quantized)\n\n%s\n", gemm_table.c_str());
  std::printf("## Per linear layer: a training step's three GEMMs with the quantization of x, W and dy (q and qt each, "
              "4 rows per thread)\n\n%s\n", layer_table.c_str());
  std::printf("## The quantizer (amax pass where the scaling needs one, then q and qt in one pass); GB/s counts the "
              "bf16 reads and the two e4m3 writes\n\n%s\n", quant_table.c_str());
  std::printf("## Relative difference from the bf16 GEMM (first %lld rows of each output; the quantization error)\n\n%s",
              (long long)kCheckRows, error_table.c_str());
  return 0;
}
