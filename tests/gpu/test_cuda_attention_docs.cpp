// CUDA attention with a document mask (AttnMask::docs: query i sees key j iff doc(i) <= kpos(j) <= pos(i)) against
// an fp64 host reference over the union of the calls' (query, key) ranges. Every case runs on each kernel pair
// the device has, forced with set_attn_variant_override: fwd v5 / bwd v5 (its document instantiation; v4 in
// deterministic mode), fwd v5 / bwd v4 (same forward, so bwd v5's dK / dV must equal v4's: bit for bit with every
// work item whole, same tiles, same masks, one add per element; to fp32 reassociation in its default pieces), fwd v4 / bwd v4, and the mma.sync oracles fwd v2 / bwd v1 and fwd v3 / bwd v1
// (on a device without sm_90a the Hopper choices fall back to mma.sync). Inputs are fresh random bf16-rounded values, positions are 64-bit (based past
// 2^32), the state, out and lse are NaN-poisoned first, and dq / dk / dv are pre-filled with random values (the
// kernels add to them; their increments are checked). Bounds: out and the dq / dk / dv increments 1e-2 relative
// (P and dS are bf16 in the mma), lse 1e-4 absolute, no NaN anywhere; a row that sees no key has lse -inf and
// O = 0 exactly. Cases: documents shorter than a tile and of length 1, edges exactly on tile edges, a document
// spanning every rank of a cp = 4 zigzag ring (the ring's steps as resumed calls on key sub-ranges), query
// sub-ranges, GQA, a call whose every pair is masked (state untouched bit for bit, gradients unchanged), the
// fused whole forward / fresh backward, the deterministic backward (bitwise repeatable), and key tiles whose keys
// are more than 32766 positions apart (bwd v5's 16-bit offsets do not hold them: its global-memory mask runs),
// and query tiles of documents far apart in position (fwd v5 skips the key tiles between them). fwd v5's grid order
// (windows of (batch, head) pairs under an L2 budget) gives the default order's out and lse bit for bit at every budget.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>

#include "kernels/cuda/check.h"
#include "tests/gpu/attention_docs_case.h"
#include "tests/gpu/attention_test_util.h"

