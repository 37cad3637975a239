// doc_work_list, doc_bwd_work_list (the mirror) and their checkers (parallel/schedule/doc_work_list.h).
#include "parallel/schedule/doc_work_list.h"

#include <algorithm>
#include <sstream>

namespace rt {
namespace {

constexpr int64_t kTile = kAttnWorkTileRows;

// The call's key tiles: own tiles [0, own_tiles) hold list rows [128 t, min(128 t + 128, Nk)); gathered tiles
// [own_tiles, list_tiles) rows [128 t, min(128 t + 128, list_rows)) (attn_second_kv_row(Nk) = 128 own_tiles, so no
// tile holds rows of both sources and none holds only gap rows).
struct KeyTiling {
  int64_t Nk, list_rows, own_tiles, list_tiles;
  int64_t row_begin(int64_t t) const { return t * kTile; }
  int64_t row_end(int64_t t) const { return std::min(t * kTile + kTile, t < own_tiles ? Nk : list_rows); }
  int8_t source(int64_t t) const { return t < own_tiles ? int8_t(-1) : int8_t(0); }
};

int64_t q_stride_of(const DocWorkListInputs& in) { return in.q_stride > 0 ? in.q_stride : in.Nq; }
int64_t k_stride_of(const DocWorkListInputs& in) { return in.k_stride > 0 ? in.k_stride : in.list_rows; }

KeyTiling check_inputs(const DocWorkListInputs& in, const char* op) {
  RT_CHECK(in.B >= 0 && in.Nq >= 0 && in.Nk >= 0, op << ": B=" << in.B << ", Nq=" << in.Nq << ", Nk=" << in.Nk
                                                     << " must not be negative");
  const int64_t s2 = attn_second_kv_row(in.Nk);
  RT_CHECK(in.list_rows == in.Nk || in.list_rows >= s2,
           op << ": list_rows = " << in.list_rows << " must be Nk = " << in.Nk << " (one source) or at least "
              << "attn_second_kv_row(Nk) = " << s2 << " (own rows, the gap, then the gathered rows)");
  const int64_t qs = q_stride_of(in), ks = k_stride_of(in);
  RT_CHECK(qs >= in.Nq && ks >= in.list_rows,
           op << ": strides (" << qs << ", " << ks << ") are shorter than Nq = " << in.Nq << " / list_rows = "
              << in.list_rows);
  RT_CHECK(int64_t(in.q_pos.size()) >= in.B * qs && int64_t(in.q_doc_start.size()) >= in.B * qs &&
               int64_t(in.k_pos.size()) >= in.B * ks,
           op << ": q_pos (" << in.q_pos.size() << "), q_doc_start (" << in.q_doc_start.size() << ") and k_pos ("
              << in.k_pos.size() << ") must hold (B, q_stride) = " << in.B * qs << " and (B, k_stride) = "
              << in.B * ks << " positions");
  RT_CHECK(in.B <= 32767 && in.Nq <= INT32_MAX && in.list_rows / kTile <= INT32_MAX,
           op << ": B=" << in.B << ", Nq=" << in.Nq << ", list_rows=" << in.list_rows
              << " exceed the list's i16 sample and i32 row / tile fields");
  const int64_t own_tiles = s2 / kTile;
  const int64_t list_tiles = in.list_rows == in.Nk ? own_tiles : (in.list_rows + kTile - 1) / kTile;
  return {in.Nk, in.list_rows, own_tiles, list_tiles};
}

// A run of rows of one query tile in one document: the keys they see are the positions [lo, hi] (then merged: the
// disjoint intervals of positions some row of the tile sees).
struct DocRun {
  int64_t lo, hi;
};

}  // namespace

AttnWorkList doc_work_list(const DocWorkListInputs& in) {
  const char* op = "doc_work_list";
  const KeyTiling kt = check_inputs(in, op);
  const int64_t qs = q_stride_of(in), ks = k_stride_of(in);
  const int64_t q_tiles = (in.Nq + kTile - 1) / kTile;

  struct Built {
    AttnWorkTask task;
    std::vector<AttnKeySeg> segs;
    int64_t tiles;
  };
  std::vector<Built> built;
  std::vector<int64_t> sorted;        // (list_rows) sample b's key positions, sorted within each key tile
  std::vector<int64_t> kmin, kmax;    // (list_tiles) each key tile's smallest and largest position
  std::vector<DocRun> runs;           // (<= 128) the query tile's runs
  for (int64_t b = 0; b < in.B; ++b) {
    const int64_t* kp = in.k_pos.data() + b * ks;  // (list_rows)
    sorted.assign(kp, kp + in.list_rows);
    kmin.assign(size_t(kt.list_tiles), INT64_MAX);
    kmax.assign(size_t(kt.list_tiles), INT64_MIN);
    for (int64_t t = 0; t < kt.list_tiles; ++t) {
      auto first = sorted.begin() + kt.row_begin(t), last = sorted.begin() + kt.row_end(t);
      std::sort(first, last);
      kmin[size_t(t)] = *first;
      kmax[size_t(t)] = *(last - 1);
    }
    const int64_t* qp = in.q_pos.data() + b * qs;        // (Nq)
    const int64_t* qd = in.q_doc_start.data() + b * qs;  // (Nq)
    for (int64_t qt = 0; qt < q_tiles; ++qt) {
      const int64_t i0 = qt * kTile, i1 = std::min(in.Nq, i0 + kTile);
      runs.clear();
      for (int64_t i = i0; i < i1;) {
        const int64_t lo = qd[i];
        int64_t hi = INT64_MIN;
        for (; i < i1 && qd[i] == lo; ++i) hi = std::max(hi, qp[i]);
        if (hi >= lo) runs.push_back({lo, hi});  // else no row of the run sees anything
      }
      // The positions the tile's rows see: the union of its runs, as disjoint intervals in increasing order.
      std::sort(runs.begin(), runs.end(), [](const DocRun& a, const DocRun& b) { return a.lo < b.lo; });
      size_t kept = 0;
      for (size_t k = 0; k < runs.size(); ++k) {
        if (kept > 0 && runs[k].lo <= runs[kept - 1].hi) runs[kept - 1].hi = std::max(runs[kept - 1].hi, runs[k].hi);
        else runs[kept++] = runs[k];
      }
      runs.resize(kept);
      Built task{AttnWorkTask{int32_t(i0), int16_t(b), 0, 1, 0, 0, -1}, {}, 0};
      for (int64_t t = 0; t < kt.list_tiles && !runs.empty(); ++t) {
        const int64_t mn = kmin[size_t(t)], mx = kmax[size_t(t)];
        const auto first = sorted.begin() + kt.row_begin(t), last = sorted.begin() + kt.row_end(t);
        // The intervals that overlap [mn, mx]: from the first whose end reaches mn, while they start by mx.
        auto r = std::lower_bound(runs.begin(), runs.end(), mn, [](const DocRun& a, int64_t v) { return a.hi < v; });
        bool meets = false;
        for (; r != runs.end() && r->lo <= mx && !meets; ++r) {
          const auto it = std::lower_bound(first, last, r->lo);
          meets = it != last && *it <= r->hi;
        }
        if (!meets) continue;
        ++task.tiles;
        AttnKeySeg* prev = task.segs.empty() ? nullptr : &task.segs.back();
        if (prev && prev->first_tile + prev->tiles == t && prev->source == kt.source(t) && prev->tiles < INT16_MAX)
          ++prev->tiles;
        else
          task.segs.push_back(AttnKeySeg{int32_t(t), 1, kt.source(t), 0});
      }
      if (task.tiles > 0) built.push_back(std::move(task));
    }
  }
  std::stable_sort(built.begin(), built.end(), [](const Built& a, const Built& b) {
    if (a.tiles != b.tiles) return a.tiles > b.tiles;
    if (a.task.sample != b.task.sample) return a.task.sample < b.task.sample;
    return a.task.q_row < b.task.q_row;
  });
  AttnWorkList list;
  list.tasks.reserve(built.size());
  for (Built& t : built) {
    RT_CHECK(t.segs.size() <= size_t(INT16_MAX) && list.segs.size() + t.segs.size() <= size_t(INT32_MAX),
             op << ": sample " << t.task.sample << "'s query tile at row " << t.task.q_row << " has " << t.segs.size()
                << " segments, more than the list's i16 count holds");
    t.task.first_seg = int32_t(list.segs.size());
    t.task.segs = int16_t(t.segs.size());
    list.tasks.push_back(t.task);
    list.segs.insert(list.segs.end(), t.segs.begin(), t.segs.end());
  }
  doc_work_list_bounds(list, in);
  return list;
}

AttnWorkList doc_work_list(const DocWorkListInputs& in, const DocWorkListSplit& split) {
  AttnWorkList list = doc_work_list(in);
  if (!split.on) return list;
  std::vector<int64_t> tiles(list.tasks.size());  // (tasks) key tiles of each, heaviest first
  for (size_t i = 0; i < tiles.size(); ++i)
    for (int k = list.tasks[i].first_seg; k < list.tasks[i].first_seg + list.tasks[i].segs; ++k)
      tiles[i] += list.segs[size_t(k)].tiles;
  const std::vector<int> parts = doc_work_list_split_parts(tiles, split);
  if (std::all_of(parts.begin(), parts.end(), [](int p) { return p == 1; })) return list;
  return doc_work_list_apply_splits(list, parts, split);
}

AttnWorkList doc_work_list_ordered(const DocWorkListInputs& in, DocWorkListOrder order, const DocWorkListSplit& costs) {
  AttnWorkList list = doc_work_list(in);
  if (order == DocWorkListOrder::heaviest_first) return list;
  return doc_work_list_own_first(list, costs);
}

void doc_work_list_bounds(AttnWorkList& list, const DocWorkListInputs& in) {
  const char* op = "doc_work_list_bounds";
  const KeyTiling kt = check_inputs(in, op);
  const int64_t qs = q_stride_of(in), ks = k_stride_of(in);
  list.keys.assign(size_t(in.B * kt.list_tiles), AttnKeyRange{INT64_MAX, INT64_MIN});  // (B, list_tiles)
  for (int64_t b = 0; b < in.B; ++b)
    for (int64_t t = 0; t < kt.list_tiles; ++t) {
      AttnKeyRange& r = list.keys[size_t(b * kt.list_tiles + t)];
      for (int64_t j = t * kTile; j < t * kTile + kTile; ++j) {
        const int64_t kp = in.k_pos[size_t(b * ks + std::min(j, in.list_rows - 1))];
        r.lo = std::min(r.lo, kp);
        r.hi = std::max(r.hi, kp);
      }
    }
  list.rows.assign(list.tasks.size() * size_t(kAttnWorkRowGroups), AttnRowBounds{INT64_MAX, INT64_MIN});
  for (size_t n = 0; n < list.tasks.size(); ++n) {
    const AttnWorkTask& task = list.tasks[n];
    RT_CHECK(task.sample >= 0 && task.sample < in.B && task.q_row >= 0 && task.q_row < in.Nq,
             op << ": task " << n << " (sample " << task.sample << ", q_row " << task.q_row << ") is outside B="
                << in.B << ", Nq=" << in.Nq);
    for (int64_t g = 0; g < kAttnWorkRowGroups; ++g) {
      AttnRowBounds& r = list.rows[n * size_t(kAttnWorkRowGroups) + size_t(g)];
      for (int64_t i = 0; i < kAttnWorkRowGroupRows; ++i) {
        const int64_t row = task.sample * qs + std::min(task.q_row + g * kAttnWorkRowGroupRows + i, in.Nq - 1);
        r.pos_lo = std::min(r.pos_lo, in.q_pos[size_t(row)]);
        r.doc_hi = std::max(r.doc_hi, in.q_doc_start[size_t(row)]);
      }
    }
  }
}

std::string doc_work_list_problem(const AttnWorkList& list, const DocWorkListInputs& in) {
  const KeyTiling kt = check_inputs(in, "doc_work_list_problem");
  const int64_t qs = q_stride_of(in), ks = k_stride_of(in);
  const int64_t q_tiles = (in.Nq + kTile - 1) / kTile;
  std::ostringstream os;
  // listed[(b q_tiles + qt) list_tiles + t]: how often key tile t is listed for query tile qt of sample b.
  std::vector<uint8_t> listed(size_t(in.B * q_tiles * kt.list_tiles), 0);
  struct TileParts {          // one query tile's tasks: how many parts, which seen, the first slot, each part's tiles
    int parts = 0;
    int64_t first = -1;  // the first task naming the tile
    unsigned seen = 0;
    int32_t s0 = -1;
    int64_t lo[kAttnWorkMaxParts], hi[kAttnWorkMaxParts];  // the part's first tile and its last tile + 1
  };
  std::vector<TileParts> parts_of(size_t(in.B * q_tiles));  // (B, q_tiles)
  std::vector<uint8_t> slot_used(size_t(std::max<int32_t>(0, list.merge_slots)), 0);  // (merge_slots)
  for (size_t n = 0; n < list.tasks.size(); ++n) {
    const AttnWorkTask& task = list.tasks[n];
    if (task.sample < 0 || task.sample >= in.B || task.q_row < 0 || task.q_row >= in.Nq || task.q_row % kTile != 0) {
      os << "task " << n << " (sample " << task.sample << ", q_row " << task.q_row << ") is not a 128-row query "
         << "tile of B=" << in.B << ", Nq=" << in.Nq;
      return os.str();
    }
    const bool split = task.parts > 1;
    if (task.parts < 1 || task.parts > kAttnWorkMaxParts || task.part < 0 || task.part >= task.parts ||
        (!split && task.merge_slot != -1) ||
        (split && (task.merge_slot < task.part || task.merge_slot >= list.merge_slots))) {
      os << "task " << n << " is part " << int(task.part) << " of " << int(task.parts) << " with merge slot "
         << task.merge_slot << ": parts is 1 to " << kAttnWorkMaxParts << ", part below it, the slot -1 when "
         << "unsplit, else in [part, merge_slots = " << list.merge_slots << ")";
      return os.str();
    }
    const size_t tile = size_t(task.sample * q_tiles + task.q_row / kTile);
    TileParts& tp = parts_of[tile];
    const int32_t s0 = split ? task.merge_slot - task.part : -1;
    if (tp.parts == 0) {
      tp.parts = task.parts;
      tp.s0 = s0;
      tp.first = int64_t(n);
    } else if (tp.parts != task.parts || ((tp.seen >> task.part) & 1u) || tp.s0 != s0) {
      os << "tasks " << tp.first << " and " << n << " both hold sample " << task.sample << "'s query tile at row "
         << task.q_row << " and are not its parts: task " << n << " is part " << int(task.part) << " of "
         << int(task.parts) << " (first slot " << s0 << "), the tile has " << tp.parts << " parts (first slot "
         << tp.s0 << ")";
      return os.str();
    }
    tp.seen |= 1u << task.part;
    if (split && slot_used[size_t(task.merge_slot)]++) {
      os << "task " << n << "'s merge slot " << task.merge_slot << " is another part's too";
      return os.str();
    }
    if (task.segs < 1 || task.first_seg < 0 || int64_t(task.first_seg) + task.segs > int64_t(list.segs.size())) {
      os << "task " << n << " names segments [" << task.first_seg << ", " << task.first_seg + task.segs << ") of "
         << list.segs.size();
      return os.str();
    }
    int64_t next = 0;
    for (int s = task.first_seg; s < task.first_seg + task.segs; ++s) {
      const AttnKeySeg& seg = list.segs[size_t(s)];
      const int64_t lo = seg.first_tile, hi = lo + seg.tiles;
      const bool source_ok = seg.source == -1 ? hi <= kt.own_tiles : seg.source == 0 && lo >= kt.own_tiles;
      if (seg.tiles < 1 || lo < next || hi > kt.list_tiles || !source_ok || seg.spare != 0) {
        os << "task " << n << "'s segment " << s << " (tiles [" << lo << ", " << hi << "), source " << int(seg.source)
           << ") is out of range, out of order or of the wrong source: own tiles (-1) are [0, " << kt.own_tiles
           << "), gathered (0) [" << kt.own_tiles << ", " << kt.list_tiles << ")";
        return os.str();
      }
      next = hi;
      for (int64_t t = lo; t < hi; ++t) {
        uint8_t& c = listed[tile * size_t(kt.list_tiles) + size_t(t)];
        c = uint8_t(std::min(2, c + 1));
      }
    }
    tp.lo[task.part] = list.segs[size_t(task.first_seg)].first_tile;
    tp.hi[task.part] = next;
  }
  // Every split tile has all its parts, each part's tiles after the previous part's; the slots are dense.
  for (size_t tile = 0; tile < parts_of.size(); ++tile) {
    const TileParts& tp = parts_of[tile];
    if (tp.parts == 0) continue;
    if (tp.seen != (1u << tp.parts) - 1u) {
      os << "sample " << int64_t(tile) / q_tiles << "'s query tile at row " << int64_t(tile) % q_tiles * kTile
         << " has parts (mask " << tp.seen << ") other than all " << tp.parts;
      return os.str();
    }
    for (int p = 1; p < tp.parts; ++p)
      if (tp.lo[p] < tp.hi[p - 1]) {
        os << "sample " << int64_t(tile) / q_tiles << "'s query tile at row " << int64_t(tile) % q_tiles * kTile
           << ": part " << p << " starts at key tile " << tp.lo[p] << ", before part " << p - 1 << " ends ("
           << tp.hi[p - 1] << ")";
        return os.str();
      }
  }
  for (size_t slot = 0; slot < slot_used.size(); ++slot)
    if (slot_used[slot] != 1) {
      os << "merge slot " << slot << " of " << list.merge_slots << " has no part (the slots are not dense)";
      return os.str();
    }
  // Every (query tile, key tile) pair against the brute-force truth.
  for (int64_t b = 0; b < in.B; ++b) {
    const int64_t* qp = in.q_pos.data() + b * qs;        // (Nq)
    const int64_t* qd = in.q_doc_start.data() + b * qs;  // (Nq)
    const int64_t* kp = in.k_pos.data() + b * ks;        // (list_rows)
    for (int64_t qt = 0; qt < q_tiles; ++qt)
      for (int64_t t = 0; t < kt.list_tiles; ++t) {
        int64_t vi = -1, vj = -1;  // a visible pair, if any
        for (int64_t i = qt * kTile; i < std::min(in.Nq, qt * kTile + kTile) && vi < 0; ++i)
          for (int64_t j = kt.row_begin(t); j < kt.row_end(t); ++j)
            if (qd[i] <= kp[j] && kp[j] <= qp[i]) {
              vi = i, vj = j;
              break;
            }
        const int count = listed[size_t((b * q_tiles + qt) * kt.list_tiles + t)];
        if (vi >= 0 && count == 0) {
          os << "sample " << b << ": query row " << vi << " sees key row " << vj << " (key tile " << t
             << ") but no segment of its query tile covers it";
          return os.str();
        }
        if (vi < 0 && count > 0) {
          os << "sample " << b << ": key tile " << t << " is listed for the query tile at row " << qt * kTile
             << " but holds no key visible to its rows";
          return os.str();
        }
        if (count > 1) {
          os << "sample " << b << ": key tile " << t << " is listed twice for the query tile at row " << qt * kTile
             << " (in two parts)";
          return os.str();
        }
      }
  }
  // The row bounds and key ranges against the positions, row by row.
  if (list.rows.size() != list.tasks.size() * size_t(kAttnWorkRowGroups) ||
      list.keys.size() != size_t(in.B * kt.list_tiles)) {
    os << "the list holds " << list.rows.size() << " row bounds and " << list.keys.size() << " key ranges, not "
       << list.tasks.size() * size_t(kAttnWorkRowGroups) << " (8 per task) and " << in.B * kt.list_tiles
       << " (B x key tiles): fill them with doc_work_list_bounds";
    return os.str();
  }
  for (size_t n = 0; n < list.tasks.size(); ++n)
    for (int64_t g = 0; g < kAttnWorkRowGroups; ++g) {
      const AttnWorkTask& task = list.tasks[n];
      int64_t pos_lo = INT64_MAX, doc_hi = INT64_MIN;
      for (int64_t i = task.q_row + g * kAttnWorkRowGroupRows; i < task.q_row + (g + 1) * kAttnWorkRowGroupRows; ++i) {
        const size_t row = size_t(task.sample * qs + std::min(i, in.Nq - 1));
        pos_lo = std::min(pos_lo, in.q_pos[row]);
        doc_hi = std::max(doc_hi, in.q_doc_start[row]);
      }
      const AttnRowBounds& r = list.rows[n * size_t(kAttnWorkRowGroups) + size_t(g)];
      if (r.pos_lo != pos_lo || r.doc_hi != doc_hi) {
        os << "task " << n << "'s row group " << g << " has bounds (least position " << r.pos_lo
           << ", greatest document start " << r.doc_hi << "), its rows (" << pos_lo << ", " << doc_hi << ")";
        return os.str();
      }
    }
  for (int64_t b = 0; b < in.B; ++b)
    for (int64_t t = 0; t < kt.list_tiles; ++t) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (int64_t j = t * kTile; j < t * kTile + kTile; ++j) {
        const int64_t kp = in.k_pos[size_t(b * ks + std::min(j, in.list_rows - 1))];
        lo = std::min(lo, kp);
        hi = std::max(hi, kp);
      }
      const AttnKeyRange& r = list.keys[size_t(b * kt.list_tiles + t)];
      if (r.lo != lo || r.hi != hi) {
        os << "sample " << b << "'s key tile " << t << " has the range [" << r.lo << ", " << r.hi
           << "], its rows [" << lo << ", " << hi << "]";
        return os.str();
      }
    }
  return "";
}

