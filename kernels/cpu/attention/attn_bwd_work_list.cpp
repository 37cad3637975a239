// attn_bwd_work_list on the host (kernels/attn_work_list.h): dk, dv, dk2, dv2 zeroed, then per task (one 128-row key
// tile) and head, the key tile against each query tile of its segments: attn_bwd_block's tile step (the same
// products, masks and P / dS arithmetic, kernels/cpu/attention/attn_bwd_probs.h) on the same 128 x 128 tile
// boundaries as attn_bwd_block_fresh_two_kv (kernels/cpu/attention/attn_bwd_block_fresh.cpp).
//
// Visit order, and why the bits equal attn_bwd_block_fresh_two_kv's: the host does not run the tasks in the list's
// order (heaviest first: the device's scheduling order) but in key order: own tiles (by sample, then k_row), then
// gathered tiles likewise, each task's heads ascending and its query tiles ascending. Then
//   - a dK / dV row of key tile t, head group hk, gets its terms in (head h ascending, query tile ascending) order,
//     as attn_bwd_block's loops (b, h, query tile, key tile) give them;
//   - a dq_acc row of query tile qt, head h, gets its terms in key-tile order, own then gathered, as the two
//     attn_bwd_block_fresh calls give them.
// The pairs the list leaves out hold no visible (query, key) pair: attn_bwd_block skips them or adds P = dS = 0
// products (+0 or -0 terms, which leave any value but -0 unchanged; dk / dv start at +0 and never become -0, and a
// dq_acc entry equal to -0 on entry could turn +0 there). So on finite inputs the two ops give the same bits.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/attn_work_list.h"
#include "kernels/cpu/attention/attention_common.h"
#include "kernels/cpu/attention/attn_bwd_probs.h"