namespace rt::test {
namespace {

// Runs the case on the GPU: reset, the forward blocks (or attn_fwd_whole for one block), finalize, delta, the
// backward blocks (or attn_bwd_block_fresh) into the pre-filled gradients.
Results run_gpu(const DocCase& c, const DocArrays& a, int64_t D, const Inputs& in, bool whole) {
  const int64_t B = c.B, Nq = int64_t(c.q_tokens.size()), Nk = int64_t(c.k_tokens.size()), H = c.H, Hkv = c.Hkv;
  DevicePositions qp(a.q_pos), qd(a.q_doc), kp(a.k_pos);
  Buffer gq(gpu(), DType::bf16, {B, Nq, H, D}), gk(gpu(), DType::bf16, {B, Nk, Hkv, D}),
      gv(gpu(), DType::bf16, {B, Nk, Hkv, D}), gdo(gpu(), DType::bf16, {B, Nq, H, D}),
      gout(gpu(), DType::bf16, {B, Nq, H, D});
  Buffer gacc(gpu(), DType::f32, {B, H, Nq, D}), gm(gpu(), DType::f32, {B, H, Nq}), gl(gpu(), DType::f32, {B, H, Nq});
  Buffer glse(gpu(), DType::f32, {B, H, Nq}), gdelta(gpu(), DType::f32, {B, H, Nq});
  Buffer gdq(gpu(), DType::f32, {B, Nq, H, D}), gdk(gpu(), DType::f32, {B, Nk, Hkv, D}),
      gdv(gpu(), DType::f32, {B, Nk, Hkv, D});
  upload(gq, in.q); upload(gk, in.k); upload(gv, in.v); upload(gdo, in.dout);
  upload(gdq, in.dq0); upload(gdk, in.dk0); upload(gdv, in.dv0);
  poison(gacc); poison(gm); poison(gl); poison(gout); poison(glse); poison(gdelta);
  if (whole) { poison(gdk); poison(gdv); }  // attn_bwd_block_fresh overwrites them
  std::vector<AttnMask> masks;
  for (const Range& r : c.blocks) {
    AttnMask m = mask(false, 0, 0, r.qb, r.qe, r.kb, r.ke);
    m.docs.q_pos = qp.p;
    m.docs.q_doc_start = qd.p;
    m.docs.k_pos = kp.p;
    m.docs.q_stride = Nq;
    m.docs.k_stride = Nk;
    masks.push_back(m);
  }
  AttnState st{gacc.t(), gm.t(), gl.t()};
  if (whole) {
    attn_fwd_whole(gq.t(), gk.t(), gv.t(), st, masks.at(0), gout.t(), glse.t());
  } else {
    attn_state_reset(st);
    for (const AttnMask& m : masks) attn_fwd_block(gq.t(), gk.t(), gv.t(), st, m);
    attn_fwd_finalize(st, gout.t(), glse.t());
  }
  attn_bwd_delta(gout.t(), gdo.t(), gdelta.t());
  if (whole) {
    attn_bwd_block_fresh(gq.t(), gk.t(), gv.t(), gdo.t(), glse.t(), gdelta.t(), gdq.t(), gdk.t(), gdv.t(), masks.at(0));
  } else {
    for (const AttnMask& m : masks)
      attn_bwd_block(gq.t(), gk.t(), gv.t(), gdo.t(), glse.t(), gdelta.t(), gdq.t(), gdk.t(), gdv.t(), m);
  }
  Results r{download(gout), download(glse), {}, {}, {}};
  const std::vector<float> zeros_k(in.dk0.size(), 0.f);
  r.dq = increment(download(gdq), in.dq0);
  r.dk = increment(download(gdk), whole ? zeros_k : in.dk0);
  r.dv = increment(download(gdv), whole ? zeros_k : in.dv0);
  return r;
}

// The kernel pairs to force: {fwd, bwd}.
const std::vector<std::pair<const char*, const char*>>& variant_pairs() {
  static const std::vector<std::pair<const char*, const char*>> pairs{
      {"5", "5"}, {"5", "4"}, {"4", "4"}, {"2", "1"}, {"3", "1"}};
  return pairs;
}

// Checks one GPU run against the reference (the bounds of the file comment).
void expect_matches(const Results& g, const Results& ref, const std::string& label) {
  const double e_out = rel_error(g.out, ref.out), e_lse = lse_max_abs_error(g.lse, ref.lse);
  const double e_dq = rel_error64(g.dq, ref.dq), e_dk = rel_error64(g.dk, ref.dk), e_dv = rel_error64(g.dv, ref.dv);
  std::cout << "[attn docs] " << label << " out " << e_out << " lse " << e_lse << " dq " << e_dq << " dk " << e_dk
            << " dv " << e_dv << "\n";
  EXPECT_LE(e_out, 1e-2) << label << ": " << worst_mismatch(g.out, ref.out);
  EXPECT_LE(e_lse, 1e-4) << label;
  EXPECT_LE(e_dq, 1e-2) << label;
  EXPECT_LE(e_dk, 1e-2) << label;
  EXPECT_LE(e_dv, 1e-2) << label;
}

class CudaAttentionDocs : public ::testing::TestWithParam<int64_t> {
 protected:
  // Every variant pair against one fp64 reference; returns each pair's results.
  std::vector<Results> run_all(const DocCase& c, uint64_t seed, bool whole = false) {
    const int64_t D = GetParam();
    const DocArrays a = doc_arrays(c);
    const Inputs in = make_inputs(c, D, seed);
    const Results ref = reference(c, a, D, in.q, in.k, in.v, in.dout);
    std::vector<Results> all;
    for (const auto& [fwd, bwd] : variant_pairs()) {
      ScopedAttnVariant forced(fwd, bwd);
      const std::string label = std::string(c.name) + (whole ? " whole" : "") + " D=" + std::to_string(D) +
                                " fwd v" + fwd + " bwd v" + bwd;
      all.push_back(run_gpu(c, a, D, in, whole));
      expect_matches(all.back(), ref, label);
      expect_empty_rows_zero(c, all.back(), ref, D, label);
    }
    // bwd v5 against v4 after the same forward (pairs 0 and 1). A list of at most half the SMs (every case here)
    // runs in pieces that add partial dK / dV: equal up to fp32 reassociation; with every item whole, the same bits.
    EXPECT_LE(rel_error64(all.at(0).dk, all.at(1).dk), 1e-5) << c.name << " D=" << D << ": bwd v5 pieces' dK";
    EXPECT_LE(rel_error64(all.at(0).dv, all.at(1).dv), 1e-5) << c.name << " D=" << D << ": bwd v5 pieces' dV";
    {
      ScopedAttnVariant forced("5", "5");
      cuda::AttnVariantOverride whole_items = cuda::attn_variant_override();
      whole_items.bwd_doc_pieces = false;
      cuda::set_attn_variant_override(whole_items);
      const Results items = run_gpu(c, a, D, in, whole);
      EXPECT_TRUE(items.dk == all.at(1).dk) << c.name << " D=" << D << ": bwd v5 dK differs from bwd v4's";
      EXPECT_TRUE(items.dv == all.at(1).dv) << c.name << " D=" << D << ": bwd v5 dV differs from bwd v4's";
    }  // ScopedAttnVariant restores the overrides, pieces included
    expect_grid_order_changes_nothing(c, a, in, ref, all.at(0), whole);
    return all;
  }

