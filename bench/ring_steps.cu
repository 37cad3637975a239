// Ring-step benchmark (issue 5, "Ring-step forms"): the kernel calls of a whole cp-rank ring, run one after
// another on one GPU, against one whole-sequence call with the same FLOPs (the forward's whole call is
// attn_fwd_whole, the fused fresh + finalized kernel; the backward's is attn_bwd_delta, zeroing dQ and
// attn_bwd_block_fresh, which stores dK / dV instead of adding them). Each rank's queries resume the
// fp32 state over cp K/V blocks with the masks of parallel/schedule/ring_schedule.h (zigzag: the causal diagonal block,
// then half the keys or half the queries per step; the first step starts the state and the last finalizes it, as
// RingAttention runs them; the sequence with separate reset / finalize passes is timed too); the backward
// recomputes per block and accumulates dQ per rank and dK/dV per source block. No communication: this measures what the ring's step
// shapes cost the kernels (resume, half blocks, offsets, cp x more launches), not the network.
//
//   bench_ring_steps [--cp 8] [--layout zigzag] [--seq 16384,65536] [--d 64,128] [--warmup 2] [--reps 5]
//                    [--timing queued|lone] [--json FILE]
// --timing (bench/cuda_bench_util.cuh): queued (default) times each call as the mean of --reps calls back to back
// with the host ahead of the GPU, as a training step's GPU runs them; lone, each call alone on an idle GPU (the
// host's enqueue time included: the method before 2026-12-02's third session).
//
// Model dim 2048 (H = 2048 / d), B = 1, causal, bf16. TFLOP/s by the standard count: 2*H*S^2*d forward
// (causal half of 4*H*S^2*d), backward 2.5x. Per-step TFLOP/s: each step kind timed on its own with events
// (diagonal, the zigzag half-key and half-query steps), FLOPs = the visible pairs x 4*d per head.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "kernels/attention.h"
#include "kernels/cuda_api.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "parallel/schedule/ring_schedule.h"

using namespace rt;

namespace {

using bench::call_ms;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// Visible (query, key) pairs of one block call (causal diagonal: n(n+1)/2 for a square block).
double visible_pairs(const AttnMask& m, int64_t n) {
  const int64_t qb = m.q_begin, qe = m.q_end < 0 ? n : m.q_end, kb = m.k_begin, ke = m.k_end < 0 ? n : m.k_end;
  if (!m.causal) return double(qe - qb) * double(ke - kb);
  double pairs = 0;
  const int64_t diag = m.q_offset - m.k_offset;
  for (int64_t i = qb; i < qe; ++i) pairs += double(std::max<int64_t>(0, std::min(ke, i + diag + 1) - kb));
  return pairs;
}

const char* step_kind(const RingBlockPlan& plan) {
  if (plan.mask.causal) return "diagonal";
  if (plan.mask.k_end >= 0) return "half-keys";
  if (plan.mask.q_begin > 0) return "half-queries";
  return "full";
}

}  // namespace

