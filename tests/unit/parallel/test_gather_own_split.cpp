// The gather scheme's own backward call in two parts (parallel/schedule/gather_plan.h choose_own_bwd_split,
// parallel/cp/gather_backward.h own_bwd_part):
//   - add_own_key_pairs and kv_gather_tiles' own_key_tile_pairs against a brute force over every (query, key) pair of
//     a rank's own rows (rows in position order and in random order);
//   - choose_own_bwd_split against its stated rule on fresh random pair counts and times: m a multiple of 128 with
//     both parts at least 128 rows, the parts' times from their pairs, part B covering the return whenever some split
//     point can, the split kept only where the model says it is faster, and within one key tile of the best split
//     point the model knows; plus a case worked by hand and the cases that must not split;
//   - gather_time_from_calls' split formula on a small case worked by hand from the formula;
//   - predict_gather_time: a split never predicts a longer backward than the one call, and shortens it where the
//     return is exposed;
//   - own_bwd_part on the CPU: part A then part B equal one attn_bwd_block_fresh (B = 1: views, B = 2: key ranges),
//     at the middle, inside a document, at a document edge and at the ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "parallel/cp/gather_backward.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/gather_plan.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

// Document starts by position of a T-token sample cut into random lengths in [1, max_len].
std::vector<int64_t> random_doc_starts(std::mt19937_64& rng, int64_t T, int64_t max_len) {
  std::vector<int64_t> lengths;
  for (int64_t left = T; left > 0;) {
    const int64_t L = std::min(left, 1 + int64_t(rng() % uint64_t(max_len)));
    lengths.push_back(L);
    left -= L;
  }
  return doc_starts_from_lengths(lengths, T);
}

// Visible pairs of each key row of one rank's own call, from the mask's definition: key i is seen by query j iff
// doc_start[j] <= pos[i] <= pos[j]. O(n^2).
std::vector<int64_t> brute_key_pairs(const std::vector<int64_t>& pos, const std::vector<int64_t>& start) {
  std::vector<int64_t> pairs(pos.size(), 0);
  for (size_t i = 0; i < pos.size(); ++i)
    for (size_t j = 0; j < pos.size(); ++j) pairs[i] += start[j] <= pos[i] && pos[i] <= pos[j];
  return pairs;
}

TEST(GatherOwnSplit, KeyPairsMatchTheMask) {
  std::mt19937_64 rng(4242);
  for (int cp : {2, 4})
    for (int64_t max_len : {int64_t(1), int64_t(9), int64_t(200), int64_t(5000)}) {
      const int64_t n = 300, T = n * cp;
      const std::vector<int64_t> starts = random_doc_starts(rng, T, max_len);
      for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
        const std::vector<int64_t> order = layout_ring_order(l, T, cp);
        const std::vector<RingSpan> spans = ring_spans_from_order(order, cp);
        const KvGatherPlan plan = kv_gather_plan_for_spans(document_begins(starts), spans, cp);
        const KvGatherTiles tiles = kv_gather_tiles(starts, spans, plan, cp);
        ASSERT_EQ(tiles.own_key_tile_pairs.size(), size_t(cp));
        for (int r = 0; r < cp; ++r) {
          SCOPED_TRACE("cp " + std::to_string(cp) + " max " + std::to_string(max_len) + " " + layout_name(l) +
                       " rank " + std::to_string(r));
          std::vector<int64_t> pos(order.begin() + r * n, order.begin() + (r + 1) * n);  // (n)
          std::vector<int64_t> start(static_cast<size_t>(n));  // (n)
          for (int64_t i = 0; i < n; ++i) start[size_t(i)] = starts[size_t(pos[size_t(i)])];
          const std::vector<int64_t> want = brute_key_pairs(pos, start);
          std::vector<int64_t> want_tiles((static_cast<size_t>(n) + 127) / 128, 0);  // (ceil(n / 128))
          for (int64_t i = 0; i < n; ++i) want_tiles[size_t(i / 128)] += want[size_t(i)];
          EXPECT_EQ(tiles.own_key_tile_pairs[size_t(r)], want_tiles) << "the layout's rows, in position order";
          EXPECT_EQ(key_tile_sums(want), want_tiles);
          std::vector<int64_t> got(size_t(n), 0);
          add_own_key_pairs(pos.data(), start.data(), n, got);
          add_own_key_pairs(pos.data(), start.data(), n, got);  // adds: twice is double
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], 2 * want[size_t(i)]) << "row " << i;
          // The same rows in random local order: each row keeps its count.
          std::vector<size_t> perm(static_cast<size_t>(n));
          std::iota(perm.begin(), perm.end(), size_t(0));
          std::shuffle(perm.begin(), perm.end(), rng);
          std::vector<int64_t> ppos(static_cast<size_t>(n)), pstart(static_cast<size_t>(n));  // (n) shuffled rows
          std::vector<int64_t> shuffled(size_t(n), 0);                                          // (n) their counts
          for (int64_t i = 0; i < n; ++i) {
            ppos[size_t(i)] = pos[perm[size_t(i)]];
            pstart[size_t(i)] = start[perm[size_t(i)]];
          }
          add_own_key_pairs(ppos.data(), pstart.data(), n, shuffled);
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(shuffled[size_t(i)], want[perm[size_t(i)]]) << "shuffled row " << i;
        }
      }
    }
}