namespace rt {
namespace cpu {

void fill(Tensor y, float value);

namespace {

// The list's tasks checked against the call (one key tile each, at most once, unsplit, segments of query tiles in
// range and ascending, of the key tile's source): a broken list fails here, naming the task, before any row is
// computed. A key tile without a task keeps dK / dV = 0.
void check_tasks(const AttnBwdWorkList& wl, const AttnDims& d, int64_t list_rows, bool two_sources, const char* op) {
  const int64_t own_tiles = (d.Nk + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  const int64_t first_gathered = attn_second_kv_row(d.Nk) / kAttnWorkTileRows;
  const int64_t list_tiles = two_sources ? (list_rows + kAttnWorkTileRows - 1) / kAttnWorkTileRows : own_tiles;
  const int64_t q_tiles = (d.Nq + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  std::vector<uint8_t> seen(size_t(d.B * std::max(list_tiles, int64_t(1))), 0);  // (B, list_tiles)
  for (size_t n = 0; n < wl.tasks.size(); ++n) {
    const AttnBwdTask& task = wl.tasks[n];
    const int64_t t = task.k_row / kAttnWorkTileRows;
    const bool own = t < own_tiles, gathered = t >= first_gathered && t < list_tiles;
    RT_CHECK(task.sample >= 0 && task.sample < d.B && task.k_row >= 0 && task.k_row % kAttnWorkTileRows == 0 &&
                 (own || gathered),
             op << ": task " << n << " (sample " << task.sample << ", k_row " << task.k_row
                << ") is not a 128-row key tile of the call's B=" << d.B << " key list: own tiles [0, " << own_tiles
                << "), gathered tiles [" << first_gathered << ", " << (two_sources ? list_tiles : first_gathered)
                << ")");
    RT_CHECK(task.part == 0 && task.parts == 1 && task.merge_slot == -1,
             op << ": task " << n << " is part " << int(task.part) << " of " << int(task.parts) << " (merge slot "
                << task.merge_slot << "); split tasks are not supported yet: build the list with parts = 1");
    uint8_t& s = seen[size_t(task.sample * list_tiles + t)];
    RT_CHECK(!s, op << ": task " << n << " names sample " << task.sample << "'s key tile at row " << task.k_row
                    << " again; the backward list has one task per key tile (dK / dV are overwritten)");
    s = 1;
    RT_CHECK(task.segs >= 0 && task.first_seg >= 0 && int64_t(task.first_seg) + task.segs <= int64_t(wl.segs.size()),
             op << ": task " << n << " names segments [" << task.first_seg << ", " << task.first_seg + task.segs
                << ") of " << wl.segs.size());
    int64_t next = 0;  // the first query tile the next segment may start at
    for (int g = task.first_seg; g < task.first_seg + task.segs; ++g) {
      const AttnQuerySeg& seg = wl.segs[size_t(g)];
      const int64_t lo = seg.first_tile, hi = int64_t(seg.first_tile) + seg.tiles;  // query tiles [lo, hi)
      RT_CHECK(seg.tiles >= 1 && lo >= next && hi <= q_tiles && (own ? seg.source == -1 : seg.source == 0),
               op << ": task " << n << "'s segment " << g << " (query tiles [" << lo << ", " << hi << "), source "
                  << int(seg.source) << ") is out of range or order, or of the wrong source: the call has " << q_tiles
                  << " query tiles, ascending without overlap, and key tile " << t << " is "
                  << (own ? "own (source -1)" : "gathered (source 0)"));
      next = hi;
    }
  }
}

}  // namespace

void attn_bwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                        Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask, const Tensor& list) {
  const char* op = "attn_bwd_work_list";
  int64_t list_rows = 0;
  const AttnDims d = attn_work_list_dims(q, k, v, k2, v2, mask, list, list_rows, op);
  const bool two_sources = k2.defined() && k2.shape[1] > 0;
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&dout, "dout"},
                                {&lse, "lse"}, {&delta, "delta"}, {&dq_acc, "dq_acc"}, {&dk, "dk"}, {&dv, "dv"}})
    require_cpu_f32(*t, op, name);
  check_attn_bwd_shapes(d, dout, lse, delta, dq_acc, dk, dv, op);
  const int64_t Nk2 = k2.defined() ? k2.shape[1] : 0;
  if (k2.defined()) {
    require_cpu_f32(k2, op, "k2");
    require_cpu_f32(v2, op, "v2");
    require_cpu_f32(dk2, op, "dk2");
    require_cpu_f32(dv2, op, "dv2");
    check_shape(dk2, {d.B, Nk2, d.Hkv, d.D}, op, "dk2 (B,Nk2,Hkv,D)");
    check_shape(dv2, {d.B, Nk2, d.Hkv, d.D}, op, "dv2 (B,Nk2,Hkv,D)");
  } else {
    RT_CHECK((!dk2.defined() || dk2.numel() == 0) && (!dv2.defined() || dv2.numel() == 0),
             op << ": dk2 / dv2 are given but k2 / v2 are not; pass all four, or none for one source");
  }
  check_attn_docs(mask.docs, d.Nq, list_rows, op);
  const AttnBwdWorkList wl = attn_bwd_work_list_from_words(list.ptr<int32_t>(), list.shape[0]);
  check_tasks(wl, d, list_rows, two_sources, op);

  cpu::fill(dk, 0.f);  // key tiles no task reaches keep dK = dV = 0; qualified: rt::fill is found by ADL too
  cpu::fill(dv, 0.f);
  if (two_sources) {
    cpu::fill(dk2, 0.f);
    cpu::fill(dv2, 0.f);
  }
  if (d.D == 0) return;