AttnBwdWorkList doc_bwd_work_list(const DocWorkListInputs& in, int64_t own_b_row) {
  return doc_bwd_work_list_mirror(doc_work_list(in), in, own_b_row);
}

AttnBwdWorkList doc_bwd_work_list_mirror(const AttnWorkList& fwd, const DocWorkListInputs& in, int64_t own_b_row) {
  const char* op = "doc_bwd_work_list_mirror";
  const KeyTiling kt = check_inputs(in, op);
  RT_CHECK(own_b_row == -1 || (own_b_row >= 0 && own_b_row % kTile == 0 && own_b_row <= kt.own_tiles * kTile),
           op << ": own_b_row = " << own_b_row << " must be -1 (no part B) or a multiple of 128 in [0, "
              << kt.own_tiles * kTile << "] (the own key rows' tiles)");
  const int64_t own_b_tile = own_b_row < 0 ? kt.own_tiles : own_b_row / kTile;  // own tiles [own_b_tile, own_tiles): B
  const size_t key_tiles = size_t(in.B * kt.list_tiles);
  // Pass 1: the forward tasks checked; per (sample, key tile) its pair count and the source its segments name (-2:
  // none yet).
  std::vector<int64_t> first(key_tiles + 1, 0);          // (B list_tiles + 1) pair counts, then offsets
  std::vector<int8_t> source(key_tiles, int8_t(-2));     // (B, list_tiles)
  for (size_t n = 0; n < fwd.tasks.size(); ++n) {
    const AttnWorkTask& task = fwd.tasks[n];
    RT_CHECK(task.sample >= 0 && task.sample < in.B && task.q_row >= 0 && task.q_row < in.Nq &&
                 task.q_row % kTile == 0 && task.part == 0 && task.parts == 1 && task.first_seg >= 0 &&
                 task.segs >= 0 && int64_t(task.first_seg) + task.segs <= int64_t(fwd.segs.size()),
             op << ": forward task " << n << " (sample " << task.sample << ", q_row " << task.q_row << ", part "
                << int(task.part) << " of " << int(task.parts) << ", segments [" << task.first_seg << ", "
                << task.first_seg + task.segs << ") of " << fwd.segs.size() << ") is not an unsplit query tile of "
                << "B=" << in.B << ", Nq=" << in.Nq << "; mirror doc_work_list's list of the same call");
    for (int s = task.first_seg; s < task.first_seg + task.segs; ++s) {
      const AttnKeySeg& seg = fwd.segs[size_t(s)];
      RT_CHECK(seg.tiles >= 1 && seg.first_tile >= 0 && int64_t(seg.first_tile) + seg.tiles <= kt.list_tiles,
               op << ": forward task " << n << "'s segment " << s << " (tiles [" << seg.first_tile << ", "
                  << seg.first_tile + seg.tiles << ")) is outside the call's " << kt.list_tiles << " key tiles");
      for (int64_t t = seg.first_tile; t < int64_t(seg.first_tile) + seg.tiles; ++t) {
        const size_t at = size_t(task.sample * kt.list_tiles + t);
        RT_CHECK((seg.source == -1) == (kt.source(t) == -1) && (source[at] == -2 || source[at] == seg.source),
                 op << ": forward task " << n << "'s segment " << s << " names key tile " << t << " under source "
                    << int(seg.source) << ", but it is "
                    << (kt.source(t) == -1 ? "an own tile (source -1)" : "a gathered tile (source >= 0)")
                    << (source[at] == -2 ? "" : " named before under source " + std::to_string(source[at])));
        source[at] = seg.source;
        ++first[at + 1];
      }
    }
  }
  for (size_t at = 0; at < key_tiles; ++at) first[at + 1] += first[at];
  // Pass 2: the forward tasks by (sample, q_row), so that every key tile's query tiles arrive in ascending order.
  std::vector<size_t> by_row(fwd.tasks.size());  // (tasks) forward task indices
  for (size_t n = 0; n < by_row.size(); ++n) by_row[n] = n;
  std::sort(by_row.begin(), by_row.end(), [&](size_t x, size_t y) {
    const AttnWorkTask &a = fwd.tasks[x], &b = fwd.tasks[y];
    return a.sample != b.sample ? a.sample < b.sample : a.q_row < b.q_row;
  });
  std::vector<int32_t> qts(size_t(first[key_tiles]));  // (pairs) per key tile, its query tiles ascending
  std::vector<int64_t> next(first.begin(), first.end() - 1);  // (B list_tiles) the next free slot of each key tile
  for (const size_t n : by_row) {
    const AttnWorkTask& task = fwd.tasks[n];
    for (int s = task.first_seg; s < task.first_seg + task.segs; ++s) {
      const AttnKeySeg& seg = fwd.segs[size_t(s)];
      for (int64_t t = seg.first_tile; t < int64_t(seg.first_tile) + seg.tiles; ++t)
        qts[size_t(next[size_t(task.sample * kt.list_tiles + t)]++)] = int32_t(task.q_row / kTile);
    }
  }
  // Per key tile its segments (runs of consecutive query tiles), in key order.
  std::vector<AttnQuerySeg> segs;         // (segments) every key tile's, in key order
  std::vector<int64_t> seg_first(key_tiles + 1, 0);  // (B list_tiles + 1) offsets into segs
  for (size_t at = 0; at < key_tiles; ++at) {
    const int64_t t = int64_t(at) % kt.list_tiles;
    for (int64_t k = first[at]; k < first[at + 1]; ++k) {
      RT_CHECK(k == first[at] || qts[size_t(k)] != qts[size_t(k - 1)],
               op << ": the forward list names key tile " << t << " twice for sample " << int64_t(at) / kt.list_tiles
                  << "'s query tile at row " << int64_t(qts[size_t(k)]) * kTile << "; it lists every pair once");
      AttnQuerySeg* prev = int64_t(segs.size()) > seg_first[at] ? &segs.back() : nullptr;
      if (prev && prev->first_tile + prev->tiles == qts[size_t(k)] && prev->tiles < INT16_MAX)
        ++prev->tiles;
      else
        segs.push_back(AttnQuerySeg{qts[size_t(k)], 1, source[at], 0});
    }
    seg_first[at + 1] = int64_t(segs.size());
    RT_CHECK(seg_first[at + 1] - seg_first[at] <= INT16_MAX && segs.size() <= size_t(INT32_MAX),
             op << ": sample " << int64_t(at) / kt.list_tiles << "'s key tile " << t << " has "
                << seg_first[at + 1] - seg_first[at] << " segments, more than the list's i16 count holds");
  }
  // The order: own tiles with segments (part A), then gathered ones, then own tiles of part B, heaviest first in each
  // (ties by sample, then key row), then the tiles no query sees (by sample, then key row).
  auto cls = [&](size_t at) {
    const int64_t t = int64_t(at) % kt.list_tiles;
    return first[at + 1] == first[at] ? 3 : t >= kt.own_tiles ? 1 : t < own_b_tile ? 0 : 2;
  };
  std::vector<size_t> order(key_tiles);  // (B list_tiles) key tile indices b list_tiles + t
  for (size_t at = 0; at < key_tiles; ++at) order[at] = at;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const int cx = cls(x), cy = cls(y);
    if (cx != cy) return cx < cy;
    const int64_t wx = first[x + 1] - first[x], wy = first[y + 1] - first[y];
    if (wx != wy) return wx > wy;
    return x < y;  // by sample, then key row
  });
  AttnBwdWorkList list;
  list.tasks.reserve(key_tiles);
  list.segs.reserve(segs.size());
  for (const size_t at : order) {
    const int64_t b = int64_t(at) / kt.list_tiles, t = int64_t(at) % kt.list_tiles;
    list.tasks.push_back(AttnBwdTask{int32_t(t * kTile), int16_t(b), 0, 1, int32_t(list.segs.size()),
                                     int16_t(seg_first[at + 1] - seg_first[at]), -1});
    list.segs.insert(list.segs.end(), segs.begin() + seg_first[at], segs.begin() + seg_first[at + 1]);
  }
  return list;
}

