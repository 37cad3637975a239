// The ZeRO-3 weight all-gather in E4M3: the plan of a unit, the amaxes, the encode and the decode
// (framework/model/zero_fp8_gather.h).
#include "framework/model/zero_fp8_gather.h"

#include <algorithm>

#include "kernels/ops.h"

namespace rt {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::vector<std::pair<int, Fp8GatherPlan::Span>> Fp8GatherPlan::group_pieces(int rank) const {
  std::vector<std::pair<int, Span>> out;
  const int64_t lo = per * rank, hi = lo + per;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t b = std::max(groups[g].begin, lo), e = std::min(groups[g].end, hi);
    if (b < e) out.push_back({int(g), {b, e}});
  }
  return out;
}

Fp8GatherPlan make_fp8_gather_plan(const std::vector<const ParamEntry*>& params, const ParamUnit& unit, int shards) {
  RT_CHECK(shards >= 1 && unit.numel % (64 * int64_t(shards)) == 0,
           "fp8 gather: unit " << unit.name << " has " << unit.numel << " elements, not a multiple of 64 x " << shards
                               << " shards (build_param_layout pads units so)");
  std::vector<const ParamEntry*> sorted = params;
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  Fp8GatherPlan p;
  p.numel = unit.numel, p.shards = shards, p.per = unit.numel / shards;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const ParamEntry& e = *sorted[i];
    const int64_t begin = e.offset - unit.offset;
    const int64_t end = (i + 1 < sorted.size() ? sorted[i + 1]->offset : unit.offset + unit.numel) - unit.offset;
    RT_CHECK(begin % 64 == 0 || (i > 0 && ends_with(sorted[i - 1]->name, ".mlp.w1.weight")),
             "fp8 gather: parameter " << e.name << " does not start 64-element aligned in its unit");
    const bool joins_previous = i > 0 && ends_with(sorted[i - 1]->name, ".mlp.w1.weight");  // [w1; w3]: one operand
    if (e.local_shape.size() == 2) {
      if (joins_previous) p.groups.back().end = end;
      else p.groups.push_back({begin, end});
    } else {
      RT_CHECK(!joins_previous, "fp8 gather: " << e.name << " follows mlp.w1 but is not its w3 (2-D)");
      p.plain.push_back({begin, begin + e.numel});  // the parameter only: its gap and the unit's padding stay unsent
    }
  }
  for (const Fp8GatherPlan::Span& g : p.groups)
    RT_CHECK(g.begin % 64 == 0 && g.end % 64 == 0, "fp8 gather: a weight matrix of unit " << unit.name
                                                      << " does not span whole 64-element runs");
  p.plain_of_rank.resize(size_t(shards));
  for (int r = 0; r < shards; ++r) {
    const int64_t lo = p.per * r, hi = lo + p.per;
    int64_t at = 0;
    for (const Fp8GatherPlan::Span& s : p.plain) {
      const int64_t b = std::max(s.begin, lo), e = std::min(s.end, hi);
      if (b >= e) continue;
      p.plain_of_rank[size_t(r)].push_back({b, e, at});
      at += e - b;
    }
    p.plain_cap = std::max(p.plain_cap, at);
  }
  return p;
}

Tensor fp8_gather_rows(const Tensor& flat) {
  const int64_t n = flat.numel();
  RT_CHECK(n % 64 == 0, "fp8 gather: a span of " << n << " elements is not a multiple of 64");
  const int64_t k = n % 128 == 0 ? 128 : 64;
  return flat.view({n / k, k});
}

ZeroFp8Gather::ZeroFp8Gather(const ParamLayout& layout, const std::vector<bool>& covered, int shards, int shard_rank,
                             DType act, Comm& dp_cp, Comm* tp, Arena& arena)
    : covered_(covered), shards_(shards), rank_(shard_rank), dp_cp_(&dp_cp), tp_(tp && tp->size() > 1 ? tp : nullptr) {
  const int units = int(layout.units.size());
  RT_CHECK(int(covered_.size()) == units, "fp8 gather: " << covered_.size() << " coverage flags for " << units
                                                         << " units");
  RT_CHECK(dp_cp.size() == shards, "fp8 gather: " << shards << " shards but a dp x cp group of " << dp_cp.size());
  plans_.resize(size_t(units));
  for (const ParamUnit& pu : layout.units) local_begin_.push_back(pu.offset / shards);  // Model::owned's local_begin
  int64_t codes = 0, plain = 0;
  for (int u = 0; u < units; ++u) {
    if (!covered_[size_t(u)]) continue;
    std::vector<const ParamEntry*> params;
    for (const ParamEntry& e : layout.table)
      if (e.unit == u) params.push_back(&e);
    plans_[size_t(u)] = make_fp8_gather_plan(params, layout.units[size_t(u)], shards);
    const Fp8GatherPlan& p = plans_[size_t(u)];
    groups_max_ = std::max(groups_max_, int(p.groups.size()));
    codes = std::max(codes, p.numel);
    plain = std::max(plain, p.plain_cap);
  }
  if (codes == 0) return;  // nothing covered (every block in bf16)
  for (int b = 0; b < 2; ++b) {
    codes_[b] = arena.alloc(DType::e4m3, {codes}, "zero 3: fp8 gather codes (x2)");  // (largest unit) e4m3
    if (plain > 0)
      plain_[b] = arena.alloc(act, {shards * plain}, "zero 3: fp8 gather 1-D parameters (x2)");  // (shards * cap)
  }
  const int64_t n = int64_t(units) * groups_max_;
  amax_ = arena.alloc(DType::f32, {n}, "zero 3: fp8 gather amaxes");  // (units * groups) f32
  const int64_t group = std::max<int64_t>(shards, tp_ ? tp_->size() : 1);
  gathered_ = arena.alloc(DType::f32, {group * n}, "zero 3: fp8 gather amaxes gathered");  // (group * n) f32
  factor_ = arena.alloc(DType::f32, {1}, "zero 3: fp8 gather factor");                       // (1) f32
}

