// attn_fwd_work_list on CUDA (kernels/cuda/attention/attn_fwd_work_list.cu: fwd v5's list mode) against the kernels
// it replaces and the fp64 attention. Cases from tests/unit/kernels/two_kv_case.h (the gather scheme's calls on one
// rank: B = 2, random documents with some of length 1, one document over everything, documents of 1-9 rows so that
// a 128-row tile holds many; 64-bit positions past 2^32), GQA (H = 4, Hkv = 2) and H = Hkv, D = 128 and 64, one key
// source and two. The list comes from a brute-force builder local to this test (per 128-row query tile, every 128-key
// tile holding a pair visible to one of its rows, ascending, own before gathered, heaviest task first), so the test does
// not depend on parallel/schedule/doc_work_list. Checks, with out and lse NaN-poisoned first:
//   * two sources: out and lse bitwise equal to attn_fwd_whole_two_kv's (a left-out tile is fully masked for every
//     row of its query tile: it changes no bit);
//   * one source: bitwise equal to attn_fwd_whole's on query tiles whose key span starts on a 128-key boundary (that
//     kernel's tiles start at its first 64-key summary tile with a visible key; elsewhere its tiles are offset by 64 and
//     only the fp64 bound holds); a one-source call over keys that some query tiles do not see at all, so the kernel's
//     fill CTAs write their out = 0, lse = -inf;
//   * both: out within 1e-2 relative and lse within 1e-4 absolute of the fp64 attention, -inf exactly where it has it,
//     no NaN;
//   * a task of 400 one-tile segments (more than the CTA's threads: the expansion's second chunk) gives the bits of one
//     400-tile segment and of attn_fwd_whole;
//   * windows of heads (the L2 budget forced) change no bit;
//   * the kernel's tile test takes the list's bounds (AttnRowBounds, AttnKeyRange): row bounds that make no tile wholly
//     visible (every tile element-masked) change no bit, row bounds that make every tile wholly visible change the
//     out of rows with keys of other documents in their tiles;
//   * the host check (RT_ATTN_WORK_LIST_CHECK=1) refuses a split task, a wrong task count, and a key range or row
//     bound other than the device's positions', by name.
// Skips without a CUDA device (or without fwd v5: a device other than compute capability 9.0).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "tests/gpu/attention_test_util.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/test_reference.h"

