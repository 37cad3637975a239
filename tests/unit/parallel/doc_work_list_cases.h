// The inputs the work-list builders' tests share (tests/unit/parallel/test_doc_work_list.cpp for the forward's list,
// test_doc_bwd_work_list.cpp for the backward's): a two-source case as builder inputs, the same with the rank's own
// rows shuffled, a small random call; forced split options (the split lists' tests); and a list's device words as a
// host tensor (the CPU ops' tests).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <cstring>

#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/test_reference.h"

namespace rt::test {

// The builder's inputs from a two-source case (its own rows are its queries; the gap rows hold position T).
inline DocWorkListInputs work_list_inputs_of(const TwoKvCase& c) {
  DocWorkListInputs in;
  in.B = c.B, in.Nq = c.n, in.Nk = c.n, in.list_rows = c.list;
  in.q_pos = c.q_pos, in.q_doc_start = c.q_doc, in.k_pos = c.k_pos;
  return in;
}

// The same call with the rank's own rows (queries and own keys alike) in a shuffled order: runs are rows of one
// document start wherever they lie, and key tiles are tested by their sorted positions.
inline DocWorkListInputs shuffled_own_rows(const TwoKvCase& c, uint64_t seed) {
  DocWorkListInputs in = work_list_inputs_of(c);
  std::vector<size_t> perm(size_t(c.n));
  for (size_t k = 0; k < perm.size(); ++k) perm[k] = k;
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  for (size_t k = 0; k < perm.size(); ++k) {
    in.q_pos[k] = c.q_pos[perm[k]];
    in.q_doc_start[k] = c.q_doc[perm[k]];
    in.k_pos[k] = c.q_pos[perm[k]];
  }
  return in;
}

// A small random call: short documents, the rank's rows a random subset of positions in random order (its own keys),
// gathered rows a random subset of the others (sorted or not), one source in a third of the calls; key tiles often
// touch a run's first or last visible position exactly.
inline DocWorkListInputs random_work_list_inputs(std::mt19937_64& rng) {
  DocWorkListInputs in;
  const int64_t T = 20 + int64_t(rng() % 700);
  in.B = 1 + int64_t(rng() % 2);
  in.Nq = in.Nk = 1 + int64_t(rng() % std::min<int64_t>(T - 1, 300));
  const int64_t R = rng() % 3 == 0 ? 0 : 1 + int64_t(rng() % (T - in.Nq));
  in.list_rows = R == 0 ? in.Nk : attn_second_kv_row(in.Nk) + R;
  for (int64_t b = 0; b < in.B; ++b) {
    std::vector<int64_t> start(static_cast<size_t>(T));  // (T) document start by position
    for (int64_t p = 0; p < T;) {
      const int64_t len = 1 + int64_t(rng() % (rng() % 2 ? 5 : 60));
      for (int64_t t = p; t < std::min(T, p + len); ++t) start[size_t(t)] = p;
      p += len;
    }
    std::vector<int64_t> perm(static_cast<size_t>(T));  // (T) positions, shuffled
    for (int64_t t = 0; t < T; ++t) perm[size_t(t)] = t;
    std::shuffle(perm.begin(), perm.end(), rng);
    if (rng() % 2) std::sort(perm.begin(), perm.begin() + in.Nq);
    for (int64_t i = 0; i < in.Nq; ++i) {
      in.q_pos.push_back(perm[size_t(i)]);
      in.q_doc_start.push_back(start[size_t(perm[size_t(i)])]);
    }
    std::vector<int64_t> list(perm.begin(), perm.begin() + in.Nq);  // own keys, then the gap, then gathered rows
    if (R > 0) {
      list.resize(size_t(attn_second_kv_row(in.Nk)), T);
      std::vector<int64_t> other(perm.begin() + in.Nq, perm.begin() + in.Nq + R);
      if (rng() % 2) std::sort(other.begin(), other.end());
      list.insert(list.end(), other.begin(), other.end());
    }
    in.k_pos.insert(in.k_pos.end(), list.begin(), list.end());
  }
  return in;
}

// Split options that cut every task into `parts` parts where it has the tiles (parts of one key tile or more,
// without the rule's simulation: DocWorkListSplit::force_parts), with room for max_slots merge slots.
inline DocWorkListSplit forced_split(int64_t parts, int64_t max_slots = 1 << 14) {
  DocWorkListSplit s;
  s.on = true;
  s.force_parts = parts;
  s.min_part_tiles = 1;
  s.max_slots = max_slots;
  return s;
}

// A list's device words (attn_work_list_words) as the op's i32 tensor on the host.
inline HostTensor work_list_words_tensor(const std::vector<int32_t>& words) {
  HostTensor t = i32({int64_t(words.size())});  // (words) i32
  std::memcpy(t.i(), words.data(), words.size() * 4);
  return t;
}

// attn_fwd_work_list's host op over `list` for a two-source case: out (B,Nq,H,D) f32, lse (B,H,Nq) f32, both and the
// op's scratch poisoned first (the op must write every row and reset what it reads). split.slots = slots (-1: the
// list's merge_slots).
struct WorkListOut {
  HostTensor out, lse;
};
inline WorkListOut run_work_list(const TwoKvCase& c, const AttnWorkList& list, int64_t slots = -1) {
  const HostTensor q = host(c.q, {c.B, c.n, c.H, c.D}), k1 = host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                   v1 = host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                   v2 = host(c.v2, {c.B, c.R, c.Hkv, c.D});
  HostTensor acc = f32({c.B, c.H, c.n, c.D}), m = f32({c.B, c.H, c.n}), l = f32({c.B, c.H, c.n});  // scratch
  poison(acc), poison(m), poison(l);
  AttnState scratch{acc.t, m.t, l.t};
  WorkListOut r{f32({c.B, c.n, c.H, c.D}), f32({c.B, c.H, c.n})};
  poison(r.out);
  poison(r.lse);
  const HostTensor words = work_list_words_tensor(attn_work_list_words(list));
  AttnSplitScratch split;
  split.slots = slots >= 0 ? slots : list.merge_slots;
  attn_fwd_work_list(q, k1, v1, k2, v2, scratch, c.mask(), words, int64_t(list.tasks.size()), r.out, r.lse, split);
  return r;
}

// Largest |a - b| over the finite entries of b relative to max |b|; 1e30 where b's -inf entries differ in a.
inline double max_rel_diff(const HostTensor& a, const HostTensor& b) {
  double scale = 0, diff = 0;
  for (int64_t e = 0; e < a.numel(); ++e) {
    if (std::isinf(b.f()[e])) {
      if (a.f()[e] != b.f()[e]) return 1e30;
      continue;
    }
    scale = std::max(scale, double(std::fabs(b.f()[e])));
    diff = std::max(diff, double(std::fabs(a.f()[e] - b.f()[e])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace rt::test