std::string doc_bwd_work_list_problem(const AttnBwdWorkList& list, const DocWorkListInputs& in) {
  const KeyTiling kt = check_inputs(in, "doc_bwd_work_list_problem");
  const int64_t qs = q_stride_of(in), ks = k_stride_of(in);
  const int64_t q_tiles = (in.Nq + kTile - 1) / kTile;
  std::ostringstream os;
  // listed[(b list_tiles + t) q_tiles + qt]: how often query tile qt is listed for key tile t of sample b.
  std::vector<uint8_t> listed(size_t(in.B * kt.list_tiles * q_tiles), 0);
  std::vector<int> task_of(size_t(in.B * kt.list_tiles), -1);  // (B, list_tiles) the task of each key tile
  for (size_t n = 0; n < list.tasks.size(); ++n) {
    const AttnBwdTask& task = list.tasks[n];
    if (task.sample < 0 || task.sample >= in.B || task.k_row < 0 || task.k_row % kTile != 0 ||
        task.k_row / kTile >= kt.list_tiles) {
      os << "task " << n << " (sample " << task.sample << ", k_row " << task.k_row << ") is not a 128-row key tile "
         << "of B=" << in.B << " and the call's " << kt.list_tiles << " key tiles";
      return os.str();
    }
    if (task.part != 0 || task.parts != 1 || task.merge_slot != -1) {
      os << "task " << n << " is part " << int(task.part) << " of " << int(task.parts) << " with merge slot "
         << task.merge_slot << "; only unsplit tasks (0 of 1, -1) are valid yet";
      return os.str();
    }
    const int64_t t = task.k_row / kTile;
    const size_t tile = size_t(task.sample * kt.list_tiles + t);
    if (task_of[tile] >= 0) {
      os << "tasks " << task_of[tile] << " and " << n << " both hold sample " << task.sample << "'s key tile at row "
         << task.k_row;
      return os.str();
    }
    task_of[tile] = int(n);
    if (task.segs < 0 || task.first_seg < 0 || int64_t(task.first_seg) + task.segs > int64_t(list.segs.size())) {
      os << "task " << n << " names segments [" << task.first_seg << ", " << task.first_seg + task.segs << ") of "
         << list.segs.size();
      return os.str();
    }
    int64_t next = 0;
    for (int s = task.first_seg; s < task.first_seg + task.segs; ++s) {
      const AttnQuerySeg& seg = list.segs[size_t(s)];
      const int64_t lo = seg.first_tile, hi = lo + seg.tiles;
      if (seg.tiles >= 1 && lo >= 0 && lo < next) {
        os << "task " << n << "'s segment " << s << " repeats query tiles [" << lo << ", " << std::min(hi, next)
           << ") of the task's earlier segments";
        return os.str();
      }
      const bool source_ok = kt.source(t) == -1 ? seg.source == -1 : seg.source == 0;
      if (seg.tiles < 1 || lo < 0 || hi > q_tiles || !source_ok || seg.spare != 0) {
        os << "task " << n << "'s segment " << s << " (query tiles [" << lo << ", " << hi << "), source "
           << int(seg.source) << ") is out of range or of the wrong source: the call has " << q_tiles
           << " query tiles, and key tile " << t << " is " << (kt.source(t) == -1 ? "own (-1)" : "gathered (0)");
        return os.str();
      }
      next = hi;
      for (int64_t qt = lo; qt < hi; ++qt) ++listed[tile * size_t(q_tiles) + size_t(qt)];
    }
  }
  for (int64_t b = 0; b < in.B; ++b)
    for (int64_t t = 0; t < kt.list_tiles; ++t)
      if (task_of[size_t(b * kt.list_tiles + t)] < 0) {
        os << "sample " << b << "'s key tile " << t << " (list rows [" << kt.row_begin(t) << ", " << kt.row_end(t)
           << ")) has no task: its dK / dV would not be written";
        return os.str();
      }
  // Every (key tile, query tile) pair against the brute-force truth.
  for (int64_t b = 0; b < in.B; ++b) {
    const int64_t* qp = in.q_pos.data() + b * qs;        // (Nq)
    const int64_t* qd = in.q_doc_start.data() + b * qs;  // (Nq)
    const int64_t* kp = in.k_pos.data() + b * ks;        // (list_rows)
    for (int64_t t = 0; t < kt.list_tiles; ++t)
      for (int64_t qt = 0; qt < q_tiles; ++qt) {
        int64_t vi = -1, vj = -1;  // a visible pair, if any
        for (int64_t j = kt.row_begin(t); j < kt.row_end(t) && vj < 0; ++j)
          for (int64_t i = qt * kTile; i < std::min(in.Nq, qt * kTile + kTile); ++i)
            if (qd[i] <= kp[j] && kp[j] <= qp[i]) {
              vi = i, vj = j;
              break;
            }
        const int count = listed[size_t((b * kt.list_tiles + t) * q_tiles + qt)];
        const int n = task_of[size_t(b * kt.list_tiles + t)];
        if (vi >= 0 && count == 0) {
          os << "sample " << b << ": query row " << vi << " sees key row " << vj << " (key tile " << t
             << "), but task " << n << "'s segments do not list query tile " << qt;
          return os.str();
        }
        if (vi < 0 && count > 0) {
          os << "sample " << b << ": task " << n << " (key tile " << t << ") lists the query tile at row "
             << qt * kTile << ", but none of its rows sees a key of the tile";
          return os.str();
        }
      }
  }
  return "";
}

}  // namespace rt
