// bench_attn_fp8_fwd_bench: the FP8 attention forward experiment (kernels/attn_fwd_fp8.h, issue 47) against our bf16
// forward (attn_fwd_whole: fwd v5 on an H100 / H200) on one sample, causal, D = 128: per N the bf16 forward, the FP8
// quantizer (attn_fwd_fp8_quantize) and the FP8 kernel alone (attn_fwd_fp8_from_codes), each timed with CUDA events
// (median of reps after warmup), TFLOP/s over the causal FLOPs 4 N^2 D H / 2, the ratio of the FP8 kernel's speed to
// the bf16 forward's (alone, and with the quantizer), and the relative RMS difference of the FP8 O from the bf16 O.
// Inputs: hashed uniform values of unit variance (bench/cuda_bench_util.cuh random_bf16).
//   bench_attn_fp8_fwd_bench [--n 16384,32768,65536] [--h 16] [--hkv 16] [--warmup 3] [--reps 10] [--full]
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "bench/fp8_attn_bench_util.h"
#include "kernels/attn_fwd_fp8.h"

int main(int argc, char** argv) {
  using namespace rt;
  using namespace rt::bench;
  Fp8AttnBenchArgs args;
  args.ns = {16384, 32768, 65536};
  if (!parse_fp8_attn_bench_args(argc, argv, "bench_attn_fp8_fwd_bench", /*takes_batch=*/false, args)) return 2;
  const int64_t H = args.H, Hkv = args.Hkv;
  const int warmup = args.warmup, reps = args.reps;
  const bool causal = args.causal;
  return run_on_gpu0("bench_attn_fp8_fwd_bench", [&](const cudaDeviceProp& prop) {
    std::printf("device: %s, %d SMs; B 1, H %ld, Hkv %ld, D 128, %s\n", prop.name, prop.multiProcessorCount, long(H),
                long(Hkv), causal ? "causal" : "full");
    std::printf("\n      N  bf16 ms  bf16 TF/s  quant ms  fp8 ms  fp8 TF/s  fp8/bf16  (fp8+quant)/bf16  O rel vs bf16\n");
    const Device gpu = Device::cuda(0);
    const int64_t D = 128, B = 1;
    for (int64_t N : args.ns) {
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
      const double err = rel_rms(tout8, tout);
      print_fp8_attn_times(N, flops, bf16_ms, quant_ms, fp8_ms);
      std::printf(" %14.4e\n", err);
      std::fflush(stdout);
    }
  });
}