namespace rt::test {
namespace {

constexpr int64_t kTile = kAttnWorkTileRows;  // 128

#define RT_REQUIRE_FWD_V5(D)                                                                             \
  do {                                                                                                   \
    RT_REQUIRE_CUDA();                                                                                   \
    if (!cuda::attn_fwd_ws_supported(0, D)) GTEST_SKIP() << "fwd v5 needs compute capability 9.0 (sm_90a)"; \
  } while (0)

// The keys of one call on the host: (B, rows) positions with row stride `stride` (the case's k_pos from `first`).
struct HostKeys {
  const int64_t* pos;
  int64_t stride, rows;
  int64_t own_rows;  // rows [0, own_rows) are source -1; with two sources, rows from gathered_row are source 0
  int64_t gathered_row;  // 0: one source
};

// The list's row bounds and key ranges (kernels/attn_work_list.h), by brute force here too: per task and 16-row group
// the least position and greatest document start (rows past Nq read row Nq - 1), per sample and 128-row key tile the
// least and greatest position of its rows (rows past the key list read its last row; gap rows count); + kBase, as the
// device's positions (two_kv_device_case.h).
void add_bounds(AttnWorkList& list, int64_t B, const int64_t* q_pos, const int64_t* q_doc, int64_t Nq,
                const HostKeys& keys) {
  const int64_t tiles = (keys.rows + kTile - 1) / kTile;
  list.keys.clear();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < tiles; ++t) {
      AttnKeyRange r{INT64_MAX, INT64_MIN};
      for (int64_t j = t * kTile; j < (t + 1) * kTile; ++j) {
        const int64_t kp = keys.pos[b * keys.stride + std::min(j, keys.rows - 1)];
        r.lo = std::min(r.lo, kp);
        r.hi = std::max(r.hi, kp);
      }
      list.keys.push_back(AttnKeyRange{r.lo + kBase, r.hi + kBase});
    }
  list.rows.clear();
  for (const AttnWorkTask& task : list.tasks)
    for (int64_t g = 0; g < kAttnWorkRowGroups; ++g) {
      AttnRowBounds r{INT64_MAX, INT64_MIN};
      for (int64_t i = task.q_row + 16 * g; i < task.q_row + 16 * g + 16; ++i) {
        const int64_t row = task.sample * Nq + std::min(i, Nq - 1);
        r.pos_lo = std::min(r.pos_lo, q_pos[row]);
        r.doc_hi = std::max(r.doc_hi, q_doc[row]);
      }
      list.rows.push_back(AttnRowBounds{r.pos_lo + kBase, r.doc_hi + kBase});
    }
}

// The brute-force list: per sample and 128-row query tile, the 128-key tiles with a visible (query, key) pair, as
// segments of consecutive tiles split where the source changes; tasks heaviest (most tiles) first, ties by sample
// and row; with its row bounds and key ranges (add_bounds).
AttnWorkList brute_force_list(const TwoKvCase& c, const HostKeys& keys) {
  struct Built {
    AttnWorkTask task;
    std::vector<AttnKeySeg> segs;
    int64_t tiles;
  };
  std::vector<Built> built;
  const int64_t key_tiles = (keys.rows + kTile - 1) / kTile;
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t q0 = 0; q0 < c.n; q0 += kTile) {
      std::vector<int> tiles;
      for (int64_t t = 0; t < key_tiles; ++t) {
        bool seen = false;
        for (int64_t j = t * kTile; j < std::min(keys.rows, (t + 1) * kTile) && !seen; ++j) {
          const int64_t kp = keys.pos[b * keys.stride + j];
          for (int64_t i = q0; i < std::min(c.n, q0 + kTile) && !seen; ++i)
            seen = c.q_doc[size_t(b * c.n + i)] <= kp && kp <= c.q_pos[size_t(b * c.n + i)];
        }
        if (seen) tiles.push_back(int(t));
      }
      if (tiles.empty()) continue;  // no visible key: the kernel's fill CTAs write the tile
      Built x{};
      x.task.q_row = int32_t(q0);
      x.task.sample = int16_t(b);
      x.task.part = 0, x.task.parts = 1, x.task.merge_slot = -1;
      x.tiles = int64_t(tiles.size());
      auto source = [&](int t) { return keys.gathered_row > 0 && t * kTile >= keys.gathered_row ? int8_t(0) : int8_t(-1); };
      for (int t : tiles) {
        AttnKeySeg* last = x.segs.empty() ? nullptr : &x.segs.back();
        if (last && last->first_tile + last->tiles == t && last->source == source(t)) {
          ++last->tiles;
        } else {
          x.segs.push_back(AttnKeySeg{t, 1, source(t), 0});
        }
      }
      built.push_back(std::move(x));
    }
  }
  std::stable_sort(built.begin(), built.end(), [](const Built& a, const Built& b) { return a.tiles > b.tiles; });
  AttnWorkList list;
  for (Built& x : built) {
    x.task.first_seg = int32_t(list.segs.size());
    x.task.segs = int16_t(x.segs.size());
    list.tasks.push_back(x.task);
    list.segs.insert(list.segs.end(), x.segs.begin(), x.segs.end());
  }
  add_bounds(list, c.B, c.q_pos.data(), c.q_doc.data(), c.n, keys);
  return list;
}

struct Got {
  std::vector<float> out, lse;  // (B, n, H, D), (B, H, n)
};