  // Key order (see the top of the file): own tiles before gathered ones, then by sample and key row.
  const int64_t s2 = attn_second_kv_row(d.Nk);
  std::vector<size_t> order(wl.tasks.size());
  for (size_t n = 0; n < order.size(); ++n) order[n] = n;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const AttnBwdTask &x = wl.tasks[a], &y = wl.tasks[b];
    const bool xg = x.k_row >= s2 && two_sources, yg = y.k_row >= s2 && two_sources;
    if (xg != yg) return yg;
    if (x.sample != y.sample) return x.sample < y.sample;
    return x.k_row < y.k_row;
  });

  AttnMask second = mask;  // source 2's keys: the list's rows from attn_second_kv_row(Nk)
  second.docs.k_pos = mask.docs.k_pos + s2;
  static const AttnMask unmasked;  // a document tile wholly visible runs the unmasked path
  thread_local std::vector<float> scratch;  // grow-only, allocated once per thread
  float* s = attn_scratch(scratch, size_t(2 * kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) S, then P
  float* dp = s + kAttnTileQ * kAttnTileK;                                // (tq, kAttnTileK) dP, then dS
  thread_local std::vector<uint8_t> vis_buf(size_t(kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) document mask
  const bool avx2 = use_avx2_fma();
  const int64_t D = d.D;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float scale2 = scale * kLog2e;
  const int64_t q_row = d.H * D, k_row = d.Hkv * D;  // strides between token rows
  for (const size_t n : order) {
    const AttnBwdTask& task = wl.tasks[n];
    const int64_t b = task.sample;
    const bool own = task.k_row < s2 || !two_sources;
    const AttnMask& ms = own ? mask : second;
    const Tensor &ks = own ? k : k2, &vs = own ? v : v2;  // (B,Nks,Hkv,D)
    const Tensor &dks = own ? dk : dk2, &dvs = own ? dv : dv2;
    const int64_t Nks = ks.shape[1];
    const int64_t j0 = task.k_row - (own ? 0 : s2), nj = std::min(kAttnTileK, Nks - j0);  // the tile in its source
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / d.group;
      const int64_t qoff = (b * d.Nq * d.H + h) * D;  // row i of q, dout, dq at + i*q_row
      const int64_t koff = (b * Nks * d.Hkv + hk) * D;  // row j of the source's k, v, dk, dv at + j*k_row
      const float* lse_h = lse.ptr<float>() + (b * d.H + h) * d.Nq;      // (Nq)
      const float* delta_h = delta.ptr<float>() + (b * d.H + h) * d.Nq;  // (Nq)
      const float* kt = ks.ptr<float>() + koff + j0 * k_row;             // (nj, D), row stride k_row
      const float* vt = vs.ptr<float>() + koff + j0 * k_row;             // (nj, D)
      float* dkt = dks.ptr<float>() + koff + j0 * k_row;                 // (nj, D)
      float* dvt = dvs.ptr<float>() + koff + j0 * k_row;                 // (nj, D)
      for (int g = task.first_seg; g < task.first_seg + task.segs; ++g) {
        const AttnQuerySeg& seg = wl.segs[size_t(g)];
        for (int64_t qt = seg.first_tile; qt < int64_t(seg.first_tile) + seg.tiles; ++qt) {
          const int64_t i0 = qt * kAttnTileQ, tq = std::min(kAttnTileQ, d.Nq - i0);
          const AttnDocQueryTile qtile = attn_doc_query_tile(ms.docs, b, i0, tq);
          const AttnKeyTile tile = attn_key_tile(ms, unmasked, qtile, b, i0, tq, j0, nj, vis_buf.data());
          if (tile.step != AttnKeyTileStep::run) continue;  // the list names it, but no pair is visible
          const float* qtp = q.ptr<float>() + qoff + i0 * q_row;      // (tq, D), row stride q_row
          const float* dot = dout.ptr<float>() + qoff + i0 * q_row;   // (tq, D)
          float* dqt = dq_acc.ptr<float>() + qoff + i0 * q_row;       // (tq, D)
          std::memset(s, 0, sizeof(float) * size_t(2 * kAttnTileQ * kAttnTileK));  // s and dp
          gemm_strided_accumulate(tq, nj, D, scale2, qtp, q_row, 1, kt, 1, k_row, s, kAttnTileK);  // S
          gemm_strided_accumulate(tq, nj, D, 1.f, dot, q_row, 1, vt, 1, k_row, dp, kAttnTileK);    // dP
          attn_bwd_detail::probs_and_dscores_dispatch(avx2, s, dp, tq, nj, i0, j0, *tile.mask, tile.vis, lse_h,
                                                      delta_h, scale);
          gemm_strided_accumulate(nj, D, tq, 1.f, s, 1, kAttnTileK, dot, q_row, 1, dvt, k_row);   // dV += P^T dO
          gemm_strided_accumulate(nj, D, tq, 1.f, dp, 1, kAttnTileK, qtp, q_row, 1, dkt, k_row);  // dK += dS^T Q
          gemm_strided_accumulate(tq, D, nj, 1.f, dp, kAttnTileK, 1, kt, k_row, 1, dqt, q_row);   // dQ += dS K
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace rt
