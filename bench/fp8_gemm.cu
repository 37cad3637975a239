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
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"

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
  void run(const Tensor& x) const {
    if (scaling == Fp8Scaling::tensor) fp8_amax(amax.t, Tensor{}, x, scaling);
    if (scaling == Fp8Scaling::row) fp8_amax(amax.t, amax_t.t, x, scaling);
    const bool given = scaling == Fp8Scaling::tensor || scaling == Fp8Scaling::row;
    fp8_quantize(op(), op_t(), x, given ? amax.t : Tensor{}, scaling == Fp8Scaling::row ? amax_t.t : Tensor{});
  }
};

double tflops(int64_t M, int64_t N, int64_t K, double ms) { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; }

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
  std::printf("| model | linear | GEMM | M x N x K | bf16 ms (TF/s) |");
  for (const Recipe& r : kRecipes) std::printf(" %s ms (TF/s, x bf16) |", r.name);
  std::printf("\n|---|---|---|---|---|");
  for (size_t i = 0; i < sizeof(kRecipes) / sizeof(kRecipes[0]); ++i) std::printf("---|");
  std::printf("\n");

  struct LayerTotals {
    std::string label;
    double bf16 = 0;
    std::vector<double> gemm, quant;
  };
  std::vector<LayerTotals> layers;
  const size_t nrec = sizeof(kRecipes) / sizeof(kRecipes[0]);
  for (const Linear& L : kLinears) {
    if ((model == "1b" && std::strcmp(L.model, "1.41B") != 0) || (model == "8b" && std::strcmp(L.model, "8B") != 0))
      continue;
    Owned x(DType::bf16, T, L.in), w(DType::bf16, L.out, L.in), dy(DType::bf16, T, L.out);
    Owned y(DType::bf16, T, L.out), dx(DType::bf16, T, L.in), dw(DType::f32, L.out, L.in);
    random_bf16(x.t, 1), random_bf16(w.t, 2), random_bf16(dy.t, 3);
    scale_inplace(w.t, 0.02f);
    fill(dw.t, 0.f);
    struct G {
      const char* name;
      int64_t M, N, K;
    };
    const G gemms[3] = {{"fwd", T, L.out, L.in}, {"dgrad", T, L.in, L.out}, {"wgrad", L.out, L.in, T}};
    double bf16_ms[3];
    bf16_ms[0] = time_queued_ms([&] { gemm(y.t, x.t, w.t, false, true); }, 3, reps);
    bf16_ms[1] = time_queued_ms([&] { gemm(dx.t, dy.t, w.t, false, false); }, 3, reps);
    bf16_ms[2] = time_queued_ms([&] { gemm(dw.t, dy.t, x.t, true, false, 1.f, 1.f); }, 3, reps);
    LayerTotals tot;
    tot.label = std::string(L.model) + " " + L.name;
    tot.bf16 = bf16_ms[0] + bf16_ms[1] + bf16_ms[2];
    double fp8_ms[8][3];
    for (size_t ri = 0; ri < nrec; ++ri) {
      const Recipe& r = kRecipes[ri];
      const Fp8Scaling act = fp8_scaling_for(r.recipe, false), wsc = fp8_scaling_for(r.recipe, true);
      Quantized qx(act, T, L.in), qw(wsc, L.out, L.in), qdy(act, T, L.out);
      const double quant = time_queued_ms([&] { qx.run(x.t); }, 3, reps) +
                           time_queued_ms([&] { qw.run(w.t); }, 3, reps) +
                           time_queued_ms([&] { qdy.run(dy.t); }, 3, reps);
      fp8_ms[ri][0] = time_queued_ms([&] { gemm_fp8(y.t, qx.op(), qw.op(), 0.f, r.fast); }, 3, reps);
      fp8_ms[ri][1] = time_queued_ms([&] { gemm_fp8(dx.t, qdy.op(), qw.op_t(), 0.f, r.fast); }, 3, reps);
      fp8_ms[ri][2] = time_queued_ms([&] { gemm_fp8(dw.t, qdy.op_t(), qx.op_t(), 1.f, r.fast); }, 3, reps);
      tot.gemm.push_back(fp8_ms[ri][0] + fp8_ms[ri][1] + fp8_ms[ri][2]);
      tot.quant.push_back(quant);
    }
    for (int g = 0; g < 3; ++g) {
      const G& s = gemms[g];
      std::printf("| %s | %s | %s | %lld x %lld x %lld | %.3f (%.0f) |", L.model, L.name, s.name, (long long)s.M,
                  (long long)s.N, (long long)s.K, bf16_ms[g], tflops(s.M, s.N, s.K, bf16_ms[g]));
      for (size_t ri = 0; ri < nrec; ++ri)
        std::printf(" %.3f (%.0f, %.2fx) |", fp8_ms[ri][g], tflops(s.M, s.N, s.K, fp8_ms[ri][g]),
                    bf16_ms[g] / fp8_ms[ri][g]);
      std::printf("\n");
    }
    std::fflush(stdout);
    layers.push_back(tot);
  }

  std::printf("\nPer linear layer, a training step's three GEMMs with the quantization of x, W and dy (q and qt each):"
              "\n\n| layer | bf16 ms |");
  for (const Recipe& r : kRecipes) std::printf(" %s: GEMMs + quant ms = total (x bf16) |", r.name);
  std::printf("\n|---|---|");
  for (size_t i = 0; i < nrec; ++i) std::printf("---|");
  std::printf("\n");
  std::vector<double> sum_fp8(nrec, 0.0);
  double sum_bf16 = 0;
  for (const LayerTotals& t : layers) {
    std::printf("| %s | %.3f |", t.label.c_str(), t.bf16);
    sum_bf16 += t.bf16;
    for (size_t ri = 0; ri < nrec; ++ri) {
      const double total = t.gemm[ri] + t.quant[ri];
      sum_fp8[ri] += total;
      std::printf(" %.3f + %.3f = %.3f (%.2fx) |", t.gemm[ri], t.quant[ri], total, t.bf16 / total);
    }
    std::printf("\n");
  }
  std::printf("| **all** | %.3f |", sum_bf16);
  for (size_t ri = 0; ri < nrec; ++ri) std::printf(" %.3f (%.2fx) |", sum_fp8[ri], sum_bf16 / sum_fp8[ri]);
  std::printf("\n");
  return 0;
}