struct Outputs {
  Buffer acc, m, l, out, lse;
  explicit Outputs(const TwoKvCase& c)
      : acc(gpu(), DType::f32, {c.B, c.H, c.n, c.D}), m(gpu(), DType::f32, {c.B, c.H, c.n}),
        l(gpu(), DType::f32, {c.B, c.H, c.n}), out(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}),
        lse(gpu(), DType::f32, {c.B, c.H, c.n}) {
    poison(acc.t());
    poison(out.t());
    poison(lse.t());
  }
  AttnState state() const { return AttnState{acc.t(), m.t(), l.t()}; }
  Got get() const { return Got{download(out.t()), download(lse.t())}; }
};

std::vector<int32_t> list_words(const AttnWorkList& list) { return attn_work_list_words(list); }

// attn_fwd_work_list over k / v (and k2 / v2 when given: undefined tensors otherwise).
Got run_list(const TwoKvCase& c, const DeviceCase& d, const Tensor& k, const Tensor& v, const Tensor& k2,
             const Tensor& v2, const AttnMask& mask, const AttnWorkList& list) {
  const std::vector<int32_t> words = list_words(list);
  Buffer wl(gpu(), DType::i32, {int64_t(words.size())});
  upload_i32(wl.t(), words);
  Outputs o(c);
  AttnState st = o.state();
  attn_fwd_work_list(d.q.t(), k, v, k2, v2, st, mask, wl.t(), int64_t(list.tasks.size()), o.out.t(), o.lse.t());
  return o.get();
}

void check_fp64(const AttnShape& shape, const TwoKvCase& c, const std::vector<float>& k, const std::vector<float>& v,
                const AttnMask& host_mask, const Got& got, const char* what) {
  std::vector<double> ref_out, ref_lse;
  attention_forward_ref(shape, c.q.data(), k.data(), v.data(), host_mask, ref_out, ref_lse);
  const std::vector<float> out_f(ref_out.begin(), ref_out.end()), lse_f(ref_lse.begin(), ref_lse.end());
  EXPECT_LT(rel_error(got.out, out_f), 1e-2) << what << ": " << worst_mismatch(got.out, out_f);
  EXPECT_LT(lse_max_abs_error(got.lse, lse_f), 1e-4) << what;
}

// Elements whose bits differ, over the rows `rows_checked` selects (row = index into (B, n)); the first few named.
template <class RowOf>
int64_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b, RowOf row_of,
                       const std::vector<char>& rows_checked, std::string& first) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!rows_checked[size_t(row_of(int64_t(i)))]) continue;
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      if (n < 3) first += " [" + std::to_string(i) + "] " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
      ++n;
    }
  }
  return n;
}

void expect_bitwise(const TwoKvCase& c, const Got& got, const Got& want, const std::vector<char>& rows_checked,
                    const char* what) {
  ASSERT_EQ(got.out.size(), want.out.size());
  std::string first_out, first_lse;
  const int64_t HD = c.H * c.D;
  const int64_t out_bad = bit_mismatches(got.out, want.out, [&](int64_t e) { return e / HD; }, rows_checked, first_out);
  const int64_t lse_bad = bit_mismatches(
      got.lse, want.lse, [&](int64_t e) { return e / (c.H * c.n) * c.n + e % c.n; }, rows_checked, first_lse);
  EXPECT_EQ(out_bad, 0) << what << ": out differs in " << out_bad << " elements:" << first_out;
  EXPECT_EQ(lse_bad, 0) << what << ": lse differs in " << lse_bad << " elements:" << first_lse;
}