  // fwd v5's document grid in windows of (batch, head) pairs (attn_fwd_sm90ws_kernel.cuh): the window only changes
  // which CTA runs a tile, so out and lse equal the default order's bit for bit at every budget: head by head (0),
  // one K/V head's bytes (windows of one GQA group), three K/V heads' (a partial last window where the pairs are not
  // a multiple), and the default (every pair in one window at these sizes). The gradients as expect_matches.
  void expect_grid_order_changes_nothing(const DocCase& c, const DocArrays& a, const Inputs& in, const Results& ref,
                                         const Results& v5, bool whole) {
    const int64_t D = GetParam();
    ScopedAttnVariant forced("5", "5");
    const int64_t kv_head_kb = (int64_t(c.k_tokens.size()) * D * 4 + 1023) / 1024;  // K and V bf16 of one head
    for (const int64_t kb : {int64_t(0), kv_head_kb, 3 * kv_head_kb}) {
      cuda::AttnVariantOverride o = cuda::attn_variant_override();
      o.fwd_doc_l2_kb = int(kb);
      cuda::set_attn_variant_override(o);
      const std::string label = std::string(c.name) + (whole ? " whole" : "") + " D=" + std::to_string(D) +
                                " fwd v5 grid windows of " + std::to_string(kb) + " KiB";
      const Results r = run_gpu(c, a, D, in, whole);
      EXPECT_TRUE(r.out == v5.out) << label << ": out differs from the default order's";
      EXPECT_TRUE(r.lse == v5.lse) << label << ": lse differs from the default order's";
      expect_matches(r, ref, label);
    }
  }

