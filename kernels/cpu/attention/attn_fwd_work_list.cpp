// attn_fwd_work_list on the host (kernels/attn_work_list.h): the state reset, then per task and segment
// attn_fwd_block over the segment's key rows for the task's 128 query rows of its sample (every head), then
// attn_fwd_finalize. Each (query tile, key tile) step is attn_fwd_block's own, on the same 128-row tile boundaries as
// attn_fwd_whole_two_kv (kernels/cpu/attention/attn_fwd_fused.cpp), and a row visits its tiles in the same order (own
// ascending, then gathered ascending). A tile the list leaves out holds no key visible to the task's rows, so in
// attn_fwd_whole_two_kv it is skipped or adds P = 0 (m, l unchanged, acc + 0): the two ops give the same bits on
// finite inputs.
// Split tasks (kernels/attn_work_list.h "Splits"): each part runs from a fresh state into a temporary state of its
// tile's rows (every head), and once every task has run, each split tile's parts are merged in part order with
// attn_state_merge (part 0, then 1, ...) into the scratch rows before the finalize: the result depends on the parts,
// not on the order of the tasks in the list. Within rounding of the unsplit list's result, not bit for bit.
#include <algorithm>
#include <vector>

#include "kernels/attn_work_list.h"
#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {

void attn_state_reset(AttnState& state);
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask);
void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse);
void attn_state_merge(AttnState& state, const AttnState& other);