// Two sources: the work list against attn_fwd_whole_two_kv (bitwise) and the fp64 attention over the key list.
void check_two_sources(const TwoKvCase& c) {
  ASSERT_GE(c.n, kTile);
  ASSERT_GE(c.R, kTile) << "the second source must hold a whole key tile (else attn_fwd_whole_two_kv runs two calls)";
  const auto d = to_device(c);
  const int64_t s2 = attn_second_kv_row(c.n);
  const AttnWorkList list = brute_force_list(c, HostKeys{c.k_pos.data(), c.list, c.list, c.n, s2});
  ASSERT_FALSE(list.tasks.empty());
  const Got got = run_list(c, *d, d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), d->mask, list);
  Outputs o(c);
  AttnState st = o.state();
  attn_fwd_whole_two_kv(d->q.t(), d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), st, d->mask, o.out.t(), o.lse.t());
  const Got want = o.get();
  expect_bitwise(c, got, want, std::vector<char>(size_t(c.B * c.n), 1), "work list vs attn_fwd_whole_two_kv");
  check_fp64({c.B, c.n, c.list, c.H, c.Hkv, c.D}, c, c.k_list, c.v_list, c.mask(), got, "attn_fwd_work_list");
}

// One source: the keys are source 1 (the queries' own, gathered = false) or source 2 alone (which some query tiles do
// not see at all). Bitwise against attn_fwd_whole on the query tiles whose first key summary tile (64 keys) with a
// possibly visible key is even, as that kernel finds it (the 128-row tile's least document start and greatest
// position against each 64-key tile's least and greatest position).
void check_one_source(const TwoKvCase& c, bool gathered) {
  ASSERT_GE(c.n, kTile);
  const auto d = to_device(c);
  const int64_t s2 = attn_second_kv_row(c.n), rows = gathered ? c.R : c.n;
  ASSERT_GE(rows, kTile);
  const int64_t* kpos = c.k_pos.data() + (gathered ? s2 : 0);  // (B, rows), stride c.list
  const AttnWorkList list = brute_force_list(c, HostKeys{kpos, c.list, rows, rows, 0});
  AttnMask mask = d->mask, host_mask = c.mask();
  if (gathered) {
    mask.docs.k_pos += s2;
    host_mask.docs.k_pos += s2;
  }
  const Tensor& k = gathered ? d->k2.t() : d->k1.t();
  const Tensor& v = gathered ? d->v2.t() : d->v1.t();
  const Got got = run_list(c, *d, k, v, Tensor(), Tensor(), mask, list);
  Outputs o(c);
  AttnState st = o.state();
  attn_fwd_whole(d->q.t(), k, v, st, mask, o.out.t(), o.lse.t());
  const Got want = o.get();

  std::vector<char> aligned(size_t(c.B * c.n), 0);
  int64_t aligned_tiles = 0, tiles = 0, unseen_tiles = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t q0 = 0; q0 < c.n; q0 += kTile) {
      int64_t doc_lo = INT64_MAX, pos_hi = INT64_MIN;
      for (int64_t i = q0; i < std::min(c.n, q0 + kTile); ++i) {
        doc_lo = std::min(doc_lo, c.q_doc[size_t(b * c.n + i)]);
        pos_hi = std::max(pos_hi, c.q_pos[size_t(b * c.n + i)]);
      }
      int64_t first = -1;
      for (int64_t t = 0; t * 64 < rows && first < 0; ++t) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t j = t * 64; j < std::min(rows, t * 64 + 64); ++j) {
          lo = std::min(lo, kpos[b * c.list + j]);
          hi = std::max(hi, kpos[b * c.list + j]);
        }
        if (!(hi < doc_lo || lo > pos_hi)) first = t;
      }
      ++tiles;
      const bool listed = std::any_of(list.tasks.begin(), list.tasks.end(),
                                      [&](const AttnWorkTask& t) { return t.sample == b && t.q_row == q0; });
      unseen_tiles += listed ? 0 : 1;
      if (first % 2 == 0 || first < 0) {
        ++aligned_tiles;
        for (int64_t i = q0; i < std::min(c.n, q0 + kTile); ++i) aligned[size_t(b * c.n + i)] = 1;
      }
    }
  ASSERT_GT(aligned_tiles, 0) << "no query tile to compare bitwise";
  if (gathered) {
    EXPECT_GT(unseen_tiles, 0) << "the case should have query tiles that see no key (fill CTAs)";
  }
  std::printf("one source (%s): %lld of %lld query tiles compared bitwise, %lld without a task\n",
              gathered ? "gathered rows" : "own rows", (long long)aligned_tiles, (long long)tiles,
              (long long)unseen_tiles);
  expect_bitwise(c, got, want, aligned, "work list vs attn_fwd_whole");
  const std::vector<float>& kh = gathered ? c.k2 : c.k1;
  const std::vector<float>& vh = gathered ? c.v2 : c.v1;
  check_fp64({c.B, c.n, rows, c.H, c.Hkv, c.D}, c, kh, vh, host_mask, got, "attn_fwd_work_list, one source");
}

