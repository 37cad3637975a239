// bench_attn_fp8_fwd_bench: the FP8 attention forward experiment (kernels/attn_fwd_fp8.h, issue 47) against our bf16
// forward (attn_fwd_whole: fwd v5 on an H100 / H200) on one sample, causal, D = 128: per N the bf16 forward, the FP8
// quantizer (attn_fwd_fp8_quantize) and the FP8 kernel alone (attn_fwd_fp8_from_codes), each timed with CUDA events
// (median of reps after warmup), TFLOP/s over the causal FLOPs 4 N^2 D H / 2, the ratio of the FP8 kernel's speed to
// the bf16 forward's (alone, and with the quantizer), and the relative RMS difference of the FP8 O from the bf16 O.
// Inputs: hashed uniform values of unit variance (bench/cuda_bench_util.cuh random_bf16).
//   bench_attn_fp8_fwd_bench [--n 16384,32768,65536] [--h 16] [--hkv 16] [--warmup 3] [--reps 10] [--full]
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "kernels/attn_fwd_fp8.h"

namespace rt::bench {
namespace {

// ||a - b|| / ||b|| over two bf16 device tensors of one shape (through the host).
double rel_rms(const Tensor& a, const Tensor& b) {
  std::vector<float> ha(size_t(a.numel())), hb(size_t(b.numel()));
  copy_cast(Tensor(ha.data(), DType::f32, Device::cpu(), {a.numel()}), a);
  copy_cast(Tensor(hb.data(), DType::f32, Device::cpu(), {b.numel()}), b);
  double num = 0, den = 0;
  for (size_t i = 0; i < ha.size(); ++i) {
    if (std::isnan(ha[i])) return INFINITY;
    num += (double(ha[i]) - hb[i]) * (double(ha[i]) - hb[i]);
    den += double(hb[i]) * hb[i];
  }
  return std::sqrt(num / den);
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

}  // namespace
}  // namespace rt::bench

int main(int argc, char** argv) {
  using namespace rt;
  using namespace rt::bench;
  std::vector<int64_t> ns = {16384, 32768, 65536};
  int64_t H = 16, Hkv = 16;
  int warmup = 3, reps = 10;
  bool causal = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--n") ns = parse_list(next());
    else if (a == "--h") H = std::stoll(next());
    else if (a == "--hkv") Hkv = std::stoll(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--full") causal = false;
    else {
      std::fprintf(stderr, "usage: bench_attn_fp8_fwd_bench [--n 16384,32768,65536] [--h 16] [--hkv 16] "
                           "[--warmup 3] [--reps 10] [--full]\n");
      return 2;
    }
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "bench_attn_fp8_fwd_bench: no CUDA device\n");
    return 1;
  }
  try {
    cuda::init(0);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs; B 1, H %ld, Hkv %ld, D 128, %s\n", prop.name, prop.multiProcessorCount, long(H),
                long(Hkv), causal ? "causal" : "full");
    std::printf("\n      N  bf16 ms  bf16 TF/s  quant ms  fp8 ms  fp8 TF/s  fp8/bf16  (fp8+quant)/bf16  O rel vs bf16\n");
    const Device gpu = Device::cuda(0);
    const int64_t D = 128, B = 1;
    for (int64_t N : ns) {
      const int64_t nblk = N / 128;
      DeviceBuffer q(size_t(N * H * D * 2)), k(size_t(N * Hkv * D * 2)), v(size_t(N * Hkv * D * 2));
      DeviceBuffer out(size_t(N * H * D * 2)), out8(size_t(N * H * D * 2));  // (1,N,H,D) bf16 each
      DeviceBuffer acc(size_t(N * H * D * 4)), m(size_t(N * H * 4)), l(size_t(N * H * 4));  // bf16 scratch state
      DeviceBuffer lse(size_t(N * H * 4)), lse8(size_t(N * H * 4));                          // (1,H,N) f32 each
      DeviceBuffer qc(size_t(N * H * D)), kc(size_t(N * Hkv * D)), vtc(size_t(N * Hkv * D));  // e4m3 codes
      DeviceBuffer qf(size_t(H * nblk * 4)), kf(size_t(Hkv * nblk * 4)), vf(size_t(Hkv * 4)), vam(size_t(Hkv * nblk * 4));
      Tensor tq(q.p, DType::bf16, gpu, {B, N, H, D}), tk(k.p, DType::bf16, gpu, {B, N, Hkv, D}),
          tv(v.p, DType::bf16, gpu, {B, N, Hkv, D}), tout(out.p, DType::bf16, gpu, {B, N, H, D}),
          tout8(out8.p, DType::bf16, gpu, {B, N, H, D});
      Tensor tacc(acc.p, DType::f32, gpu, {B, H, N, D}), tm(m.p, DType::f32, gpu, {B, H, N}),
          tl(l.p, DType::f32, gpu, {B, H, N}), tlse(lse.p, DType::f32, gpu, {B, H, N}),
          tlse8(lse8.p, DType::f32, gpu, {B, H, N});
      AttnFp8FwdCodes codes{Tensor(qc.p, DType::e4m3, gpu, {B, N, H, D}), Tensor(qf.p, DType::f32, gpu, {B, H, nblk}),
                            Tensor(kc.p, DType::e4m3, gpu, {B, N, Hkv, D}),
                            Tensor(kf.p, DType::f32, gpu, {B, Hkv, nblk}),
                            Tensor(vtc.p, DType::e4m3, gpu, {B, Hkv, D, N}), Tensor(vf.p, DType::f32, gpu, {B, Hkv}),
                            Tensor(vam.p, DType::f32, gpu, {B, Hkv, nblk})};
      random_bf16(tq, 11);
      random_bf16(tk, 12);
      random_bf16(tv, 13);
      fill(tout8, std::nanf(""));
      AttnState st{tacc, tm, tl};
      AttnMask mask;
      mask.causal = causal;
      const float scale = 1.f / std::sqrt(float(D));
      const double bf16_ms = time_ms([&] { attn_fwd_whole(tq, tk, tv, st, mask, tout, tlse); }, warmup, reps);
      const double quant_ms = time_ms([&] { attn_fwd_fp8_quantize(tq, tk, tv, codes); }, warmup, reps);
      const double fp8_ms = time_ms([&] { attn_fwd_fp8_from_codes(codes, causal, scale, tout8, tlse8); }, warmup, reps);
      const double flops = 4.0 * double(B) * H * double(N) * double(N) * D * (causal ? 0.5 : 1.0);
      const double bf16_tf = flops / (bf16_ms * 1e-3) / 1e12, fp8_tf = flops / (fp8_ms * 1e-3) / 1e12;
      const double err = rel_rms(tout8, tout);
      std::printf("%7ld %8.3f %10.1f %9.3f %7.3f %9.1f %9.2f %17.2f %14.4e\n", long(N), bf16_ms, bf16_tf, quant_ms,
                  fp8_ms, fp8_tf, bf16_ms / fp8_ms, bf16_ms / (fp8_ms + quant_ms), err);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attn_fp8_fwd_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