  static void expect_empty_rows_zero(const DocCase& c, const Results& g, const Results& ref, int64_t D,
                                     const std::string& label) {
    const int64_t Nq = int64_t(c.q_tokens.size());
    int64_t empty = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < Nq; ++i) {
          if (!std::isinf(ref.lse[size_t((b * c.H + h) * Nq + i)])) continue;
          ++empty;
          for (int64_t d = 0; d < D; ++d)
            ASSERT_EQ(g.out[size_t(((b * Nq + i) * c.H + h) * D + d)], 0.f) << label << " row " << i << " head " << h;
        }
    if (empty > 0) std::cout << "[attn docs] " << label << ": " << empty << " rows without a visible key\n";
  }
};

TEST_P(CudaAttentionDocs, ShortAndSingleTokenDocumentsWithGqa) {
  RT_REQUIRE_CUDA();
  // Documents of 1..128 tokens (many shorter than a 64- or 128-row tile), different per sample; GQA 4:2.
  const DocCase c{"short_docs", 2, 4, 2, {{1, 5, 1, 37, 64, 63, 1, 128}, {100, 1, 1, 197, 1}},
                  iota_rows(0, 300), iota_rows(0, 300), {{0, 300, 0, 300}}};
  run_all(c, 100);
}

TEST_P(CudaAttentionDocs, EdgesOnTileEdgesResumedOverKeyBlocks) {
  RT_REQUIRE_CUDA();
  // Document edges exactly on 64- and 128-row tile edges; the forward resumes over three key blocks.
  const DocCase c{"tile_edges", 1, 2, 2, {{64, 128, 64, 192, 64}}, iota_rows(0, 512), iota_rows(0, 512),
                  {{0, 512, 0, 128}, {0, 512, 128, 384}, {0, 512, 384, 512}}};
  run_all(c, 200);
}

// The cp = 4 zigzag ring as rank 1 sees it: its queries are chunks 1 and 6 (of 8 chunks of 128 tokens), and the
// ring's four steps bring the keys of ranks 1, 2, 3, 0 (chunks {1,6}, {2,5}, {3,4}, {0,7}), here one key tensor
// with one call per step on its key sub-range. The first document (600 tokens) spans every rank; some steps
// have no visible pair for chunk 1's queries.
DocCase zigzag_case() {
  auto chunk = [](int64_t c) { return iota_rows(c * 128, (c + 1) * 128); };
  auto cat = [](std::vector<int64_t> x, const std::vector<int64_t>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  std::vector<int64_t> keys;
  for (int64_t r : {1, 2, 3, 0}) keys = cat(keys, cat(chunk(r), chunk(7 - r)));
  DocCase c{"ring_zigzag", 1, 4, 1, {{600, 1, 63, 65, 295}}, cat(chunk(1), chunk(6)), keys, {}};
  for (int64_t s = 0; s < 4; ++s) c.blocks.push_back({0, 256, s * 256, (s + 1) * 256});
  return c;
}

TEST_P(CudaAttentionDocs, ZigzagRingStepsWithADocumentOnEveryRank) {
  RT_REQUIRE_CUDA();
  run_all(zigzag_case(), 300);
}

// Key tiles whose keys are far apart (unsorted rows: each 128-key tile holds 64 keys near position 0 and 64 past
// 40000), so bwd v5 cannot hold them as 16-bit offsets from the tile's first position and masks from global
// memory; the query rows straddle the documents' edges at 100 and 40000.
TEST_P(CudaAttentionDocs, KeyTilesWiderThanSixteenBitOffsets) {
  RT_REQUIRE_CUDA();
  auto cat = [](std::vector<int64_t> x, const std::vector<int64_t>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  std::vector<int64_t> keys;
  for (int64_t h = 0; h < 2; ++h)
    keys = cat(keys, cat(iota_rows(64 * h, 64 * h + 64), iota_rows(40000 + 64 * h, 40064 + 64 * h)));
  const DocCase c{"wide_key_tiles", 1, 2, 1, {{100, 39900, 30000}}, cat(iota_rows(0, 128), iota_rows(39950, 40078)),
                  keys, {{0, 256, 0, 256}}};
  run_all(c, 800);
}

// Query tiles that hold rows of documents far apart in position (as a rank's pieces are) against keys in position
// order: the keys between their documents are seen by no row, and fwd v5 skips those tiles inside the span
// (doc_live_key_tiles). The first 128-row tile holds three runs of rows; the second six, out of position order,
// more runs than the kernel keeps apart (the last ones share a hull). Keys in position order, then interleaved.
TEST_P(CudaAttentionDocs, QueryTilesOfDistantDocumentsSkipTheKeysBetween) {
  RT_REQUIRE_CUDA();
  auto cat = [](std::vector<std::vector<int64_t>> parts) {
    std::vector<int64_t> x;
    for (const auto& part : parts) x.insert(x.end(), part.begin(), part.end());
    return x;
  };
  // Documents [0, 300), [300, 1000), [1000, 1500), [1500, 2400), [2400, 3000).
  const std::vector<int64_t> queries =
      cat({iota_rows(280, 300), iota_rows(1600, 1700), iota_rows(2400, 2408),                        // tile 0
           iota_rows(310, 320), iota_rows(1010, 1020), iota_rows(1520, 1530), iota_rows(2410, 2420),  // tile 1
           iota_rows(100, 110), iota_rows(2500, 2600)});
  const int64_t Nq = int64_t(queries.size());
  std::vector<int64_t> interleaved;  // even positions, then odd ones
  for (int64_t i = 0; i < 3000; i += 2) interleaved.push_back(i);
  for (int64_t i = 1; i < 3000; i += 2) interleaved.push_back(i);
  const DocCase sorted{"distant_docs_sorted_keys", 1, 2, 1, {{300, 700, 500, 900, 600}}, queries, iota_rows(0, 3000),
                       {{0, Nq, 0, 3000}}};
  run_all(sorted, 900, /*whole=*/true);
  run_all(sorted, 905);
  const DocCase mixed{"distant_docs_interleaved_keys", 1, 2, 1, {{300, 700, 500, 900, 600}}, queries, interleaved,
                      {{0, Nq, 0, 3000}}};
  run_all(mixed, 910, /*whole=*/true);
}

TEST_P(CudaAttentionDocs, QuerySubRanges) {
  RT_REQUIRE_CUDA();
  // Rows outside the first call's query range see only the second call's keys.
  const DocCase c{"query_subranges", 1, 3, 3, {{150, 1, 249}}, iota_rows(0, 400), iota_rows(0, 400),
                  {{30, 370, 0, 200}, {0, 400, 200, 400}}};
  run_all(c, 400);
}

TEST_P(CudaAttentionDocs, FusedWholeForwardAndFreshBackward) {
  RT_REQUIRE_CUDA();
  const DocCase c{"whole", 2, 4, 2, {{64, 1, 200, 47}, {312}}, iota_rows(0, 312), iota_rows(0, 312),
                  {{0, 312, 0, 312}}};
  run_all(c, 500, /*whole=*/true);
}

// A call whose every pair is masked (the keys are a later document of the sample): no NaN, out 0 and lse -inf,
// gradients unchanged; and a resumed state passed through such a call comes back bit for bit.
TEST_P(CudaAttentionDocs, CallWithEveryPairMaskedLeavesStateUntouched) {
  RT_REQUIRE_CUDA();
  const DocCase c{"all_masked", 1, 2, 1, {{300, 300}}, iota_rows(0, 200), iota_rows(400, 600), {{0, 200, 0, 200}}};
  const std::vector<Results> all = run_all(c, 600);
  for (const Results& r : all) {
    EXPECT_TRUE(std::all_of(r.lse.begin(), r.lse.end(), [](float x) { return std::isinf(x) && x < 0; }));
    EXPECT_TRUE(std::all_of(r.dq.begin(), r.dq.end(), [](double x) { return x == 0.0; })) << "dQ changed";
    EXPECT_TRUE(std::all_of(r.dk.begin(), r.dk.end(), [](double x) { return x == 0.0; })) << "dK changed";
    EXPECT_TRUE(std::all_of(r.dv.begin(), r.dv.end(), [](double x) { return x == 0.0; })) << "dV changed";
  }
  const int64_t D = GetParam(), Nq = 200, Nk = 200, H = 2, Hkv = 1;
  const DocArrays a = doc_arrays(c);
  DevicePositions qp(a.q_pos), qd(a.q_doc), kp(a.k_pos);
  AttnMask m;
  m.docs.q_pos = qp.p;
  m.docs.q_doc_start = qd.p;
  m.docs.k_pos = kp.p;
  m.docs.q_stride = Nq;
  m.docs.k_stride = Nk;
  const Inputs in = make_inputs(c, D, 650);
  const std::vector<float> acc = random_vector(H * Nq * D, 660), mrun = random_vector(H * Nq, 661, 2.f);
  std::vector<float> l = random_vector(H * Nq, 662, 1.f, 3.f);
  for (float& x : l) x = std::fabs(x) + 0.5f;
  for (const auto& [fwd, bwd] : variant_pairs()) {
    ScopedAttnVariant forced(fwd, bwd);
    Buffer gq(gpu(), DType::bf16, {1, Nq, H, D}), gk(gpu(), DType::bf16, {1, Nk, Hkv, D}),
        gv(gpu(), DType::bf16, {1, Nk, Hkv, D});
    Buffer gacc(gpu(), DType::f32, {1, H, Nq, D}), gm(gpu(), DType::f32, {1, H, Nq}), gl(gpu(), DType::f32, {1, H, Nq});
    upload(gq, in.q); upload(gk, in.k); upload(gv, in.v);
    upload(gacc, acc); upload(gm, mrun); upload(gl, l);
    AttnState st{gacc.t(), gm.t(), gl.t()};
    attn_fwd_block(gq.t(), gk.t(), gv.t(), st, m);
    EXPECT_TRUE(download(gacc) == acc) << "fwd v" << fwd << ": acc changed by a call with no visible pair";
    EXPECT_TRUE(download(gm) == mrun) << "fwd v" << fwd << ": m changed";
    EXPECT_TRUE(download(gl) == l) << "fwd v" << fwd << ": l changed";
  }
}

// set_deterministic_attention(true) for one scope.
struct DeterministicScope {
  DeterministicScope() { set_deterministic_attention(true); }
  ~DeterministicScope() { set_deterministic_attention(false); }
};

TEST_P(CudaAttentionDocs, DeterministicBackwardIsAccurateAndRepeatsBitwise) {
  RT_REQUIRE_CUDA();
  DeterministicScope on;
  const DocCase c = zigzag_case();
  const std::vector<Results> first = run_all(c, 700), second = run_all(c, 700);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i].dq == second[i].dq) << "pair " << i << ": deterministic dQ differs between two runs";
    EXPECT_TRUE(first[i].dk == second[i].dk) << "pair " << i;
    EXPECT_TRUE(first[i].dv == second[i].dv) << "pair " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionDocs, ::testing::Values(int64_t(64), int64_t(128)),
                         [](const auto& info) { return "D" + std::to_string(info.param); });

// Bad document-mask arguments are refused with the fix named: positions in host memory, strides below the rows.
TEST(CudaAttentionDocsArgs, HostPositionsAndShortStridesAreRefused) {
  RT_REQUIRE_CUDA();
  Buffer q(gpu(), DType::bf16, {1, 8, 1, 64}), acc(gpu(), DType::f32, {1, 1, 8, 64}), m(gpu(), DType::f32, {1, 1, 8}),
      l(gpu(), DType::f32, {1, 1, 8});
  AttnState st{acc.t(), m.t(), l.t()};
  const std::vector<int64_t> pos{0, 1, 2, 3, 4, 5, 6, 7};
  AttnMask host;
  host.docs.q_pos = host.docs.q_doc_start = host.docs.k_pos = pos.data();
  host.docs.q_stride = host.docs.k_stride = 8;
  try {
    attn_fwd_block(q.t(), q.t(), q.t(), st, host);
    ADD_FAILURE() << "host positions were accepted";
  } catch (const rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("copy the positions to the device"), std::string::npos) << e.what();
  }
  DevicePositions dp(pos);
  AttnMask shorter;
  shorter.docs.q_pos = shorter.docs.q_doc_start = shorter.docs.k_pos = dp.p;
  shorter.docs.q_stride = shorter.docs.k_stride = 4;
  try {
    attn_fwd_block(q.t(), q.t(), q.t(), st, shorter);
    ADD_FAILURE() << "strides below the row count were accepted";
  } catch (const rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("strides"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rt::test