// Own rows [300, 700) and [1200, 1500) of 2100 positions: n = 700 (a 68-row gap before source 2).
TwoKvCase random_docs(int64_t H, int64_t Hkv, int64_t D, uint64_t seed) {
  return make_two_kv_case(2, H, Hkv, D, 2100, 300, 700, 1200, 1500, seed, round_bf16);
}

// Forces the L2 budget of the kernels' head windows (RT_ATTN_FWD_DOC_L2_KB) for its scope.
class ScopedDocL2 {
 public:
  explicit ScopedDocL2(int kb) : old_(cuda::attn_variant_override()) {
    cuda::AttnVariantOverride o = old_;
    o.fwd_doc_l2_kb = kb;
    cuda::set_attn_variant_override(o);
  }
  ~ScopedDocL2() { cuda::set_attn_variant_override(old_); }
  ScopedDocL2(const ScopedDocL2&) = delete;
  ScopedDocL2& operator=(const ScopedDocL2&) = delete;

 private:
  cuda::AttnVariantOverride old_;
};

TEST(AttnWorkListCuda, TwoSourcesD128GqaBitwiseEqualsTwoKv) {
  RT_REQUIRE_FWD_V5(128);
  check_two_sources(random_docs(4, 2, 128, 17));
}

TEST(AttnWorkListCuda, HeadWindowsChangeNoBit) {
  RT_REQUIRE_FWD_V5(128);
  // K and V of one K/V head over both samples: 2 x 1383 rows x 128 x 2 x 2 bytes = 1.4 MB. A 1500 KiB budget makes
  // windows of one GQA group (2 heads, two windows); 0 runs head by head (4 windows).
  const TwoKvCase c = random_docs(4, 2, 128, 17);
  ASSERT_EQ(c.list, 1383);
  for (int kb : {1500, 0}) {
    SCOPED_TRACE("RT_ATTN_FWD_DOC_L2_KB " + std::to_string(kb));
    const ScopedDocL2 budget(kb);
    check_two_sources(c);
  }
}

TEST(AttnWorkListCuda, TwoSourcesD64BitwiseEqualsTwoKv) {
  RT_REQUIRE_FWD_V5(64);
  check_two_sources(random_docs(2, 2, 64, 29));
}

TEST(AttnWorkListCuda, OneDocumentOverEverything) {
  RT_REQUIRE_FWD_V5(128);
  check_two_sources(make_two_kv_case(2, 4, 2, 128, 2100, 300, 700, 1200, 1500, 31, round_bf16, {2100}, 0));
}

TEST(AttnWorkListCuda, ManyShortDocumentsPerTile) {
  RT_REQUIRE_FWD_V5(64);
  std::vector<int64_t> lengths;  // 1..9 rows, odd and even, many of length 1
  for (int64_t p = 0, i = 0; p < 2100; ++i) {
    const int64_t len = std::min<int64_t>(2100 - p, i % 3 == 0 ? 1 : 1 + (i * 7) % 9);
    lengths.push_back(len);
    p += len;
  }
  check_two_sources(make_two_kv_case(2, 4, 2, 64, 2100, 300, 700, 1200, 1500, 37, round_bf16, lengths, 4));
}

