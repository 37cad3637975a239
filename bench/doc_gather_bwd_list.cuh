// bench_doc_ring_steps --scheme gather --bwd-work-list (included by bench/doc_gather_steps.cuh): per receiving rank,
// the one-launch backward as attn_bwd_work_list (bwd v5's list mode over doc_bwd_work_list's list, built on the host
// as RingAttention would build it once per batch, untimed) beside attn_bwd_block_fresh_two_kv on the same inputs (the
// rank's q, own K / V, its gathered rows, dout, lse, delta), where the list kernel runs the call
// (attn_bwd_work_list_runs). Both timed as --timing says; then each run once from dQ = 0 and their results compared:
// dK / dV (own and gathered) bit for bit (the list kernel's claim, kernels/cuda/attention/attn_bwd_work_list.cu; a
// difference is printed and counted, not fatal) and dQ as max |list - two_kv| / max |two_kv| (unordered f32 adds in
// both). Also the list's size: tasks and (query tile, key tile) visits per head (AttnBwdWorkList::query_tiles).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "kernels/attn_bwd_work_list_runs.h"
#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list.h"

namespace rt::bench {

// The work-list builders' inputs for rank r's one-launch call (B = 1): its n query rows (positions from `order`,
// document starts from `ring_start`, rows [r n, (r + 1) n)), the key list of its own rows, the gap up to
// attn_second_kv_row(n) at position N (no query sees it), its received rows' positions `pos`, padded with N to
// list_rows.
inline DocWorkListInputs gather_call_inputs(const std::vector<int64_t>& order, const std::vector<int64_t>& ring_start,
                                            int r, int64_t n, int64_t N, const std::vector<int64_t>& pos,
                                            int64_t list_rows) {
  DocWorkListInputs in;
  in.B = 1, in.Nq = n, in.Nk = n, in.list_rows = list_rows;
  in.q_pos.assign(order.begin() + r * n, order.begin() + (r + 1) * n);
  in.q_doc_start.assign(ring_start.begin() + r * n, ring_start.begin() + (r + 1) * n);
  in.k_pos.assign(size_t(attn_second_kv_row(n)), N);
  std::copy(order.begin() + r * n, order.begin() + (r + 1) * n, in.k_pos.begin());
  in.k_pos.insert(in.k_pos.end(), pos.begin(), pos.end());
  in.k_pos.resize(size_t(list_rows), N);
  return in;
}

struct BwdListRank {
  bool runs = false;                  // the list kernel ran this rank's call (else the rest is 0)
  double list_ms = 0, two_kv_ms = 0;  // attn_bwd_work_list / attn_bwd_block_fresh_two_kv
  int64_t dkv_mismatch = 0;           // dK / dV elements (own and gathered) whose bits differ from two_kv's
  double dq_rel = 0;                  // max |dQ list - dQ two_kv| / max |dQ two_kv| (NaN on a NaN)
  int64_t tasks = 0, visits = 0;      // the list's tasks, and its (query tile, key tile) visits per head
};

// One rank's call: the tensors as measure_gather holds them (q (1,n,H,D), k / v (1,n,Hkv,D), k2 / v2 (1,Rc,Hkv,D)
// bf16; dout, lse, delta; dq (1,n,H,D), dk / dv, dk2 / dv2 f32, overwritten here), the key list's mask, its inputs.
struct BwdListCall {
  Tensor q, k, v, k2, v2, dout, lse, delta, dq, dk, dv, dk2, dv2;
  AttnMask mask;
  const DocWorkListInputs* in = nullptr;
  int64_t H = 0, Hkv = 0, D = 0;
  CallTiming timing = CallTiming::queued;
  int warmup = 3, reps = 10;
};

// The f32 elements of a device tensor on the host.
inline std::vector<float> bwd_list_fetch(const Tensor& t) {
  std::vector<float> host(size_t(t.numel()));  // (numel) f32
  CUDA_CHECK(cudaMemcpyAsync(host.data(), t.data, host.size() * 4, cudaMemcpyDeviceToHost, cuda::current_stream()));
  CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream()));
  return host;
}

inline int64_t bwd_list_bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