// The model's time of a part with p of the P pairs (the formula of choose_own_bwd_split's comment).
double part_time(double own, double call, int64_t p, int64_t P) { return call + (own - call) * double(p) / double(P); }

TEST(GatherOwnSplit, ChoiceFollowsItsRule) {
  std::mt19937_64 rng(777);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int splits = 0, uncovered = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = 128 * int64_t(1 + rng() % 12) + int64_t(rng() % 128);  // any n, not only tile multiples
    const std::vector<int64_t> starts = random_doc_starts(rng, n, 1 + int64_t(rng() % 2000));
    std::vector<int64_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), int64_t(0));
    std::vector<int64_t> pairs(size_t(n), 0);
    add_own_key_pairs(pos.data(), starts.data(), n, pairs);
    const double call = 74, own = call + 3000 * u(rng), c_kv = 1500 * u(rng);
    const double c_dkv = trial % 10 == 0 ? 0.0 : 2000 * u(rng);
    const OwnBwdSplit s = choose_own_bwd_split(key_tile_sums(pairs), n, own, call, c_kv, c_dkv);
    SCOPED_TRACE("trial " + std::to_string(trial) + " n " + std::to_string(n));
    // prefix[m]: pairs of key rows [0, m).
    std::vector<int64_t> prefix(size_t(n) + 1, 0);
    for (int64_t i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + pairs[size_t(i)];
    const int64_t P = prefix[size_t(n)];
    std::vector<int64_t> cands;  // the split points the rule may take
    for (int64_t m = 128; m + 128 <= n; m += 128) cands.push_back(m);
    ASSERT_EQ(s.m % 128, 0);
    ASSERT_GE(s.m, 0);
    ASSERT_LE(s.m, n);
    if (!s.split()) {
      EXPECT_DOUBLE_EQ(s.a_us, own);
      EXPECT_EQ(s.b_us, 0);
    }
    if (c_dkv == 0 || cands.empty()) {
      EXPECT_FALSE(s.split()) << "nothing returns, or no two parts of 128 rows";
      continue;
    }
    // The rule: the largest candidate whose B covers the return, else the smallest; kept if the model says faster.
    int64_t rule = cands.front();
    for (int64_t m : cands)
      if (part_time(own, call, P - prefix[size_t(m)], P) >= c_dkv) rule = m;
    const double a = part_time(own, call, prefix[size_t(rule)], P);
    const double b = part_time(own, call, P - prefix[size_t(rule)], P);
    const double with = std::max(a, c_kv) + std::max(b, c_dkv), without = std::max(own, c_kv) + c_dkv;
    EXPECT_EQ(s.m, with < without ? rule : 0);
    if (!s.split()) continue;
    ++splits;
    EXPECT_GE(s.m, 128);
    EXPECT_LE(s.m + 128, n);
    EXPECT_NEAR(s.a_us, a, 1e-9 * own);
    EXPECT_NEAR(s.b_us, b, 1e-9 * own);
    EXPECT_NEAR(s.a_us + s.b_us, own + call, 1e-9 * own) << "a split pays one more call";
    bool coverable = false;
    for (int64_t m : cands) coverable |= part_time(own, call, P - prefix[size_t(m)], P) >= c_dkv;
    if (coverable) {
      EXPECT_GE(s.b_us, c_dkv) << "part B covers the return when some split point can";
      if (s.m + 256 <= n) {  // the next point up leaves B short: B is no larger than it must be
        EXPECT_LT(part_time(own, call, P - prefix[size_t(s.m + 128)], P), c_dkv);
      }
    } else {
      ++uncovered;
      EXPECT_EQ(s.m, 128) << "no point covers the return: B as large as it gets";
    }
    // Within one key tile's work of the best split point the model knows (the rule's rounding).
    double best = without, tile = 0;
    for (int64_t m : cands) {
      best = std::min(best, std::max(part_time(own, call, prefix[size_t(m)], P), c_kv) +
                                std::max(part_time(own, call, P - prefix[size_t(m)], P), c_dkv));
      tile = std::max(tile, (own - call) * double(prefix[size_t(m)] - prefix[size_t(m - 128)]) / double(P));
    }
    EXPECT_LE(with, best + tile + 1e-9 * own);
  }
  EXPECT_GT(splits, 50) << "the trials should split often";
  EXPECT_GT(uncovered, 0) << "and sometimes with no point covering the return";
}