TEST(AttnWorkListCuda, OddLengthsD128HeqHkv) {
  RT_REQUIRE_FWD_V5(128);
  // Odd own ranges: n = 333 + 419 = 752 rows, documents of odd lengths.
  std::vector<int64_t> lengths;
  for (int64_t p = 0, i = 0; p < 2501; ++i) {
    const int64_t len = std::min<int64_t>(2501 - p, 2 * ((i * 37) % 150) + 1);
    lengths.push_back(len);
    p += len;
  }
  check_two_sources(make_two_kv_case(2, 2, 2, 128, 2501, 101, 434, 1777, 2196, 41, round_bf16, lengths, 8));
}

TEST(AttnWorkListCuda, OneSourceOwnKeysD128Gqa) {
  RT_REQUIRE_FWD_V5(128);
  check_one_source(random_docs(4, 2, 128, 43), /*gathered=*/false);
}

TEST(AttnWorkListCuda, OneSourceOwnKeysD64) {
  RT_REQUIRE_FWD_V5(64);
  check_one_source(random_docs(2, 2, 64, 47), /*gathered=*/false);
}

TEST(AttnWorkListCuda, OneSourceQueryTilesThatSeeNoKeyAreFilled) {
  RT_REQUIRE_FWD_V5(128);
  // The keys are the other chunks' rows alone (source 2). Own positions [200, 840) and [2000, 2128); documents
  // [0, 600), [600, 1000), [1000, 3000): query rows 0-399 see positions 0-199, rows 640-767 see 1000-1999, and rows
  // 400-639 (positions 600-839) see none, so query tile 4 (rows 512-639) has no task.
  const TwoKvCase c =
      make_two_kv_case(2, 4, 2, 128, 3000, 200, 840, 2000, 2128, 53, round_bf16, {600, 400, 2000}, 0);
  ASSERT_EQ(c.R, 1200);
  check_one_source(c, /*gathered=*/true);
}

