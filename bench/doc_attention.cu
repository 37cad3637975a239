// bench_doc_attention: the CUDA attention kernels on one packed sample with a document mask (AttnMask::docs),
// against the same kernels on plain causal attention at the same N and on each document alone.
//   sample: B = 1, N tokens (--n, default 16K, 64K, 128K), H = --h (16) heads of d = --d (128), documents drawn
//     from a seeded mix (--mix): short = uniform 1K..4K tokens; mixed = 3 in 4 short, else uniform 8K..32K;
//     the last document is cut at N.
//   rows: doc       = attn_fwd_whole / attn_bwd_delta + zeroed dq + attn_bwd_block_fresh with the document mask;
//         causal    = the same calls, causal, no documents, at the same N (all N(N+1)/2 pairs);
//         per-doc   = the causal calls at N = each document's length, one call per document, times summed.
//   TFLOP/s on visible pairs for every row: 4 d FLOPs per pair forward, 10 d backward (per head).
//   Timing: CUDA events, median of --reps (10) after --warmup (3).
// Output: a table on stdout and, with --json FILE, one JSON object per row.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "kernels/attention.h"
#include "kernels/cuda_api.h"
#include "kernels/ops.h"

namespace {

using rt::DType;
using rt::Tensor;
namespace bench = rt::bench;
using Dev = bench::DeviceBuffer;

std::vector<int64_t> doc_lengths(int64_t N, const std::string& mix, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> shortd(1024, 4096), longd(8192, 32768);
  std::uniform_int_distribution<int> pick(0, 3);
  std::vector<int64_t> lens;
  int64_t total = 0;
  while (total < N) {
    const int64_t len = std::min(N - total, (mix == "mixed" && pick(rng) == 0) ? longd(rng) : shortd(rng));
    lens.push_back(len);
    total += len;
  }
  return lens;
}

// Forward and backward of one call shape, timed; the mask decides which pairs take part.
struct Timed {
  double fwd_ms, bwd_ms;
};

}  // namespace