TEST(GatherOwnSplit, WorkedCaseAndCasesThatDoNotSplit) {
  // 512 keys of one pair each (P = 512), own 1000 us of which call 100: 225 us per 128 keys. The return, 300 us, is
  // covered by B = keys [384, 512): 100 + 225 = 325 us; A = 100 + 3 x 225 = 775 us. Around the gathered call:
  // split max(775, 200) + max(325, 300) = 1100 us < one call max(1000, 200) + 300 = 1300 us.
  const std::vector<int64_t> ones = key_tile_sums(std::vector<int64_t>(512, 1));  // (4) of 128
  const OwnBwdSplit s = choose_own_bwd_split(ones, 512, 1000, 100, 200, 300);
  EXPECT_EQ(s.m, 384);
  EXPECT_DOUBLE_EQ(s.a_us, 775);
  EXPECT_DOUBLE_EQ(s.b_us, 325);
  // A return of 600 us takes two tiles: B = keys [256, 512) = 550 us < 600, so the smallest point, m = 128:
  // B = 775, A = 325; split max(325, 200) + max(775, 600) = 1100 < 1000 + 600.
  EXPECT_EQ(choose_own_bwd_split(ones, 512, 1000, 100, 200, 600).m, 128);
  EXPECT_FALSE(choose_own_bwd_split(ones, 512, 1000, 100, 200, 0).split()) << "nothing returns";
  EXPECT_FALSE(choose_own_bwd_split({128, 127}, 255, 1000, 100, 200, 300).split()) << "n < 256";
  EXPECT_FALSE(choose_own_bwd_split({0, 0, 0, 0}, 512, 1000, 100, 200, 300).split()) << "no pair";
  // 300 rows: the only point is 128 (B = rows [128, 300) >= 128 rows; 256 would leave B 44 rows).
  EXPECT_EQ(choose_own_bwd_split({128, 128, 44}, 300, 1000, 100, 200, 300).m, 128);
  // A short own call: 150 us of which 100 the call. Split: A = 100 + 50 x 3/4 = 137.5, B = 112.5 (covers 100);
  // max(137.5, 20) + max(112.5, 100) = 250 > one call 150 + 100 = 250: not faster, so no split.
  EXPECT_FALSE(choose_own_bwd_split(ones, 512, 150, 100, 20, 100).split()) << "the extra call costs what it hides";
}

