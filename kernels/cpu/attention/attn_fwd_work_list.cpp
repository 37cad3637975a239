// attn_fwd_work_list on the host (kernels/attn_work_list.h): the state reset, then per task and segment
// attn_fwd_block over the segment's key rows for the task's 128 query rows of its sample (every head), then
// attn_fwd_finalize. Each (query tile, key tile) step is attn_fwd_block's own, on the same 128-row tile boundaries as
// attn_fwd_whole_two_kv (kernels/cpu/attention/attn_fwd_fused.cpp), and a row visits its tiles in the same order (own
// ascending, then gathered ascending). A tile the list leaves out holds no key visible to the task's rows, so in
// attn_fwd_whole_two_kv it is skipped or adds P = 0 (m, l unchanged, acc + 0): the two ops give the same bits on
// finite inputs.
#include <algorithm>

#include "kernels/attn_work_list.h"
#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {

void attn_state_reset(AttnState& state);
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask);
void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse);

namespace {

// The list's tasks checked against the call (one query tile each, unsplit, segments in range and ascending, each
// within one source): a broken list fails here, naming the task, before any row is computed.
void check_tasks(const AttnWorkList& wl, const AttnDims& d, int64_t list_rows, bool two_sources, const char* op) {
  const int64_t own_tiles = (d.Nk + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  const int64_t first_gathered = attn_second_kv_row(d.Nk) / kAttnWorkTileRows;
  const int64_t list_tiles = (list_rows + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  for (size_t t = 0; t < wl.tasks.size(); ++t) {
    const AttnWorkTask& task = wl.tasks[t];
    RT_CHECK(task.sample >= 0 && task.sample < d.B && task.q_row >= 0 && task.q_row < d.Nq &&
                 task.q_row % kAttnWorkTileRows == 0,
             op << ": task " << t << " (sample " << task.sample << ", q_row " << task.q_row
                << ") is not a 128-row query tile of the call's B=" << d.B << ", Nq=" << d.Nq);
    RT_CHECK(task.part == 0 && task.parts == 1 && task.merge_slot == -1,
             op << ": task " << t << " is part " << int(task.part) << " of " << int(task.parts) << " (merge slot "
                << task.merge_slot << "); split tasks are not supported yet: build the list with parts = 1");
    RT_CHECK(task.segs >= 1 && task.first_seg >= 0 && int64_t(task.first_seg) + task.segs <= int64_t(wl.segs.size()),
             op << ": task " << t << " names segments [" << task.first_seg << ", " << task.first_seg + task.segs
                << ") of " << wl.segs.size());
    int64_t next = 0;  // the first tile the next segment may start at
    for (int s = task.first_seg; s < task.first_seg + task.segs; ++s) {
      const AttnKeySeg& seg = wl.segs[size_t(s)];
      const int64_t lo = seg.first_tile, hi = int64_t(seg.first_tile) + seg.tiles;  // tiles [lo, hi)
      const bool own = seg.source == -1, gathered = seg.source == 0 && two_sources;
      RT_CHECK(seg.tiles >= 1 && lo >= next && (own || gathered) &&
                   (own ? hi <= own_tiles : lo >= first_gathered && hi <= list_tiles),
               op << ": task " << t << "'s segment " << s << " (tiles [" << lo << ", " << hi << "), source "
                  << int(seg.source) << ") is out of range or order: own tiles are [0, " << own_tiles
                  << "), gathered tiles (source 0) [" << first_gathered << ", " << list_tiles
                  << "), ascending without overlap");
      next = hi;
    }
  }
}

}  // namespace

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse) {
  const char* op = "attn_fwd_work_list";
  int64_t list_rows = 0;
  const AttnDims d = attn_work_list_dims(q, k, v, k2, v2, mask, list, list_rows, op);
  const bool two_sources = k2.defined() && k2.shape[1] > 0;
  require_cpu_f32(q, op, "q");  // the others are checked by attn_fwd_block and attn_fwd_finalize
  check_attn_state_shapes(d, scratch, op);
  check_attn_docs(mask.docs, d.Nq, list_rows, op);
  const AttnWorkList wl = attn_work_list_from_words(list.ptr<int32_t>(), list.shape[0]);
  RT_CHECK(tasks == int64_t(wl.tasks.size()),
           op << ": told " << tasks << " tasks, but the list holds " << wl.tasks.size() << "; pass its words[0]");
  check_tasks(wl, d, list_rows, two_sources, op);
  // The kernels' tile-test bounds (unused here): one key range per sample and key tile of this call, so that a list
  // built for another call is refused on the host as on the device.
  const int64_t list_tiles = (list_rows + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  RT_CHECK(wl.tasks.empty() || int64_t(wl.keys.size()) == d.B * list_tiles,
           op << ": the list holds " << wl.keys.size() << " key ranges, the call's B x key tiles are " << d.B << " x "
              << list_tiles << "; build the list for this call (doc_work_list)");

  cpu::attn_state_reset(scratch);  // rows no task reaches finalize to out 0, lse -inf
  const int64_t s2 = attn_second_kv_row(d.Nk);
  for (const AttnWorkTask& task : wl.tasks) {
    const int64_t b = task.sample;
    const Tensor qb = q.slice(b, b + 1);  // (1,Nq,H,D)
    AttnState sb{scratch.acc.slice(b, b + 1), scratch.m.slice(b, b + 1), scratch.l.slice(b, b + 1)};
    AttnMask mb;  // sample b's positions; the task's query rows; a segment's key rows in its source
    mb.docs = mask.docs;
    mb.docs.q_pos += b * mask.docs.q_stride;
    mb.docs.q_doc_start += b * mask.docs.q_stride;
    mb.q_begin = task.q_row;
    mb.q_end = std::min<int64_t>(d.Nq, task.q_row + kAttnWorkTileRows);
    for (int s = task.first_seg; s < task.first_seg + task.segs; ++s) {
      const AttnKeySeg& seg = wl.segs[size_t(s)];
      const bool own = seg.source == -1;
      const int64_t base = own ? 0 : s2;  // the source's first list row
      const Tensor& ks = own ? k : k2;    // (B,Nks,Hkv,D)
      const Tensor& vs = own ? v : v2;
      AttnMask ms = mb;
      ms.docs.k_pos = mask.docs.k_pos + b * mask.docs.k_stride + base;  // (Nks) of sample b
      ms.k_begin = int64_t(seg.first_tile) * kAttnWorkTileRows - base;
      ms.k_end = std::min(ks.shape[1], ms.k_begin + int64_t(seg.tiles) * kAttnWorkTileRows);
      cpu::attn_fwd_block(qb, ks.slice(b, b + 1), vs.slice(b, b + 1), sb, ms);
    }
  }
  cpu::attn_fwd_finalize(scratch, out, lse);
}

}  // namespace cpu
}  // namespace rt
