// bench_attn_fp8_bwd_bench: the FP8 attention backward experiment (kernels/attn_bwd_fp8.h, issue 47) against our bf16
// backward (attn_bwd_block_fresh: bwd v5 on an H100 / H200) on the same shapes, D = 128: per N the bf16 backward, the
// FP8 quantizer (attn_bwd_fp8_quantize) and the FP8 kernel alone (attn_bwd_fp8_from_codes), each timed with CUDA
// events (median of reps after warmup); TFLOP/s over bench/attention.cu's count (the backward is 2.5x the forward's
// 4 B H N^2 D, half when causal: 10 D FLOPs per visible pair); the ratio of the FP8 kernel's speed to the bf16
// backward's (alone, and with the quantizer); and the relative RMS difference of the FP8 dQ, dK, dV from the bf16 ones
// (both from zeroed accumulators after one forward; expected ~3.7e-2, the E4M3 floor: bench/NOTES.md "FP8 attention
// numerics, emulated"). Inputs: hashed uniform values of unit variance (bench/cuda_bench_util.cuh random_bf16).
//   bench_attn_fp8_bwd_bench [--n 4096,16384,32768] [--b 1] [--h 16] [--hkv 16] [--warmup 3] [--reps 10] [--full]
#include <cmath>
#include <cstdio>

#include "bench/cuda_bench_util.cuh"
#include "bench/fp8_attn_bench_util.h"
#include "kernels/attn_bwd_fp8.h"