inline BwdListRank measure_bwd_list(const BwdListCall& c) {
  BwdListRank x;
  const int64_t n = c.q.shape[1], Rc = c.k2.shape[1];
  x.runs = attn_bwd_work_list_runs(c.q.device, DType::bf16, 1, c.H, c.Hkv, c.D, n, n, Rc, c.in->list_rows);
  if (!x.runs) return x;
  const AttnBwdWorkList list = doc_bwd_work_list(*c.in);
  x.tasks = int64_t(list.tasks.size());
  x.visits = list.query_tiles();
  const std::vector<int32_t> words = attn_work_list_words(list);
  DeviceBuffer wl(words.size() * 4);  // (words) i32
  CUDA_CHECK(cudaMemcpyAsync(wl.p, words.data(), words.size() * 4, cudaMemcpyHostToDevice, cuda::current_stream()));
  const Tensor wlt(wl.p, DType::i32, c.q.device, {int64_t(words.size())});
  auto list_bwd = [&] {
    attn_bwd_work_list(c.q, c.k, c.v, c.k2, c.v2, c.dout, c.lse, c.delta, c.dq, c.dk, c.dv, c.dk2, c.dv2, c.mask, wlt);
  };
  auto two_kv_bwd = [&] {
    attn_bwd_block_fresh_two_kv(c.q, c.k, c.v, c.k2, c.v2, c.dout, c.lse, c.delta, c.dq, c.dk, c.dv, c.dk2, c.dv2,
                                c.mask);
  };
  x.list_ms = call_ms(c.timing, list_bwd, c.warmup, c.reps);
  x.two_kv_ms = call_ms(c.timing, two_kv_bwd, c.warmup, c.reps);
  struct Result {
    std::vector<float> dq, dk, dv, dk2, dv2;
  };
  auto once = [&](const std::function<void()>& call) {
    fill(c.dq, 0.f);
    for (const Tensor* t : {&c.dk, &c.dv, &c.dk2, &c.dv2}) fill(*t, std::nanf(""));  // every row must be written
    call();
    return Result{bwd_list_fetch(c.dq), bwd_list_fetch(c.dk), bwd_list_fetch(c.dv), bwd_list_fetch(c.dk2),
                  bwd_list_fetch(c.dv2)};
  };
  const Result two = once(two_kv_bwd), got = once(list_bwd);
  x.dkv_mismatch = bwd_list_bit_mismatches(got.dk, two.dk) + bwd_list_bit_mismatches(got.dv, two.dv) +
                   bwd_list_bit_mismatches(got.dk2, two.dk2) + bwd_list_bit_mismatches(got.dv2, two.dv2);
  double diff = 0, ref = 0;
  bool nan = false;
  for (size_t i = 0; i < two.dq.size(); ++i) {
    nan = nan || std::isnan(got.dq[i]) || std::isnan(two.dq[i]);
    diff = std::max(diff, double(std::fabs(got.dq[i] - two.dq[i])));
    ref = std::max(ref, double(std::fabs(two.dq[i])));
  }
  x.dq_rel = nan ? NAN : ref > 0 ? diff / ref : diff;
  return x;
}

inline void print_bwd_list(const std::vector<BwdListRank>& ranks) {
  double list_max = 0, two_max = 0, dq_worst = 0;
  int64_t mismatch = 0;
  std::printf("  work list bwd (attn_bwd_work_list / attn_bwd_block_fresh_two_kv, ms; tasks, visits per head):");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const BwdListRank& x = ranks[r];
    if (!x.runs) continue;
    std::printf(" r%zu %.3f/%.3f (%lld, %lld)", r, x.list_ms, x.two_kv_ms, (long long)x.tasks, (long long)x.visits);
    list_max = std::max(list_max, x.list_ms);
    two_max = std::max(two_max, x.two_kv_ms);
    mismatch += x.dkv_mismatch;
    dq_worst = std::isnan(x.dq_rel) || std::isnan(dq_worst) ? NAN : std::max(dq_worst, x.dq_rel);
  }
  std::printf("\n  work list bwd max over ranks %.3f ms vs %.3f ms (%.3fx); dK / dV bits differing from two_kv: "
              "%lld%s; dQ max |diff| / max |two_kv| %.2e%s\n",
              list_max, two_max, two_max > 0 ? list_max / two_max : 0.0, (long long)mismatch,
              mismatch > 0 ? "  <-- NOT BITWISE EQUAL" : "", dq_worst,
              std::isnan(dq_worst) || dq_worst > 1e-3 ? "  <-- dQ DIFFERS" : "");
}

// JSON members (after a leading comma): per rank (0 where the list kernel did not run the call).
inline void json_bwd_list(FILE* json, const std::vector<BwdListRank>& ranks) {
  std::string list_ms = "[", two_ms = "[", bits = "[", dq = "[";
  char cell[48];
  for (size_t r = 0; r < ranks.size(); ++r) {
    const char* sep = r ? "," : "";
    std::snprintf(cell, sizeof(cell), "%s%.4f", sep, ranks[r].list_ms), list_ms += cell;
    std::snprintf(cell, sizeof(cell), "%s%.4f", sep, ranks[r].two_kv_ms), two_ms += cell;
    std::snprintf(cell, sizeof(cell), "%s%lld", sep, (long long)ranks[r].dkv_mismatch), bits += cell;
    std::snprintf(cell, sizeof(cell), "%s%.3e", sep, std::isnan(ranks[r].dq_rel) ? -1.0 : ranks[r].dq_rel), dq += cell;
  }
  std::fprintf(json, ",\"work_list_bwd_ms\":%s],\"two_kv_bwd_ms\":%s],\"work_list_bwd_dkv_bit_mismatches\":%s],"
                     "\"work_list_bwd_dq_rel\":%s]",
               list_ms.c_str(), two_ms.c_str(), bits.c_str(), dq.c_str());
}

}  // namespace rt::bench