int main(int argc, char** argv) {
  int warmup = 3, reps = 10;
  int64_t d = 128, H = 16;
  uint64_t seed = 1;
  std::string json_path, only_n, mix = "mixed";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--json") json_path = next();
    else if (a == "--n") only_n = next();
    else if (a == "--d") d = std::stoll(next());
    else if (a == "--h") H = std::stoll(next());
    else if (a == "--mix") mix = next();
    else if (a == "--seed") seed = std::stoull(next());
    else if (a == "--deterministic") rt::set_deterministic_attention(true);
    else {
      std::fprintf(stderr, "usage: bench_doc_attention [--n 65536] [--d 128] [--h 16] [--mix mixed|short] [--seed 1] "
                           "[--warmup 3] [--reps 10] [--json FILE] [--deterministic]\n");
      return 2;
    }
  }
  if (mix != "mixed" && mix != "short") {
    std::fprintf(stderr, "bench_doc_attention: --mix %s is not mixed or short\n", mix.c_str());
    return 2;
  }
  if (!rt::cuda_available()) {
    std::fprintf(stderr, "bench_doc_attention: no CUDA device\n");
    return 1;
  }
  try {
    rt::cuda::init(0);
    const rt::Device gpu = rt::Device::cuda(0);
    FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    std::vector<int64_t> sizes{16384, 65536, 131072};
    if (!only_n.empty()) sizes = {std::stoll(only_n)};
    const int64_t max_n = *std::max_element(sizes.begin(), sizes.end());
    const size_t act = size_t(max_n * H * d);  // elements of one (1, N, H, d) tensor
    Dev q(act * 2), k(act * 2), v(act * 2), dout(act * 2), out(act * 2);
    Dev acc(act * 4), dq(act * 4), dk(act * 4), dv(act * 4);
    Dev m(size_t(max_n * H * 4)), l(size_t(max_n * H * 4)), lse(size_t(max_n * H * 4)), delta(size_t(max_n * H * 4));
    Dev pos(size_t(max_n * 8)), start(size_t(max_n * 8));  // (1, N) int64 positions and document starts

    // Times attn_fwd_whole and the fresh backward of (1, n, H, d) under `mask`.
    auto time_call = [&](int64_t n, const rt::AttnMask& mask) {
      Tensor tq(q.p, DType::bf16, gpu, {1, n, H, d}), tk(k.p, DType::bf16, gpu, {1, n, H, d}),
          tv(v.p, DType::bf16, gpu, {1, n, H, d}), tdo(dout.p, DType::bf16, gpu, {1, n, H, d}),
          tout(out.p, DType::bf16, gpu, {1, n, H, d});
      Tensor tacc(acc.p, DType::f32, gpu, {1, H, n, d}), tm(m.p, DType::f32, gpu, {1, H, n}),
          tl(l.p, DType::f32, gpu, {1, H, n}), tlse(lse.p, DType::f32, gpu, {1, H, n}),
          tdelta(delta.p, DType::f32, gpu, {1, H, n});
      Tensor tdq(dq.p, DType::f32, gpu, {1, n, H, d}), tdk(dk.p, DType::f32, gpu, {1, n, H, d}),
          tdv(dv.p, DType::f32, gpu, {1, n, H, d});
      rt::AttnState st{tacc, tm, tl};
      auto fwd = [&] { rt::attn_fwd_whole(tq, tk, tv, st, mask, tout, tlse); };
      auto bwd = [&] {
        rt::attn_bwd_delta(tout, tdo, tdelta);
        rt::fill(tdq, 0.f);
        rt::attn_bwd_block_fresh(tq, tk, tv, tdo, tlse, tdelta, tdq, tdk, tdv, mask);
      };
      const double f = bench::time_ms(fwd, warmup, reps);
      fwd();
      return Timed{f, bench::time_ms(bwd, warmup, reps)};
    };

    std::printf("d %ld, H %ld, mix %s, backward dQ: %s\n", long(d), long(H), mix.c_str(),
                rt::deterministic_attention() ? "deterministic" : "float atomics");
    std::printf("\n       N  docs  row        visible pairs   fwd ms  fwd TF/s   bwd ms  bwd TF/s\n");
    for (const int64_t N : sizes) {
      const std::vector<int64_t> lens = doc_lengths(N, mix, seed);
      std::vector<int64_t> hpos(static_cast<size_t>(N)), hstart(static_cast<size_t>(N));  // (1, N) each
      double doc_pairs = 0;
      for (int64_t s = 0, i = 0; s < int64_t(lens.size()); ++s) {
        const int64_t first = i;
        doc_pairs += double(lens[size_t(s)]) * double(lens[size_t(s)] + 1) / 2;
        for (int64_t j = 0; j < lens[size_t(s)]; ++j, ++i) hpos[size_t(i)] = i, hstart[size_t(i)] = first;
      }
      CUDA_CHECK(cudaMemcpy(pos.p, hpos.data(), size_t(N) * 8, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(start.p, hstart.data(), size_t(N) * 8, cudaMemcpyHostToDevice));
      uint64_t input_seed = 11;
      for (Dev* t : {&q, &k, &v, &dout}) bench::random_bf16(Tensor(t->p, DType::bf16, gpu, {1, N, H, d}), input_seed++);

      rt::AttnMask docs;
      docs.docs.q_pos = docs.docs.k_pos = static_cast<const int64_t*>(pos.p);
      docs.docs.q_doc_start = static_cast<const int64_t*>(start.p);
      docs.docs.q_stride = docs.docs.k_stride = N;
      rt::AttnMask causal;
      causal.causal = true;
      const Timed t_doc = time_call(N, docs), t_causal = time_call(N, causal);
      Timed t_each{0, 0};
      for (const int64_t len : lens) {
        const Timed t = time_call(len, causal);
        t_each.fwd_ms += t.fwd_ms;
        t_each.bwd_ms += t.bwd_ms;
      }
      const double causal_pairs = double(N) * double(N + 1) / 2;
      auto row = [&](const char* name, const Timed& t, double pairs) {
        const double fwd_tf = 4.0 * d * H * pairs / (t.fwd_ms * 1e-3) / 1e12;
        const double bwd_tf = 10.0 * d * H * pairs / (t.bwd_ms * 1e-3) / 1e12;
        std::printf("%8ld %5zu  %-8s %15.0f %8.3f %9.1f %8.3f %9.1f\n", long(N), lens.size(), name, pairs, t.fwd_ms,
                    fwd_tf, t.bwd_ms, bwd_tf);
        std::fflush(stdout);
        if (json)
          std::fprintf(json,
                       "{\"kind\":\"doc_attention\",\"row\":\"%s\",\"N\":%ld,\"d\":%ld,\"H\":%ld,\"mix\":\"%s\","
                       "\"docs\":%zu,\"visible_pairs\":%.0f,\"fwd_ms\":%.4f,\"fwd_tflops\":%.2f,\"bwd_ms\":%.4f,"
                       "\"bwd_tflops\":%.2f,\"deterministic\":%s}\n",
                       name, long(N), long(d), long(H), mix.c_str(), lens.size(), pairs, t.fwd_ms, fwd_tf, t.bwd_ms,
                       bwd_tf, rt::deterministic_attention() ? "true" : "false");
      };
      row("doc", t_doc, doc_pairs);
      row("causal", t_causal, causal_pairs);
      row("per-doc", t_each, doc_pairs);
    }
    if (json) std::fclose(json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_doc_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