int main(int argc, char** argv) {
  int cp = 8, warmup = 2, reps = 5;
  std::string layout_name_str = "zigzag", json_path;
  bench::CallTiming timing = bench::CallTiming::queued;
  std::vector<int64_t> seqs{16384, 65536}, dims{64, 128};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--cp") cp = std::stoi(next());
    else if (a == "--layout") layout_name_str = next();
    else if (a == "--seq") seqs = parse_list(next());
    else if (a == "--d") dims = parse_list(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--json") json_path = next();
    else if (a == "--timing" && bench::parse_call_timing(next(), timing)) continue;
    else {
      std::fprintf(stderr, "usage: bench_ring_steps [--cp 8] [--layout zigzag] [--seq 16384,65536] [--d 64,128] "
                           "[--warmup 2] [--reps 5] [--timing queued|lone] [--json FILE]\n");
      return 2;
    }
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "bench_ring_steps: no CUDA device\n");
    return 1;
  }
  try {
    const Layout layout = parse_layout(layout_name_str);
    cuda::init(0);
    FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    std::printf("ring-step sequence: cp=%d %s, causal, B=1, model dim 2048, one GPU, no communication; calls timed "
                "%s\n", cp, layout_name(layout), bench::call_timing_name(timing));
    const int64_t model_dim = 2048;
    for (int64_t D : dims) {
      const int64_t H = model_dim / D;
      for (int64_t S : seqs) {
        RT_CHECK(S % (2 * cp) == 0, "--seq " << S << " must be a multiple of 2 * cp = " << 2 * cp);
        const int64_t n = S / cp;
        bench::RingStepBuffers buf(S, H, D);  // inputs drawn at random

        // One whole-sequence call, as a single-GPU run makes it (attn_fwd_whole and attn_bwd_block_fresh: one
        // fused kernel each on an H200).
        AttnMask causal;
        causal.causal = true;
        auto whole_fwd = [&] { buf.whole_fwd(causal); };
        auto whole_bwd = [&] { buf.whole_bwd(causal); };
        // The ring's calls, rank after rank (rank r's tokens are rows [r*n, (r+1)*n) of every buffer).
        const bench::RingStepBuffers::StepMask mask_of = [&](int r, int s, AttnMask* mask) {
          const RingBlockPlan plan = ring_block_plan(layout, true, r, s, n);
          *mask = plan.mask;
          return !plan.skip;
        };
        auto ring_fwd = [&] { buf.ring_fwd(cp, n, mask_of); };
        auto ring_bwd = [&] { buf.ring_bwd(cp, n, mask_of); };
        const double flops = 2.0 * double(H) * double(S) * double(S) * double(D);  // causal forward
        const double whole_fwd_ms = call_ms(timing, whole_fwd, warmup, reps);
        whole_fwd();
        const double whole_bwd_ms = call_ms(timing, whole_bwd, warmup, reps);
        const double ring_fwd_ms = call_ms(timing, ring_fwd, warmup, reps);
        // The same steps with the state reset and finalize as passes of their own (before the fused ends).
        const double ring_fwd_passes_ms =
            call_ms(timing, [&] { buf.ring_fwd(cp, n, mask_of, false); }, warmup, reps);
        ring_fwd();
        const double ring_bwd_ms = call_ms(timing, ring_bwd, warmup, reps);
        auto tf = [](double fl, double ms) { return fl / (ms * 1e-3) / 1e12; };
        std::printf("\nd=%ld H=%ld S=%ld (n=%ld per rank)\n", long(D), long(H), long(S), long(n));
        std::printf("  whole call      fwd %8.3f ms %6.1f TF/s | bwd %8.3f ms %6.1f TF/s\n", whole_fwd_ms,
                    tf(flops, whole_fwd_ms), whole_bwd_ms, tf(2.5 * flops, whole_bwd_ms));
        std::printf("  cp=%d ring steps fwd %8.3f ms %6.1f TF/s | bwd %8.3f ms %6.1f TF/s | ratio to the whole "
                    "call: fwd %.3f, bwd %.3f\n",
                    cp, ring_fwd_ms, tf(flops, ring_fwd_ms), ring_bwd_ms, tf(2.5 * flops, ring_bwd_ms),
                    whole_fwd_ms / ring_fwd_ms, whole_bwd_ms / ring_bwd_ms);
        std::printf("  cp=%d ring steps fwd with reset / finalize passes %8.3f ms %6.1f TF/s | ratio %.3f\n", cp,
                    ring_fwd_passes_ms, tf(flops, ring_fwd_passes_ms), whole_fwd_ms / ring_fwd_passes_ms);

        // Per-step kinds, rank cp-1 (it meets every kind: its diagonal, then half-key steps), and rank 0
        // (half-query steps). Each kind: the mean of its calls' times.
        std::map<std::string, std::pair<double, double>> kind_ms_flops;  // kind -> (ms, flops) summed
        std::map<std::string, int> kind_calls;
        for (int r : {0, cp - 1}) {
          for (int t = 0; t < cp; ++t) {
            const int s = ring_source(r, t, cp);
            const RingBlockPlan plan = ring_block_plan(layout, true, r, s, n);
            if (plan.skip) continue;
            if (r == 0 && plan.mask.causal) continue;  // the diagonal is counted once (rank cp-1)
            AttnState st = buf.rank_state(r, n);
            attn_state_reset(st);
            const double ms_f = call_ms(timing, [&] { buf.fwd_step(r, s, n, st, plan.mask); }, 1, reps);
            const double ms_b = call_ms(timing, [&] { buf.bwd_step(r, s, n, plan.mask); }, 1, reps);
            const double fl = 4.0 * double(H) * double(D) * visible_pairs(plan.mask, n);
            const std::string kind = step_kind(plan);
            kind_ms_flops[kind + " fwd"].first += ms_f;
            kind_ms_flops[kind + " fwd"].second += fl;
            kind_ms_flops[kind + " bwd"].first += ms_b;
            kind_ms_flops[kind + " bwd"].second += 2.5 * fl;
            ++kind_calls[kind + " fwd"];
            ++kind_calls[kind + " bwd"];
          }
        }
        for (const auto& [kind, mf] : kind_ms_flops) {
          std::printf("  step %-17s %8.3f ms per call %6.1f TF/s (%d calls timed)\n", kind.c_str(),
                      mf.first / kind_calls[kind], tf(mf.second, mf.first), kind_calls[kind]);
          if (json)
            std::fprintf(json,
                         "{\"kind\":\"ring_step\",\"cp\":%d,\"layout\":\"%s\",\"d\":%ld,\"S\":%ld,\"step\":\"%s\","
                         "\"ms\":%.4f,\"tflops\":%.2f}\n",
                         cp, layout_name(layout), long(D), long(S), kind.c_str(), mf.first / kind_calls[kind],
                         tf(mf.second, mf.first));
        }
        // Where the sequence's time goes beyond its block calls: every rank's calls timed one by one (summed), and
        // the per-rank calls around them (state reset and finalize; the backward's delta and dQ zeroing).
        double fwd_calls_ms = 0, bwd_calls_ms = 0;
        for (int r = 0; r < cp; ++r) {
          AttnState st = buf.rank_state(r, n);
          attn_state_reset(st);
          for (int t = 0; t < cp; ++t) {
            const int s = ring_source(r, t, cp);
            const RingBlockPlan plan = ring_block_plan(layout, true, r, s, n);
            if (plan.skip) continue;
            fwd_calls_ms += call_ms(timing, [&] { buf.fwd_step(r, s, n, st, plan.mask); }, 1, 3);
            bwd_calls_ms += call_ms(timing, [&] { buf.bwd_step(r, s, n, plan.mask); }, 1, 3);
          }
        }
        AttnState st0 = buf.rank_state(0, n);
        const double reset_ms = call_ms(timing, [&] { attn_state_reset(st0); }, 1, reps);
        const double finalize_ms =
            call_ms(timing, [&] { attn_fwd_finalize(st0, buf.bf(buf.out, n, 0), buf.rows(buf.lse, n, 0)); }, 1, reps);
        const double bwd_pre_ms = call_ms(
            timing,
            [&] {
              attn_bwd_delta(buf.bf(buf.out, n, 0), buf.bf(buf.dout, n, 0), buf.rows(buf.delta, n, 0));
              fill(buf.f32(buf.dq, n, 0), 0.f);
            },
            1, reps);
        std::printf("  fwd: block calls one by one %8.3f ms + %d x (reset %.3f + finalize %.3f ms) = %8.3f ms; "
                    "sequence %8.3f ms\n",
                    fwd_calls_ms, cp, reset_ms, finalize_ms, fwd_calls_ms + cp * (reset_ms + finalize_ms), ring_fwd_ms);
        std::printf("  bwd: block calls one by one %8.3f ms + %d x (delta + dQ zero %.3f ms) = %8.3f ms; "
                    "sequence %8.3f ms\n",
                    bwd_calls_ms, cp, bwd_pre_ms, bwd_calls_ms + cp * bwd_pre_ms, ring_bwd_ms);
        std::fflush(stdout);
        if (json)
          std::fprintf(json,
                       "{\"kind\":\"ring_sequence\",\"cp\":%d,\"layout\":\"%s\",\"d\":%ld,\"S\":%ld,\"whole_fwd_ms\":%.4f,"
                       "\"whole_bwd_ms\":%.4f,\"ring_fwd_ms\":%.4f,\"ring_bwd_ms\":%.4f,\"whole_fwd_tflops\":%.2f,"
                       "\"whole_bwd_tflops\":%.2f,\"ring_fwd_tflops\":%.2f,\"ring_bwd_tflops\":%.2f,"
                       "\"fwd_ratio\":%.4f,\"bwd_ratio\":%.4f,\"timing\":\"%s\"}\n",
                       cp, layout_name(layout), long(D), long(S), whole_fwd_ms, whole_bwd_ms, ring_fwd_ms, ring_bwd_ms,
                       tf(flops, whole_fwd_ms), tf(2.5 * flops, whole_bwd_ms), tf(flops, ring_fwd_ms),
                       tf(2.5 * flops, ring_bwd_ms), whole_fwd_ms / ring_fwd_ms, whole_bwd_ms / ring_bwd_ms,
                       bench::call_timing_name(timing));
      }
    }
    if (json) std::fclose(json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ring_steps: %s\n", e.what());
    return 1;
  }
  return 0;
}