TEST(GatherOwnSplit, TimeFromCallsSplitFormula) {
  // Three ranks: rank 0 sends 100 rows to rank 1, rank 2 neither sends nor receives. One K|V row is 2 x 1 x 1 x 2 = 4
  // bytes, one dK|dV row 8; the link moves 2 bytes/us after 10 us: C_kv = 10 + 400 / 2 = 210 us,
  // C_dkv = 10 + 800 / 2 = 410 us.
  KvGatherPlan plan;
  plan.cp = 3, plan.n = 256;
  plan.recv_rows = {0, 100, 0};
  plan.send_rows = {100, 0, 0};
  plan.rows = {0, 0, 0, 100, 0, 0, 0, 0, 0};
  plan.pieces.assign(3, {});
  RingShape shape;
  shape.heads = 1, shape.kv_heads = 1, shape.head_dim = 1, shape.dtype_bytes = 2, shape.dkv_wire_bytes = 4;
  LinkModel link;
  link.bytes_per_us = 2, link.hop_latency_us = 10;
  ASSERT_DOUBLE_EQ(gather_exchange_us(plan, shape, false, link), 210);
  ASSERT_DOUBLE_EQ(gather_exchange_us(plan, shape, true, link), 410);
  GatherCallTimes calls;
  calls.own_fwd = {300, 100, 400};
  calls.gathered_fwd = {0, 250, 0};
  calls.own_bwd_a = {500, 150, 700};  // rank 0 split (A 500, B 300); ranks 1 and 2 one call
  calls.own_bwd_b = {300, 0, 0};
  calls.gathered_bwd = {0, 200, 0};
  const RingTimePrediction p = gather_time_from_calls(calls, plan, shape, link);
  // Forward: rank 0 300 (receives nothing), rank 1 max(100, 210) + 250 = 460, rank 2 400.
  EXPECT_DOUBLE_EQ(p.fwd_us, 460);
  EXPECT_DOUBLE_EQ(p.fwd_compute_us, 400);
  // Backward: rank 0 500 + 0 + max(300, 410) = 910 (its rows' dK/dV come back); rank 1 max(150, 210) + 200 +
  // max(0, 410) = 820; rank 2 700 (no row comes or goes: no wait; charged the return it would be 1110).
  EXPECT_DOUBLE_EQ(p.bwd_us, 910);
  EXPECT_DOUBLE_EQ(p.bwd_compute_us, 800);  // rank 0: 500 + 300
  // Rank 0 as one call of A + B before the return: 800 + 410 = 1210 is the path.
  calls.own_bwd_a[0] = 800, calls.own_bwd_b[0] = 0;
  EXPECT_DOUBLE_EQ(gather_time_from_calls(calls, plan, shape, link).bwd_us, 1210);
}

TEST(GatherOwnSplit, PredictionSplitsWhereTheReturnIsExposed) {
  // Long documents cut over 8 contiguous ranks: the later ranks receive many rows, and GQA makes the return short
  // against the own calls, so some rank splits; the path is then no longer than with one own call, and shorter.
  std::mt19937_64 rng(99);
  const int cp = 8;
  const int64_t T = int64_t(cp) * 8192;
  const std::vector<int64_t> starts = random_doc_starts(rng, T, 30000);
  const std::vector<int64_t> order = layout_ring_order(Layout::contiguous, T, cp);
  const std::vector<RingSpan> spans = ring_spans_from_order(order, cp);
  const KvGatherPlan plan = kv_gather_plan_for_spans(document_begins(starts), spans, cp);
  const KvGatherTiles tiles = kv_gather_tiles(starts, spans, plan, cp);
  std::vector<int64_t> natural(static_cast<size_t>(T));
  std::iota(natural.begin(), natural.end(), int64_t(0));
  RingShape shape;
  shape.heads = 32, shape.kv_heads = 4;
  const RingTimePrediction p = predict_gather_time(tiles, plan, ring_tile_cost(starts, natural, 1), shape);
  // The same calls with every own backward as one call: the kernel model's time of the whole own call.
  const KernelTimeModel fwd = gather_kernel_time_model(false, 128), bwd = gather_kernel_time_model(true, 128);
  GatherCallTimes one;
  int split = 0;
  for (int r = 0; r < cp; ++r) {
    const size_t i = size_t(r * cp + r);
    auto call = [&](const RingTileCost& c, const KernelTimeModel& m) {
      return c.runs[i] ? call_time_us(m, c.full_tiles[i], c.partial_tiles[i], c.active[i], shape.heads) : 0.0;
    };
    one.own_fwd.push_back(call(tiles.own, fwd));
    one.gathered_fwd.push_back(call(tiles.gathered, fwd));
    one.own_bwd_a.push_back(call(tiles.own, bwd));
    one.own_bwd_b.push_back(0);
    one.gathered_bwd.push_back(call(tiles.gathered, bwd));
    const OwnBwdSplit s = predict_own_bwd_split(tiles, plan, r, shape);
    if (s.split()) {
      ++split;
      EXPECT_NEAR(s.a_us + s.b_us, one.own_bwd_a.back() + bwd.call_us, 1e-6) << "rank " << r;
    } else {
      EXPECT_DOUBLE_EQ(s.a_us, one.own_bwd_a.back()) << "rank " << r;
    }
  }
  ASSERT_GT(split, 0) << "no rank split its own call";
  const RingTimePrediction q = gather_time_from_calls(one, plan, shape);
  EXPECT_DOUBLE_EQ(p.fwd_us, q.fwd_us);
  EXPECT_LT(p.bwd_us, q.bwd_us) << "the split hides part of the return";
  EXPECT_GE(p.bwd_compute_us, q.bwd_compute_us) << "a split adds a call's cost to the compute";
  // A batch of two copies of the sample: the same pairs doubled, the tile terms and the exchanges doubled.
  const KvGatherTiles two_tiles[2] = {tiles, tiles};
  const KvGatherPlan two_plans[2] = {plan, plan};
  for (int r = 0; r < cp; ++r) {
    std::vector<int64_t> pairs = tiles.own_key_tile_pairs[size_t(r)];
    for (int64_t& x : pairs) x *= 2;
    const OwnBwdSplit b2 = own_bwd_split_for_batch(two_tiles, two_plans, 2, r, pairs, shape);
    const double own2 = 2 * one.own_bwd_a[size_t(r)] - bwd.call_us;  // one call over both samples
    EXPECT_NEAR(b2.split() ? b2.a_us + b2.b_us - bwd.call_us : b2.a_us, own2, 1e-6) << "rank " << r;
  }
}

