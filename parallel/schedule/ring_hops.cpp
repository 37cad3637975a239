// The hops a ring of packed documents needs (parallel/schedule/ring_hops.h).
#include "parallel/schedule/ring_hops.h"

#include "kernels/tensor.h"

namespace rt {

void finish_hop_plan(RingHopPlan* plan) {
  const int cp = plan->cp;
  plan->kv_hops.assign(size_t(cp), 0);
  for (int s = 0; s < cp; ++s)
    for (int d = cp - 1; d > 0; --d)
      if (plan->visible[size_t(((s + d) % cp) * cp + s)]) {
        plan->kv_hops[size_t(s)] = d;
        break;
      }
}

int RingHopPlan::kv_hop_count() const {
  int total = 0;
  for (int h : kv_hops) total += h;
  return total;
}

int RingHopPlan::dkv_hop_count() const { return kv_hop_count(); }  // h - 1 along the chain, then one home

double RingHopPlan::bytes_per_layer(double kv_block_bytes, double dkv_block_bytes) const {
  return 2.0 * kv_hop_count() * kv_block_bytes + dkv_hop_count() * dkv_block_bytes;
}

RingHopPlan ring_hop_plan_full(int cp) {
  RT_CHECK(cp >= 1, "ring_hop_plan_full: cp = " << cp << " must be at least 1");
  RingHopPlan plan;
  plan.cp = cp;
  plan.visible.assign(size_t(cp) * size_t(cp), 1);
  finish_hop_plan(&plan);
  return plan;
}

RingHopPlan ring_hop_plan(const int64_t* pos, const int64_t* doc_start, int64_t batch, int64_t T, int cp) {
  RT_CHECK(cp >= 1 && cp <= 64 && T > 0 && T % cp == 0,
           "ring_hop_plan: T = " << T << " must be a positive multiple of cp = " << cp << " (cp at most 64)");
  const int64_t n = T / cp;
  std::vector<uint64_t> sees(static_cast<size_t>(cp), 0);  // (cp) bit s of sees[r]: rank r sees keys of rank s
  std::vector<int> owner(static_cast<size_t>(T));          // (T) by position: the rank holding it
  std::vector<int64_t> start(static_cast<size_t>(T));      // (T) by position: its document start
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(owner.begin(), owner.end(), -1);
    for (int64_t c = 0; c < T; ++c) {
      const int64_t p = pos[b * T + c];
      RT_CHECK(p >= 0 && p < T && owner[size_t(p)] < 0,
               "ring_hop_plan: sample " << b << " column " << c << " holds position " << p
                                        << ", which is outside [0, " << T << ") or held twice; each sample's "
                                        << "positions must be a permutation");
      owner[size_t(p)] = int(c / n);
      start[size_t(p)] = doc_start[b * T + c];
    }
    uint64_t held = 0;  // ranks holding a position of [start[p], p]
    for (int64_t p = 0; p < T; ++p) {
      const int64_t s = start[size_t(p)];
      RT_CHECK(s >= 0 && s <= p, "ring_hop_plan: sample " << b << " position " << p << " has document start " << s
                                                          << "; a document starts at or before its positions");
      const uint64_t bit = uint64_t(1) << owner[size_t(p)];
      if (s == p) {
        held = bit;
      } else if (p > 0 && s == start[size_t(p - 1)]) {
        held |= bit;
      } else {  // not a run of one document: recount
        held = 0;
        for (int64_t j = s; j <= p; ++j) held |= uint64_t(1) << owner[size_t(j)];
      }
      sees[size_t(owner[size_t(p)])] |= held;
    }
  }
  RingHopPlan plan;
  plan.cp = cp;
  plan.visible.assign(size_t(cp) * size_t(cp), 0);
  for (int r = 0; r < cp; ++r)
    for (int s = 0; s < cp; ++s) plan.visible[size_t(r * cp + s)] = (sees[size_t(r)] >> s) & 1;
  finish_hop_plan(&plan);
  return plan;
}

RingHopPlan ring_hop_plan_for_order(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp) {
  RT_CHECK(order.size() == doc_start.size(), "ring_hop_plan_for_order: order has " << order.size()
                                                                                   << " entries for T=" << doc_start.size());
  std::vector<int64_t> ring_start(order.size());  // (T) document start of each column
  for (size_t c = 0; c < order.size(); ++c) ring_start[c] = doc_start[size_t(order[c])];
  return ring_hop_plan(order.data(), ring_start.data(), 1, int64_t(order.size()), cp);
}

}  // namespace rt