namespace {

// The list's tasks checked against the call (one query tile each, segments in range and ascending, each within one
// source; split parts with slots below `slots`, the caller's count, which must be the list's): a broken list fails
// here, naming the task, before any row is computed. The parts' coverage (every pair once) is the builder's promise
// (doc_work_list_problem checks it).
void check_tasks(const AttnWorkList& wl, const AttnDims& d, int64_t list_rows, bool two_sources, int64_t slots,
                 const char* op) {
  RT_CHECK(slots == wl.merge_slots,
           op << ": the list's tasks name " << wl.merge_slots << " merge slots, the caller passed split.slots = "
              << slots << (slots == 0 ? ": a list with split tasks needs the attn_fwd_work_list overload with an "
                                        "AttnSplitScratch whose slots is the list's merge_slots (or build the list "
                                        "without splits, DocWorkListSplit::on = false)"
                                      : ": pass the list's merge_slots"));
  const int64_t own_tiles = (d.Nk + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  const int64_t first_gathered = attn_second_kv_row(d.Nk) / kAttnWorkTileRows;
  const int64_t list_tiles = (list_rows + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  for (size_t t = 0; t < wl.tasks.size(); ++t) {
    const AttnWorkTask& task = wl.tasks[t];
    RT_CHECK(task.sample >= 0 && task.sample < d.B && task.q_row >= 0 && task.q_row < d.Nq &&
                 task.q_row % kAttnWorkTileRows == 0,
             op << ": task " << t << " (sample " << task.sample << ", q_row " << task.q_row
                << ") is not a 128-row query tile of the call's B=" << d.B << ", Nq=" << d.Nq);
    const bool split = task.parts > 1;
    RT_CHECK(task.parts >= 1 && task.parts <= kAttnWorkMaxParts && task.part >= 0 && task.part < task.parts &&
                 (split ? task.merge_slot >= task.part && task.merge_slot < slots : task.merge_slot == -1),
             op << ": task " << t << " is part " << int(task.part) << " of " << int(task.parts) << " with merge slot "
                << task.merge_slot << ": parts 1 to " << kAttnWorkMaxParts << ", the slot -1 when unsplit, else in "
                << "[part, " << slots << ")");
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
  // Each slot one part; a tile's parts at its first slot + part, of the same tile and count.
  std::vector<int64_t> at_slot(size_t(slots), -1);  // (slots) the task holding each
  for (size_t t = 0; t < wl.tasks.size(); ++t)
    if (wl.tasks[t].parts > 1) {
      int64_t& a = at_slot[size_t(wl.tasks[t].merge_slot)];
      RT_CHECK(a < 0, op << ": tasks " << a << " and " << t << " share merge slot " << wl.tasks[t].merge_slot);
      a = int64_t(t);
    }
  for (size_t s = 0; s < at_slot.size(); ++s) {
    RT_CHECK(at_slot[s] >= 0, op << ": merge slot " << s << " of " << slots << " has no task (the slots are dense)");
    const AttnWorkTask& task = wl.tasks[size_t(at_slot[s])];
    const int64_t f = at_slot[s - size_t(task.part)];
    RT_CHECK(f >= 0 && wl.tasks[size_t(f)].part == 0 && wl.tasks[size_t(f)].parts == task.parts &&
                 wl.tasks[size_t(f)].sample == task.sample && wl.tasks[size_t(f)].q_row == task.q_row,
             op << ": task " << at_slot[s] << " (part " << int(task.part) << " of " << int(task.parts)
                << ", merge slot " << s << ") is not at its query tile's first slot + part");
  }
}

// A split part's state: its tile's rows of every head, (1, H, rows, D) and (1, H, rows) f32.
struct PartState {
  std::vector<float> acc, m, l;
  int64_t rows = 0;
  int64_t task = -1;  // the list's task that ran into it
  AttnState state(int64_t H, int64_t D) {
    return AttnState{Tensor(acc.data(), DType::f32, Device::cpu(), {1, H, rows, D}),
                     Tensor(m.data(), DType::f32, Device::cpu(), {1, H, rows}),
                     Tensor(l.data(), DType::f32, Device::cpu(), {1, H, rows})};
  }
};

}  // namespace

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split) {
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
  check_tasks(wl, d, list_rows, two_sources, split.slots, op);
  // The kernels' tile-test bounds (unused here): one key range per sample and key tile of this call, so that a list
  // built for another call is refused on the host as on the device.
  const int64_t list_tiles = (list_rows + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  RT_CHECK(wl.tasks.empty() || int64_t(wl.keys.size()) == d.B * list_tiles,
           op << ": the list holds " << wl.keys.size() << " key ranges, the call's B x key tiles are " << d.B << " x "
              << list_tiles << "; build the list for this call (doc_work_list)");

  cpu::attn_state_reset(scratch);  // rows no task reaches finalize to out 0, lse -inf
  const int64_t s2 = attn_second_kv_row(d.Nk);
  std::vector<PartState> parts(size_t(wl.merge_slots));  // (merge slots) the split parts' states
  std::vector<int32_t> first_part(size_t(wl.merge_slots), -1);  // (merge slots) at s0: the tile's task index of part 0
  for (size_t n = 0; n < wl.tasks.size(); ++n) {
    const AttnWorkTask& task = wl.tasks[n];
    const int64_t b = task.sample;
    const int64_t rows = std::min<int64_t>(d.Nq, task.q_row + kAttnWorkTileRows) - task.q_row;
    Tensor qb = q.slice(b, b + 1);  // (1,Nq,H,D)
    AttnState sb{scratch.acc.slice(b, b + 1), scratch.m.slice(b, b + 1), scratch.l.slice(b, b + 1)};
    AttnMask mb;  // sample b's positions; the task's query rows; a segment's key rows in its source
    mb.docs = mask.docs;
    mb.docs.q_pos += b * mask.docs.q_stride;
    mb.docs.q_doc_start += b * mask.docs.q_stride;
    mb.q_begin = task.q_row;
    mb.q_end = task.q_row + rows;
    if (task.parts > 1) {  // the part's own state over its tile's rows only, from fresh
      PartState& ps = parts[size_t(task.merge_slot)];
      ps.rows = rows;
      ps.task = int64_t(n);
      ps.acc.assign(size_t(d.H * rows * d.D), 0.f);
      ps.m.assign(size_t(d.H * rows), 0.f);
      ps.l.assign(size_t(d.H * rows), 0.f);
      sb = ps.state(d.H, d.D);
      cpu::attn_state_reset(sb);
      qb = qb.view({d.Nq, d.H, d.D}).slice(task.q_row, task.q_row + rows).view({1, rows, d.H, d.D});
      mb.docs.q_pos += task.q_row;
      mb.docs.q_doc_start += task.q_row;
      mb.q_begin = 0;
      mb.q_end = rows;
      if (task.part == 0) first_part[size_t(task.merge_slot)] = int32_t(n);
    }
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
  // Each split tile: its parts merged in part order into part 0's state, then copied into the scratch's rows.
  for (size_t s0 = 0; s0 < first_part.size(); ++s0) {
    if (first_part[s0] < 0) continue;
    const AttnWorkTask& task = wl.tasks[size_t(first_part[s0])];
    PartState& p0 = parts[s0];
    AttnState merged = p0.state(d.H, d.D);
    for (int p = 1; p < task.parts; ++p) {
      PartState& pp = parts[s0 + size_t(p)];
      const AttnWorkTask* pt = pp.task >= 0 ? &wl.tasks[size_t(pp.task)] : nullptr;
      RT_CHECK(pt && pt->part == p && pt->sample == task.sample && pt->q_row == task.q_row, op << ": merge slot " << s0 + size_t(p) << " (part " << p << " of sample "
                                      << task.sample << "'s query tile at row " << task.q_row << ") holds another tile's part");
      const AttnState other = pp.state(d.H, d.D);
      cpu::attn_state_merge(merged, other);
    }
    const int64_t b = task.sample, rows = p0.rows;
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t row0 = (b * d.H + h) * d.Nq + task.q_row;  // (B,H,Nq) index of the tile's first row
      std::copy(p0.acc.begin() + h * rows * d.D, p0.acc.begin() + (h + 1) * rows * d.D,
                scratch.acc.ptr<float>() + row0 * d.D);
      std::copy(p0.m.begin() + h * rows, p0.m.begin() + (h + 1) * rows, scratch.m.ptr<float>() + row0);
      std::copy(p0.l.begin() + h * rows, p0.l.begin() + (h + 1) * rows, scratch.l.ptr<float>() + row0);
    }
  }
  cpu::attn_fwd_finalize(scratch, out, lse);
}

}  // namespace cpu
}  // namespace rt