// own_bwd_part on the CPU: part A then part B against one attn_bwd_block_fresh over every key, for one sample (views)
// and two (key ranges), with dq_acc starting from fresh values (both add) and dk / dv poisoned (both overwrite).
void check_parts(int64_t B, int64_t m, uint64_t seed) {
  const int64_t n = 200, H = 4, Hkv = 2, D = 8;
  SCOPED_TRACE("B " + std::to_string(B) + " m " + std::to_string(m));
  // Documents per sample (positions 0..n-1 in row order): sample 0 edges at 37, 127, 132; sample 1 one document.
  const std::vector<std::vector<int64_t>> lengths = {{37, 90, 5, 68}, {n}};
  std::vector<int64_t> pos(size_t(B * n)), start(size_t(B * n));  // (B, n)
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> s = doc_starts_from_lengths(lengths[size_t(b)], n);
    for (int64_t i = 0; i < n; ++i) pos[size_t(b * n + i)] = i, start[size_t(b * n + i)] = s[size_t(i)];
  }
  AttnMask own;
  own.docs.q_pos = own.docs.k_pos = pos.data();
  own.docs.q_doc_start = start.data();
  own.docs.q_stride = own.docs.k_stride = n;
  test::HostTensor q = test::random_f32({B, n, H, D}, seed, -2.f, 2.f);
  test::HostTensor k = test::random_f32({B, n, Hkv, D}, seed + 1, -2.f, 2.f);
  test::HostTensor v = test::random_f32({B, n, Hkv, D}, seed + 2);
  test::HostTensor dout = test::random_f32({B, n, H, D}, seed + 3);
  test::HostTensor out = test::f32({B, n, H, D}), lse = test::f32({B, H, n}), delta = test::f32({B, H, n});
  test::HostTensor acc = test::f32({B, H, n, D}), mm = test::f32({B, H, n}), l = test::f32({B, H, n});
  AttnState st{acc.t, mm.t, l.t};
  attn_fwd_whole(q, k, v, st, own, out, lse);
  attn_bwd_delta(out, dout, delta);
  test::HostTensor dq1 = test::random_f32({B, n, H, D}, seed + 4), dk1 = test::f32({B, n, Hkv, D}),
                   dv1 = test::f32({B, n, Hkv, D});
  test::HostTensor dq2 = test::random_f32({B, n, H, D}, seed + 4), dk2 = test::f32({B, n, Hkv, D}),
                   dv2 = test::f32({B, n, Hkv, D});
  test::poison(dk1), test::poison(dv1), test::poison(dk2), test::poison(dv2);
  attn_bwd_block_fresh(q, k, v, dout, lse, delta, dq1, dk1, dv1, own);
  own_bwd_part(OwnBwdPart::a, m, q, k, v, dout, lse, delta, dq2, dk2, dv2, own);
  own_bwd_part(OwnBwdPart::b, m, q, k, v, dout, lse, delta, dq2, dk2, dv2, own);
  ASSERT_FALSE(test::any_nan(dk2) || test::any_nan(dv2) || test::any_nan(dq2)) << "a row left unwritten";
  EXPECT_LT(test::rel_err(dq2, dq1.to_double()), 1e-6);
  EXPECT_LT(test::rel_err(dk2, dk1.to_double()), 1e-6);
  EXPECT_LT(test::rel_err(dv2, dv1.to_double()), 1e-6);
}

TEST(GatherOwnSplit, TwoPartsEqualOneCallOnCpu) {
  for (int64_t B : {1, 2})
    for (int64_t m : {0, 1, 37, 64, 100, 128, 199, 200}) check_parts(B, m, 1000 + uint64_t(B * 1000 + m));
}

}  // namespace
}  // namespace rt