Tensor ZeroFp8Gather::amax_of(int unit, int group) const {
  const int64_t i = int64_t(unit) * groups_max_ + group;
  return amax_.slice(i, i + 1);
}

double ZeroFp8Gather::take_amaxes(const Tensor& local) {
  if (!amax_.defined()) return 0;
  fill(amax_, 0.f);  // a group this rank holds no part of contributes 0
  for (int u = 0; u < int(plans_.size()); ++u) {
    if (!covers(u)) continue;
    const Fp8GatherPlan& p = plans_[size_t(u)];
    const Tensor shard = local.slice(local_begin_[size_t(u)], local_begin_[size_t(u)] + p.per);  // (per) act
    for (const auto& [g, s] : p.group_pieces(rank_))
      fp8_amax(amax_of(u, g), Tensor{}, fp8_gather_rows(shard.slice(s.begin - p.per * rank_, s.end - p.per * rank_)),
               Fp8Scaling::tensor);
  }
  double bytes = 0;
  const int64_t n = amax_.numel();
  for (Comm* comm : {dp_cp_, tp_}) {
    if (!comm || comm->size() == 1) continue;
    const Tensor all = gathered_.slice(0, comm->size() * n);  // (size, n) f32
    comm->wait(comm->all_gather_start(amax_, all));
    fp8_amax(Tensor{}, amax_, all.view({int64_t(comm->size()), n}), Fp8Scaling::row);  // max over ranks, NaN kept
    bytes += double(all.nbytes());
  }
  return bytes;
}

ZeroFp8Gather::Exchange ZeroFp8Gather::encode(int unit, int buffer, const Tensor& shard) {
  RT_CHECK(covers(unit) && (buffer == 0 || buffer == 1), "fp8 gather: unit " << unit << " (buffer " << buffer
                                                                              << ") is not gathered in E4M3");
  const Fp8GatherPlan& p = plans_[size_t(unit)];
  RT_CHECK(shard.numel() == p.per, "fp8 gather: a shard of " << shard.numel() << " elements for a unit of " << p.per
                                                             << " per shard");
  const int64_t own = p.per * rank_;  // this rank's first element of the unit
  Fp8Operand q;                       // tensor scaling: one factor per piece (= its group's)
  q.scale = factor_;
  for (const auto& [g, s] : p.group_pieces(rank_)) {
    q.data = fp8_gather_rows(codes_[buffer].slice(s.begin, s.end));
    fp8_quantize(q, Fp8Operand{}, fp8_gather_rows(shard.slice(s.begin - own, s.end - own)), amax_of(unit, g), Tensor{});
  }
  Exchange x;
  x.codes_send = codes_[buffer].slice(own, own + p.per);
  x.codes_recv = codes_[buffer].slice(0, p.numel);
  if (p.plain_cap > 0) {
    const int64_t cap = p.plain_cap, row = cap * rank_;
    for (const Fp8GatherPlan::Piece& c : p.plain_of_rank[size_t(rank_)])
      copy_cast(plain_[buffer].slice(row + c.at, row + c.at + (c.end - c.begin)), shard.slice(c.begin - own, c.end - own));
    x.plain_send = plain_[buffer].slice(row, row + cap);
    x.plain_recv = plain_[buffer].slice(0, cap * shards_);
  }
  return x;
}

void ZeroFp8Gather::decode(int unit, int buffer, Tensor out) {
  RT_CHECK(covers(unit) && (buffer == 0 || buffer == 1), "fp8 gather: unit " << unit << " (buffer " << buffer
                                                                              << ") is not gathered in E4M3");
  const Fp8GatherPlan& p = plans_[size_t(unit)];
  RT_CHECK(out.numel() == p.numel, "fp8 gather: a slot of " << out.numel() << " elements for a unit of " << p.numel);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const Fp8GatherPlan::Span& s = p.groups[g];
    fp8_dequantize(fp8_gather_rows(out.slice(s.begin, s.end)), fp8_gather_rows(codes_[buffer].slice(s.begin, s.end)),
                   amax_of(unit, int(g)));
  }
  for (int r = 0; r < shards_; ++r)
    for (const Fp8GatherPlan::Piece& c : p.plain_of_rank[size_t(r)]) {
      const int64_t from = p.plain_cap * r + c.at;
      copy_cast(out.slice(c.begin, c.end), plain_[buffer].slice(from, from + (c.end - c.begin)));
    }
}

}  // namespace rt
