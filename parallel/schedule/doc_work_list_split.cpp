// The forward work list's split rule and its application (parallel/schedule/doc_work_list_split.h).
#include "parallel/schedule/doc_work_list_split.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <queue>
#include <string>

#include "parallel/schedule/ring_time_model.h"

namespace rt {

DocWorkListSplit doc_work_list_split_for(int64_t heads, int64_t head_dim, int64_t ctas, int64_t head_window) {
  const KernelTimeModel m = gather_kernel_time_model(false, head_dim);
  DocWorkListSplit s;
  s.on = true;
  s.heads = heads;
  s.ctas = ctas;
  s.head_window = head_window;
  s.task_tiles = m.full_us > 0 ? m.query_tile_us / m.full_us : s.task_tiles;
  return s;
}

DocWorkListSplit doc_work_list_split_from_env(int64_t heads, int64_t head_dim, int64_t ctas, int64_t head_window) {
  const char* e = std::getenv("RT_ATTN_WORK_LIST_SPLIT");
  const std::string v = e ? e : "";
  RT_CHECK(v.empty() || v == "0" || v == "1",
           "RT_ATTN_WORK_LIST_SPLIT=" << v << ": 0 (or unset) builds unsplit work lists, 1 splits by the rule");
  if (v != "1") return DocWorkListSplit{};
  return doc_work_list_split_for(heads, head_dim, ctas, head_window);
}

double doc_work_list_unit_cost(int64_t tiles, bool part, const DocWorkListSplit& s) {
  return s.task_tiles + double(tiles) + (part ? s.part_tiles : 0.0);
}

double doc_work_list_makespan(const std::vector<double>& costs, int64_t heads, int64_t head_window, int64_t ctas) {
  RT_CHECK(heads >= 1 && head_window >= 1 && ctas >= 1,
           "doc_work_list_makespan: heads = " << heads << ", head_window = " << head_window << ", ctas = " << ctas
                                              << " must be positive");
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;  // (<= ctas) slots' free times
  double end = 0;
  for (int64_t h0 = 0; h0 < heads; h0 += head_window) {
    const int64_t width = std::min(head_window, heads - h0);
    for (const double c : costs)
      for (int64_t k = 0; k < width; ++k) {
        double start = 0;
        if (int64_t(free_at.size()) == ctas) {
          start = free_at.top();
          free_at.pop();
        }
        free_at.push(start + c);
        end = std::max(end, start + c);
      }
  }
  return end;
}

namespace {

// The per-unit costs of the list `tiles` cut into `parts`, heaviest first (the order doc_work_list_apply_splits
// gives), and their sum.
std::vector<double> split_costs(const std::vector<int64_t>& tiles, const std::vector<int>& parts,
                                const DocWorkListSplit& s, double& sum) {
  std::vector<double> c;  // (parts summed)
  sum = 0;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const int64_t p = parts[i];
    for (int64_t k = 0; k < p; ++k) {
      const int64_t n = tiles[i] / p + (k < tiles[i] % p ? 1 : 0);
      c.push_back(doc_work_list_unit_cost(n, p > 1, s));
      sum += c.back();
    }
  }
  std::sort(c.begin(), c.end(), std::greater<double>());
  return c;
}

// The most parts a task of n tiles may take.
int64_t max_parts_of(int64_t n, const DocWorkListSplit& s) {
  return std::min<int64_t>(std::min<int64_t>(s.max_parts, kAttnWorkMaxParts), n / std::max<int64_t>(1, s.min_part_tiles));
}

}  // namespace

std::vector<int> doc_work_list_split_parts(const std::vector<int64_t>& tiles, const DocWorkListSplit& s) {
  std::vector<int> parts(tiles.size(), 1);  // (tasks)
  if (!s.on || tiles.empty()) return parts;
  RT_CHECK(s.min_part_tiles >= 1 && s.max_parts >= 1 && s.max_slots >= 0 && s.tolerance >= 0,
           "doc_work_list_split_parts: min_part_tiles = " << s.min_part_tiles << ", max_parts = " << s.max_parts
                                                          << ", max_slots = " << s.max_slots << ", tolerance = "
                                                          << s.tolerance << " out of range");
  if (s.force_parts > 0) {
    int64_t slots = 0;
    for (size_t i = 0; i < tiles.size(); ++i) {
      const int64_t p = std::min(s.force_parts, max_parts_of(tiles[i], s));
      if (p < 2 || slots + p > s.max_slots) continue;
      parts[i] = int(p);
      slots += p;
    }
    return parts;
  }
  double sum = 0;
  std::vector<double> costs = split_costs(tiles, parts, s, sum);
  std::vector<int> best = parts;
  double best_span = doc_work_list_makespan(costs, s.heads, s.head_window, s.ctas);
  if (best_span <= (1 + s.tolerance) * sum * double(s.heads) / double(s.ctas)) return best;
  const double floor_cost = doc_work_list_unit_cost(s.min_part_tiles, true, s);  // no part costs less
  for (double theta = costs.front() * 0.85; theta >= floor_cost; theta *= 0.85) {
    int64_t slots = 0;
    for (size_t i = 0; i < tiles.size(); ++i) {
      parts[i] = 1;
      if (doc_work_list_unit_cost(tiles[i], false, s) <= theta) continue;
      const double room = theta - s.task_tiles - s.part_tiles;  // key tiles a part may hold
      const int64_t want = int64_t(std::ceil(double(tiles[i]) / room));
      const int64_t p = std::min(want, max_parts_of(tiles[i], s));
      if (p < 2) continue;
      parts[i] = int(p);
      slots += p;
    }
    if (slots > s.max_slots) break;  // lower thresholds split more
    costs = split_costs(tiles, parts, s, sum);
    const double span = doc_work_list_makespan(costs, s.heads, s.head_window, s.ctas);
    if (span < best_span) best = parts, best_span = span;
    if (span <= (1 + s.tolerance) * sum * double(s.heads) / double(s.ctas)) break;
  }
  return best;
}