TEST(AttnWorkListCuda, ATaskOfMoreSegmentsThanTheCtaHasThreads) {
  RT_REQUIRE_FWD_V5(64);
  // One query tile (the last 128 of 400 x 128 positions, one document) against all 400 key tiles, listed once as 400
  // one-tile segments (the kernel expands them in two chunks of its 384 threads) and once as one segment: the same
  // bits, equal to attn_fwd_whole's, and within the fp64 bound.
  const int64_t tiles = 400, Nk = tiles * kTile, Nq = kTile, H = 2, Hkv = 1, D = 64;
  std::vector<int64_t> k_pos(static_cast<size_t>(Nk)), q_pos(static_cast<size_t>(Nq));  // (Nk), (Nq)
  std::vector<int64_t> q_doc(static_cast<size_t>(Nq), 0);                                 // (Nq): one document
  for (int64_t j = 0; j < Nk; ++j) k_pos[size_t(j)] = j;
  for (int64_t i = 0; i < Nq; ++i) q_pos[size_t(i)] = Nk - Nq + i;
  const std::vector<float> q = bf16_rounded(random_vector(Nq * H * D, 61));
  const std::vector<float> k = bf16_rounded(random_vector(Nk * Hkv * D, 62));
  const std::vector<float> v = bf16_rounded(random_vector(Nk * Hkv * D, 63));
  Buffer qd(gpu(), DType::bf16, {1, Nq, H, D}), kd(gpu(), DType::bf16, {1, Nk, Hkv, D}),
      vd(gpu(), DType::bf16, {1, Nk, Hkv, D}), qp(gpu(), DType::i32, {2 * Nq}), qs(gpu(), DType::i32, {2 * Nq}),
      kp(gpu(), DType::i32, {2 * Nk});
  upload(qd.t(), q);
  upload(kd.t(), k);
  upload(vd.t(), v);
  upload_i32(qp.t(), words(q_pos));  // + kBase: 64-bit positions
  upload_i32(qs.t(), words(q_doc));
  upload_i32(kp.t(), words(k_pos));
  AttnMask mask, host_mask;
  host_mask.docs.q_pos = q_pos.data(), host_mask.docs.q_doc_start = q_doc.data(), host_mask.docs.k_pos = k_pos.data();
  host_mask.docs.q_stride = Nq, host_mask.docs.k_stride = Nk;
  mask = host_mask;
  mask.docs.q_pos = static_cast<const int64_t*>(qp.t().data);
  mask.docs.q_doc_start = static_cast<const int64_t*>(qs.t().data);
  mask.docs.k_pos = static_cast<const int64_t*>(kp.t().data);
  AttnWorkList many, one;
  many.tasks.push_back(AttnWorkTask{0, 0, 0, 1, 0, int16_t(tiles), -1});
  for (int t = 0; t < int(tiles); ++t) many.segs.push_back(AttnKeySeg{t, 1, -1, 0});
  one.tasks.push_back(AttnWorkTask{0, 0, 0, 1, 0, 1, -1});
  one.segs.push_back(AttnKeySeg{0, int16_t(tiles), -1, 0});
  const HostKeys keys{k_pos.data(), Nk, Nk, Nk, 0};
  add_bounds(many, 1, q_pos.data(), q_doc.data(), Nq, keys);
  add_bounds(one, 1, q_pos.data(), q_doc.data(), Nq, keys);
  auto run = [&](const AttnWorkList* list) {
    Buffer acc(gpu(), DType::f32, {1, H, Nq, D}), m(gpu(), DType::f32, {1, H, Nq}), l(gpu(), DType::f32, {1, H, Nq}),
        out(gpu(), DType::bf16, {1, Nq, H, D}), lse(gpu(), DType::f32, {1, H, Nq});
    poison(out.t());
    poison(lse.t());
    AttnState st{acc.t(), m.t(), l.t()};
    if (list != nullptr) {
      const std::vector<int32_t> w = attn_work_list_words(*list);
      Buffer wl(gpu(), DType::i32, {int64_t(w.size())});
      upload_i32(wl.t(), w);
      attn_fwd_work_list(qd.t(), kd.t(), vd.t(), Tensor(), Tensor(), st, mask, wl.t(), int64_t(list->tasks.size()),
                         out.t(), lse.t());
      return Got{download(out.t()), download(lse.t())};
    }
    attn_fwd_whole(qd.t(), kd.t(), vd.t(), st, mask, out.t(), lse.t());
    return Got{download(out.t()), download(lse.t())};
  };
  const Got got_many = run(&many), got_one = run(&one), whole = run(nullptr);
  TwoKvCase shape;  // expect_bitwise reads B, n, H, D
  shape.B = 1, shape.n = Nq, shape.H = H, shape.D = D;
  const std::vector<char> all(size_t(Nq), 1);
  expect_bitwise(shape, got_many, got_one, all, "400 one-tile segments vs one segment of 400");
  expect_bitwise(shape, got_many, whole, all, "400 one-tile segments vs attn_fwd_whole");
  std::vector<double> ref_out, ref_lse;
  attention_forward_ref({1, Nq, Nk, H, Hkv, D}, q.data(), k.data(), v.data(), host_mask, ref_out, ref_lse);
  const std::vector<float> out_f(ref_out.begin(), ref_out.end()), lse_f(ref_lse.begin(), ref_lse.end());
  EXPECT_LT(rel_error(got_many.out, out_f), 1e-2) << worst_mismatch(got_many.out, out_f);
  EXPECT_LT(lse_max_abs_error(got_many.lse, lse_f), 1e-4);
}