int main(int argc, char** argv) {
  using namespace rt;
  using namespace rt::bench;
  Fp8AttnBenchArgs args;
  args.ns = {4096, 16384, 32768};
  if (!parse_fp8_attn_bench_args(argc, argv, "bench_attn_fp8_bwd_bench", /*takes_batch=*/true, args)) return 2;
  const int64_t B = args.B, H = args.H, Hkv = args.Hkv;
  const int warmup = args.warmup, reps = args.reps;
  const bool causal = args.causal;
  return run_on_gpu0("bench_attn_fp8_bwd_bench", [&](const cudaDeviceProp& prop) {
    std::printf("device: %s, %d SMs; B %ld, H %ld, Hkv %ld, D 128, %s\n", prop.name, prop.multiProcessorCount,
                long(B), long(H), long(Hkv), causal ? "causal" : "full");
    std::printf("\n      N  bf16 ms  bf16 TF/s  quant ms  fp8 ms  fp8 TF/s  fp8/bf16  (fp8+quant)/bf16  "
                "dq rel  dk rel  dv rel (fp8 vs bf16)\n");
    const Device gpu = Device::cuda(0);
    const int64_t D = 128;
    for (int64_t N : args.ns) {
      const int64_t nblk = N / 128, nq = B * N * H * D, nk = B * N * Hkv * D;
      DeviceBuffer q(size_t(nq * 2)), k(size_t(nk * 2)), v(size_t(nk * 2)), dout(size_t(nq * 2)), out(size_t(nq * 2));
      DeviceBuffer acc(size_t(nq * 4)), m(size_t(B * N * H * 4)), l(size_t(B * N * H * 4));  // forward state
      DeviceBuffer lse(size_t(B * N * H * 4)), delta(size_t(B * N * H * 4));                  // (B,H,N) f32 each
      DeviceBuffer dq(size_t(nq * 4)), dk(size_t(nk * 4)), dv(size_t(nk * 4));                // bf16 backward's
      DeviceBuffer dq8(size_t(nq * 4)), dk8(size_t(nk * 4)), dv8(size_t(nk * 4));             // fp8 backward's
      DeviceBuffer qt(static_cast<size_t>(nq)), dot(static_cast<size_t>(nq)), kt(static_cast<size_t>(nk));  // e4m3
      DeviceBuffer qf(size_t(B * H * nblk * 4)), dof(size_t(B * H * nblk * 4)), kf(size_t(B * Hkv * nblk * 4));
      Tensor tq(q.p, DType::bf16, gpu, {B, N, H, D}), tk(k.p, DType::bf16, gpu, {B, N, Hkv, D}),
          tv(v.p, DType::bf16, gpu, {B, N, Hkv, D}), tdo(dout.p, DType::bf16, gpu, {B, N, H, D}),
          tout(out.p, DType::bf16, gpu, {B, N, H, D});
      Tensor tacc(acc.p, DType::f32, gpu, {B, H, N, D}), tm(m.p, DType::f32, gpu, {B, H, N}),
          tl(l.p, DType::f32, gpu, {B, H, N}), tlse(lse.p, DType::f32, gpu, {B, H, N}),
          tdelta(delta.p, DType::f32, gpu, {B, H, N});
      Tensor tdq(dq.p, DType::f32, gpu, {B, N, H, D}), tdk(dk.p, DType::f32, gpu, {B, N, Hkv, D}),
          tdv(dv.p, DType::f32, gpu, {B, N, Hkv, D});
      Tensor tdq8(dq8.p, DType::f32, gpu, {B, N, H, D}), tdk8(dk8.p, DType::f32, gpu, {B, N, Hkv, D}),
          tdv8(dv8.p, DType::f32, gpu, {B, N, Hkv, D});
      AttnFp8BwdCodes codes{Tensor(qt.p, DType::e4m3, gpu, {B, H, D, N}), Tensor(qf.p, DType::f32, gpu, {B, H, nblk}),
                            Tensor(dot.p, DType::e4m3, gpu, {B, H, D, N}),
                            Tensor(dof.p, DType::f32, gpu, {B, H, nblk}),
                            Tensor(kt.p, DType::e4m3, gpu, {B, Hkv, D, N}),
                            Tensor(kf.p, DType::f32, gpu, {B, Hkv, nblk})};
      random_bf16(tq, 11);
      random_bf16(tk, 12);
      random_bf16(tv, 13);
      random_bf16(tdo, 14);
      AttnState st{tacc, tm, tl};
      AttnMask mask;
      mask.causal = causal;
      attn_fwd_whole(tq, tk, tv, st, mask, tout, tlse);
      attn_bwd_delta(tout, tdo, tdelta);

      // The gradients once, from zeroed accumulators, for the error columns.
      fill(tdq, 0.f);
      attn_bwd_block_fresh(tq, tk, tv, tdo, tlse, tdelta, tdq, tdk, tdv, mask);
      fill(tdq8, 0.f);
      fill(tdk8, 0.f);
      fill(tdv8, 0.f);
      attn_bwd_fp8_quantize(tq, tk, tdo, codes);
      attn_bwd_fp8_from_codes(tq, tk, tv, tdo, tlse, tdelta, codes, causal, tdq8, tdk8, tdv8);
      const double eq = rel_rms(tdq8, tdq), ek = rel_rms(tdk8, tdk), ev = rel_rms(tdv8, tdv);

      // Timed: the accumulators keep growing over the reps (only the time counts).
      const double bf16_ms =
          time_ms([&] { attn_bwd_block_fresh(tq, tk, tv, tdo, tlse, tdelta, tdq, tdk, tdv, mask); }, warmup, reps);
      const double quant_ms = time_ms([&] { attn_bwd_fp8_quantize(tq, tk, tdo, codes); }, warmup, reps);
      const double fp8_ms = time_ms(
          [&] { attn_bwd_fp8_from_codes(tq, tk, tv, tdo, tlse, tdelta, codes, causal, tdq8, tdk8, tdv8); }, warmup,
          reps);
      const double flops = 10.0 * double(B) * H * double(N) * double(N) * D * (causal ? 0.5 : 1.0);
      print_fp8_attn_times(N, flops, bf16_ms, quant_ms, fp8_ms);
      std::printf("  %.3e %.3e %.3e\n", eq, ek, ev);
      std::fflush(stdout);
    }
  });
}