AttnWorkList doc_work_list_apply_splits(const AttnWorkList& list, const std::vector<int>& parts,
                                        const DocWorkListSplit& s) {
  const char* op = "doc_work_list_apply_splits";
  RT_CHECK(parts.size() == list.tasks.size() && list.rows.size() == list.tasks.size() * size_t(kAttnWorkRowGroups),
           op << ": " << parts.size() << " part counts and " << list.rows.size() << " row bounds for "
              << list.tasks.size() << " tasks (one count and 8 row bounds per task)");
  struct Part {
    AttnWorkTask task;
    std::vector<AttnKeySeg> segs;
    int64_t tiles;
    size_t from;  // the unsplit task's index (its row bounds)
    double cost;
  };
  std::vector<Part> out;
  std::vector<std::pair<int32_t, int8_t>> seq;  // (the task's key tiles) tile index, source
  for (size_t i = 0; i < list.tasks.size(); ++i) {
    const AttnWorkTask& t = list.tasks[i];
    RT_CHECK(t.parts == 1 && t.part == 0 && t.merge_slot == -1,
             op << ": task " << i << " is already part " << int(t.part) << " of " << int(t.parts));
    seq.clear();
    for (int k = t.first_seg; k < t.first_seg + t.segs; ++k) {
      const AttnKeySeg& g = list.segs[size_t(k)];
      for (int32_t x = 0; x < g.tiles; ++x) seq.emplace_back(g.first_tile + x, g.source);
    }
    const int64_t n = int64_t(seq.size()), p = parts[i];
    RT_CHECK(p >= 1 && p <= kAttnWorkMaxParts && p <= n,
             op << ": task " << i << " of " << n << " key tiles cannot be cut into " << p << " parts (1 to "
                << kAttnWorkMaxParts << ", at most one per tile)");
    int64_t at = 0;
    for (int64_t k = 0; k < p; ++k) {
      const int64_t len = n / p + (k < n % p ? 1 : 0);
      Part part{t, {}, len, i, doc_work_list_unit_cost(len, p > 1, s)};
      part.task.part = int8_t(p > 1 ? k : 0);
      part.task.parts = int8_t(p);
      for (int64_t x = at; x < at + len; ++x) {
        AttnKeySeg* prev = part.segs.empty() ? nullptr : &part.segs.back();
        if (prev && prev->first_tile + prev->tiles == seq[size_t(x)].first && prev->source == seq[size_t(x)].second &&
            prev->tiles < INT16_MAX)
          ++prev->tiles;
        else
          part.segs.push_back(AttnKeySeg{seq[size_t(x)].first, 1, seq[size_t(x)].second, 0});
      }
      at += len;
      out.push_back(std::move(part));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Part& a, const Part& b) {
    if (a.cost != b.cost) return a.cost > b.cost;
    if (a.task.sample != b.task.sample) return a.task.sample < b.task.sample;
    if (a.task.q_row != b.task.q_row) return a.task.q_row < b.task.q_row;
    return a.task.part < b.task.part;
  });
  AttnWorkList res;
  res.keys = list.keys;
  std::vector<int32_t> first_slot(list.tasks.size(), -1);  // (unsplit tasks) s0 of each split tile
  for (Part& part : out) {
    if (part.task.parts > 1) {
      int32_t& s0 = first_slot[part.from];
      if (s0 < 0) {
        RT_CHECK(res.merge_slots <= INT16_MAX - part.task.parts,
                 op << ": more than " << INT16_MAX << " merge slots (the task's i16 field)");
        s0 = res.merge_slots;
        res.merge_slots += part.task.parts;
      }
      part.task.merge_slot = int16_t(s0 + part.task.part);
    }
    RT_CHECK(part.segs.size() <= size_t(INT16_MAX) && res.segs.size() + part.segs.size() <= size_t(INT32_MAX),
             op << ": a part of " << part.segs.size() << " segments exceeds the list's i16 count");
    part.task.first_seg = int32_t(res.segs.size());
    part.task.segs = int16_t(part.segs.size());
    res.tasks.push_back(part.task);
    res.segs.insert(res.segs.end(), part.segs.begin(), part.segs.end());
    const auto rows = list.rows.begin() + std::ptrdiff_t(part.from * size_t(kAttnWorkRowGroups));
    res.rows.insert(res.rows.end(), rows, rows + kAttnWorkRowGroups);
  }
  return res;
}

