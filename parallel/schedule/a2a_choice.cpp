// parallel.cp_a2a: auto, the prediction per u and the pick (parallel/schedule/a2a_choice.h).
#include "parallel/schedule/a2a_choice.h"

#include <algorithm>
#include <cstdio>

#include "kernels/tensor.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/head_exchange.h"

namespace rt {

namespace {

// The ring candidate priced for one sample over `ring` ranks: the named one, or the least total.
const RingCandidate& priced_candidate(const std::vector<RingCandidate>& cands, const std::string& layout, int ring) {
  if (ring == 1) return cands.front();  // one rank: every layout is the whole call
  if (layout.empty()) return cands[pick_balanced(cands)];
  for (const RingCandidate& c : cands)
    if (c.label() == layout) return c;
  RT_CHECK(false, "parallel.cp_a2a: auto: the ring layout '" << layout << "' is not a candidate here (zigzag needs "
                                                             << "seq_len divisible by 2 x ring); use layout: auto");
  return cands.front();
}

// Exposed time of one way of the exchange (bytes sent per rank in total over the head groups) with G groups whose
// ring each takes ring_group_us: G = 1 all of it; G = 2 the first group's whole, the second's beyond one group's ring.
double exposed_way_us(double bytes, int groups, double ring_group_us, const A2aLinkModel& link) {
  if (bytes <= 0) return 0;
  const double one = link.exchange_latency_us + bytes / groups / link.bytes_per_us;
  if (groups == 1) return one;
  return one + double(groups - 1) * std::max(0.0, one - ring_group_us);
}

}  // namespace

const A2aCandidate& A2aChoice::picked() const {
  for (const A2aCandidate& c : candidates)
    if (c.u == pick) return c;
  RT_CHECK(false, "A2aChoice: the pick u=" << pick << " is not a candidate");
  return candidates.front();
}

std::string A2aChoice::summary() const {
  std::string s = "parallel.cp_a2a: auto -> " + std::to_string(pick) + " (predicted per layer, efficiency fwd / bwd "
                  "of the ideal:";
  char buf[256];
  for (const A2aCandidate& c : candidates) {
    if (!c.admissible) {
      std::snprintf(buf, sizeof buf, " u=%d not admissible: %s;", c.u, c.why_not.c_str());
    } else {
      std::snprintf(buf, sizeof buf, " u=%d %.2f / %.2f, %.3f ms (ring %d%s%s, exchange %.3f ms exposed)%s;", c.u,
                    c.efficiency_fwd(), c.efficiency_bwd(), c.total_us() * 1e-3 / samples, c.ring,
                    c.ring_layout.empty() ? "" : " ", c.ring_layout.c_str(),
                    (c.exchange_fwd_us + c.exchange_bwd_us) * 1e-3 / samples, c.u == pick ? " <- pick" : "");
    }
    s += buf;
  }
  if (!s.empty() && s.back() == ';') s.pop_back();
  return s + "); " + why;
}

A2aChoice choose_a2a_degree(const std::vector<std::vector<int64_t>>& samples, int cp, const A2aModelShape& shape,
                            const std::string& layout, const A2aLinkModel& a2a_link) {
  RT_CHECK(!samples.empty(), "parallel.cp_a2a: auto needs at least one sample's document starts");
  RT_CHECK(cp >= 1, "parallel.cp_a2a: auto: cp=" << cp << " must be at least 1");
  RT_CHECK(shape.tp >= 1 && shape.heads % shape.tp == 0 && shape.kv_heads >= 1 && shape.kv_heads % shape.tp == 0 &&
               shape.heads % shape.kv_heads == 0,
           "parallel.cp_a2a: auto: " << shape.heads << " query / " << shape.kv_heads << " KV heads do not split over tp="
                                     << shape.tp << "; fix model.n_head, model.n_kv_head or parallel.tp");
  const int64_t T = int64_t(samples.front().size());
  RT_CHECK(T > 0 && T % cp == 0, "parallel.cp_a2a: auto: seq_len " << T << " is not divisible by cp=" << cp);
  for (const auto& s : samples)
    RT_CHECK(int64_t(s.size()) == T, "parallel.cp_a2a: auto: samples of " << s.size() << " and " << T << " tokens");
  const int64_t H = shape.heads / shape.tp, Hkv = shape.kv_heads / shape.tp;

  A2aChoice choice;
  choice.samples = int(samples.size());
  for (int u = 1; u <= cp; ++u) {
    if (cp % u != 0) continue;
    A2aCandidate c;
    c.u = u;
    c.ring = cp / u;
    if (H % u != 0) {
      c.why_not = "tp x u = " + std::to_string(shape.tp * u) + " does not divide n_head = " +
                  std::to_string(shape.heads);
      choice.candidates.push_back(c);
      continue;
    }
    c.admissible = true;
    RingAttentionShape rs;  // one sample, this rank's tokens, as the model holds them
    rs.batch = 1;
    rs.local_tokens = T / cp;
    rs.heads = H;
    rs.kv_heads = Hkv;
    rs.head_dim = shape.head_dim;
    rs.dtype = shape.dtype_bytes == 2 ? DType::bf16 : DType::f32;
    const HeadExchangeShape x = head_exchange_shape(rs, u);
    c.q_heads = x.q_heads, c.kv_heads = x.kv_heads, c.replicated = x.replicated, c.head_groups = x.head_groups;
    c.exchange_bytes = x.forward_bytes + x.backward_bytes;
    // The plan's totals split into the way out and the way back (context_attention.cpp's byte formula).
    const double rows = double(u - 1) * double(rs.local_tokens * rs.head_dim), act = double(shape.dtype_bytes);
    const double fwd_out = rows * double(x.q_heads + 2 * x.kv_heads) * act;
    const double bwd_out = rows * double(3 * x.q_heads + 2 * x.kv_heads) * act;
    const int G = x.head_groups;
    RingShape ring_shape;
    ring_shape.heads = x.q_heads / G;
    ring_shape.kv_heads = x.kv_heads / G;
    ring_shape.head_dim = shape.head_dim;
    ring_shape.dtype_bytes = shape.dtype_bytes;
    ring_shape.dkv_wire_bytes = shape.dkv_wire_bytes;
    for (const std::vector<int64_t>& starts : samples) {
      const std::vector<RingCandidate> cands = ring_candidates(starts, c.ring, ring_shape, /*with_orders=*/false);
      const RingCandidate& rc = priced_candidate(cands, layout, c.ring);
      if (c.ring_layout.empty()) c.ring_layout = c.ring > 1 ? rc.label() : "whole call";
      else if (c.ring > 1 && c.ring_layout.find(rc.label()) == std::string::npos) c.ring_layout += "|" + rc.label();
      c.ring_fwd_us += G * rc.time.fwd_us;
      c.ring_bwd_us += G * rc.time.bwd_us;
      c.exchange_fwd_us += exposed_way_us(u > 1 ? fwd_out : 0, G, rc.time.fwd_us, a2a_link) +
                           exposed_way_us(u > 1 ? x.forward_bytes - fwd_out : 0, G, rc.time.fwd_us, a2a_link);
      c.exchange_bwd_us += exposed_way_us(u > 1 ? bwd_out : 0, G, rc.time.bwd_us, a2a_link) +
                           exposed_way_us(u > 1 ? x.backward_bytes - bwd_out : 0, G, rc.time.bwd_us, a2a_link);
      if (u == 1) c.ideal_fwd_us += rc.time.ideal_fwd_us, c.ideal_bwd_us += rc.time.ideal_bwd_us;
    }
    choice.candidates.push_back(c);
  }
  // Every candidate is judged against the same ideal: u = 1's whole call on H/tp heads, over cp.
  const A2aCandidate& ring_only = choice.candidates.front();
  size_t best = 0;
  for (size_t i = 0; i < choice.candidates.size(); ++i) {
    A2aCandidate& c = choice.candidates[i];
    c.ideal_fwd_us = ring_only.ideal_fwd_us, c.ideal_bwd_us = ring_only.ideal_bwd_us;
    if (c.admissible && c.total_us() < choice.candidates[best].total_us() * (1 - 1e-12)) best = i;
  }
  choice.pick = choice.candidates[best].u;
  int admissible = 0;
  for (const A2aCandidate& c : choice.candidates) admissible += c.admissible && c.u > 1;
  if (cp == 1)
    choice.why = "cp = 1: no context parallelism to split";
  else if (admissible == 0)
    choice.why = "no u > 1 is admissible (tp x u must divide n_head = " + std::to_string(shape.heads) +
                 "), so the ring alone";
  else
    choice.why = "u = " + std::to_string(choice.pick) + " has the least predicted fwd + bwd time";
  return choice;
}

}  // namespace rt