// The list's row bounds decide the tile test: bounds below every key's position (no tile "every pair visible") send
// every tile through the exact element mask, the same bits; bounds above (every tile "every pair visible") mask no
// document and must change out.
TEST(AttnWorkListCuda, TheTileTestTakesTheListsBounds) {
  RT_REQUIRE_FWD_V5(128);
  const TwoKvCase c = random_docs(4, 2, 128, 67);
  const auto d = to_device(c);
  const AttnWorkList good =
      brute_force_list(c, HostKeys{c.k_pos.data(), c.list, c.list, c.n, attn_second_kv_row(c.n)});
  ASSERT_FALSE(good.tasks.empty());
  const Got want = run_list(c, *d, d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), d->mask, good);
  AttnWorkList masked = good;  // least position below every key: never wholly visible
  for (AttnRowBounds& r : masked.rows) r.pos_lo = kBase - 1;
  const Got got_masked = run_list(c, *d, d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), d->mask, masked);
  expect_bitwise(c, got_masked, want, std::vector<char>(size_t(c.B * c.n), 1), "row bounds that mask every tile");
  AttnWorkList open = good;  // every tile wholly visible: the element mask never runs
  for (AttnRowBounds& r : open.rows) r = AttnRowBounds{INT64_MAX, INT64_MIN};
  const Got got_open = run_list(c, *d, d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), d->mask, open);
  int64_t differ = 0;
  for (size_t i = 0; i < want.out.size(); ++i) differ += std::memcmp(&want.out[i], &got_open.out[i], 4) != 0;
  EXPECT_GT(differ, 0) << "row bounds that call every tile wholly visible changed no bit: the kernel does not take "
                          "the list's bounds";
}

TEST(AttnWorkListCuda, HostCheckRefusesWrongCountsAndBounds) {
  RT_REQUIRE_FWD_V5(128);
  const TwoKvCase c = random_docs(4, 2, 128, 71);
  const auto d = to_device(c);
  const AttnWorkList good =
      brute_force_list(c, HostKeys{c.k_pos.data(), c.list, c.list, c.n, attn_second_kv_row(c.n)});
  ASSERT_GE(good.tasks.size(), 2u);
  struct Bad {
    const char* what;
    AttnWorkList list;
    int64_t tasks;
    const char* says;
  };
  std::vector<Bad> bad;
  bad.push_back(Bad{"one task too few told", good, int64_t(good.tasks.size()) - 1, "tasks"});
  bad.push_back(Bad{"a key range one short", good, int64_t(good.tasks.size()), "key range"});
  bad.back().list.keys[bad.back().list.keys.size() / 2].hi -= 1;
  bad.push_back(Bad{"a row bound one too high", good, int64_t(good.tasks.size()), "row group"});
  bad.back().list.rows[3].pos_lo += 1;
  ::setenv("RT_ATTN_WORK_LIST_CHECK", "1", 1);
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    const std::vector<int32_t> words = list_words(b.list);
    Buffer wl(gpu(), DType::i32, {int64_t(words.size())});
    upload_i32(wl.t(), words);
    Outputs o(c);
    AttnState st = o.state();
    try {
      attn_fwd_work_list(d->q.t(), d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), st, d->mask, wl.t(), b.tasks,
                         o.out.t(), o.lse.t());
      ADD_FAILURE() << "accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
    }
  }
  ::unsetenv("RT_ATTN_WORK_LIST_CHECK");
}

TEST(AttnWorkListCuda, HostCheckRefusesASplitTask) {
  RT_REQUIRE_FWD_V5(128);
  const TwoKvCase c = random_docs(4, 2, 128, 59);
  const auto d = to_device(c);
  AttnWorkList list = brute_force_list(c, HostKeys{c.k_pos.data(), c.list, c.list, c.n, attn_second_kv_row(c.n)});
  ASSERT_FALSE(list.tasks.empty());
  list.tasks[0].parts = 2;
  ::setenv("RT_ATTN_WORK_LIST_CHECK", "1", 1);
  try {
    run_list(c, *d, d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), d->mask, list);
    ADD_FAILURE() << "a split task was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("parts"), std::string::npos) << e.what();
  }
  ::unsetenv("RT_ATTN_WORK_LIST_CHECK");
}

}  // namespace
}  // namespace rt::test