AttnWorkList doc_work_list_own_first(const AttnWorkList& list, const DocWorkListSplit& s) {
  const char* op = "doc_work_list_own_first";
  RT_CHECK(list.rows.size() == list.tasks.size() * size_t(kAttnWorkRowGroups),
           op << ": " << list.rows.size() << " row bounds for " << list.tasks.size() << " tasks (8 per task)");
  struct Unit {
    AttnWorkTask task;
    std::vector<AttnKeySeg> segs;
    size_t from;  // the unsplit task's index (its row bounds)
    double cost;
    int phase;    // 0: own work, 1: gathered work
  };
  std::vector<Unit> units;
  for (size_t i = 0; i < list.tasks.size(); ++i) {
    const AttnWorkTask& t = list.tasks[i];
    RT_CHECK(t.parts == 1 && t.part == 0 && t.merge_slot == -1,
             op << ": task " << i << " is already part " << int(t.part) << " of " << int(t.parts)
                << "; pass doc_work_list's unsplit list");
    Unit own{t, {}, i, 0, 0}, got{t, {}, i, 0, 1};
    int64_t own_tiles = 0, got_tiles = 0;
    for (int k = t.first_seg; k < t.first_seg + t.segs; ++k) {
      const AttnKeySeg& g = list.segs[size_t(k)];
      if (g.source < 0) {
        RT_CHECK(got.segs.empty(), op << ": task " << i << " lists an own segment after a gathered one");
        own.segs.push_back(g);
        own_tiles += g.tiles;
      } else {
        got.segs.push_back(g);
        got_tiles += g.tiles;
      }
    }
    const bool cut = own_tiles > 0 && got_tiles > 0;
    if (cut) {
      own.task.part = 0, got.task.part = 1;
      own.task.parts = got.task.parts = 2;
    }
    if (own_tiles > 0) {
      own.cost = doc_work_list_unit_cost(own_tiles, cut, s);
      units.push_back(std::move(own));
    }
    if (got_tiles > 0) {
      got.cost = doc_work_list_unit_cost(got_tiles, cut, s);
      units.push_back(std::move(got));
    }
  }
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
    if (a.phase != b.phase) return a.phase < b.phase;
    if (a.cost != b.cost) return a.cost > b.cost;
    if (a.task.sample != b.task.sample) return a.task.sample < b.task.sample;
    return a.task.q_row < b.task.q_row;
  });
  AttnWorkList res;
  res.keys = list.keys;
  std::vector<int32_t> first_slot(list.tasks.size(), -1);  // (unsplit tasks) s0 of each cut tile
  for (Unit& u : units) {
    if (u.task.parts > 1) {
      int32_t& s0 = first_slot[u.from];
      if (s0 < 0) {
        RT_CHECK(res.merge_slots <= INT16_MAX - 2, op << ": more than " << INT16_MAX << " merge slots (the i16 field)");
        s0 = res.merge_slots;
        res.merge_slots += 2;
      }
      u.task.merge_slot = int16_t(s0 + u.task.part);
    }
    RT_CHECK(res.segs.size() + u.segs.size() <= size_t(INT32_MAX), op << ": too many segments for the i32 offsets");
    u.task.first_seg = int32_t(res.segs.size());
    u.task.segs = int16_t(u.segs.size());
    res.tasks.push_back(u.task);
    res.segs.insert(res.segs.end(), u.segs.begin(), u.segs.end());
    const auto rows = list.rows.begin() + std::ptrdiff_t(u.from * size_t(kAttnWorkRowGroups));
    res.rows.insert(res.rows.end(), rows, rows + kAttnWorkRowGroups);
  }
  return res;
}

DocWorkListPhases doc_work_list_phases(const AttnWorkList& list) {
  DocWorkListPhases ph;
  ph.first_gathered = list.tasks.size();
  for (size_t i = 0; i < list.tasks.size(); ++i) {
    const AttnWorkTask& t = list.tasks[i];
    bool own = false, got = false;
    for (int k = t.first_seg; k < t.first_seg + t.segs; ++k) (list.segs[size_t(k)].source < 0 ? own : got) = true;
    if (got && ph.first_gathered == list.tasks.size()) ph.first_gathered = i;
    if (own && ph.first_gathered < list.tasks.size()) ph.own_first = false;
  }
  return ph;
}

}  // namespace rt
