// attn_bwd_work_list on CUDA (kernels/cuda/attention/attn_bwd_work_list.cu: bwd v5's list mode) over
// doc_bwd_work_list's list (parallel/schedule/doc_work_list.h), against the fp64 gradients over the key list
// (tests/unit/kernels/two_kv_case.h), the CPU op on the same bf16 values, and attn_bwd_block_fresh_two_kv on the same
// device inputs. Cases: B = 2 throughout; GQA (H = 8, Hkv = 2: the H = 32 / Hkv = 8 group of 4 scaled down) at D = 128
// with odd document lengths, own rows ending mid-tile (a gap before source 2) and source 2 padded with rows no query
// sees (whole key tiles with no segment: dK / dV stored as zero); documents of length 1 at D = 64; one document across
// the whole key list; short documents (gathered key tiles seen by query tiles at both ends of a chunk: tasks of
// several segments; source 2 padded past a TMA box); the rank's own rows shuffled (every tile holds rows of many
// documents); one source. Inputs fresh random bf16 values, dk / dv / dk2 / dv2 NaN-poisoned, dq_acc starting from
// random values (the op adds). Checks:
//   * no NaN; every gradient within 1e-2 relative (L2) of fp64 (P and dS are bf16 in the MMAs) and of the CPU op (an
//     absolute bound where the fp64 gradient is exactly zero: documents of length 1 have dQ = dK = 0);
//   * dK / dV bitwise attn_bwd_block_fresh_two_kv's with bwd v5's items whole (bwd_doc_pieces off): the same consumer
//     code over the same query tiles per key tile (attn_bwd_work_list.cu says why); dQ within 1e-5 (unordered adds);
//   * the list's order changes no dK / dV bit (a shuffled list), nor does cutting every segment into one-tile segments;
//   * with RT_ATTN_WORK_LIST_CHECK=1 the op refuses a list missing a key tile and a split task, by name;
//   * attn_bwd_work_list_runs says yes to what the op runs and no to f32, D = 96, too few rows.
// Skips without a CUDA device, or without bwd v5 (a device other than compute capability 9.0 with sm_90a).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/attn_bwd_work_list_runs.h"
#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "parallel/schedule/doc_work_list.h"
#include "tests/gpu/attention_test_util.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"
#include "tests/unit/test_reference.h"

namespace rt::test {
namespace {

#define RT_REQUIRE_BWD_V5(D)                                                                                \
  do {                                                                                                      \
    RT_REQUIRE_CUDA();                                                                                      \
    if (!cuda::attn_bwd_wgmma_supported(0, D)) GTEST_SKIP() << "bwd v5 needs compute capability 9.0 (sm_90a)"; \
  } while (0)

std::vector<float> to_f32(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

std::vector<float> random_values(int64_t count, uint64_t seed) {
  const HostTensor h = random_f32({count}, seed);
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t e = 0; e < count; ++e) v[size_t(e)] = round_bf16(h[e]);
  return v;
}

struct Grads {
  std::vector<float> dq, dk1, dv1, dk2, dv2;  // dq: minus its starting values; one source: dk2 / dv2 empty
};

// The fp64 reference and the values both backends read.
struct Reference {
  std::vector<float> dout;                  // (B, n, H, D)
  std::vector<double> lse, delta;           // (B, H, n)
  std::vector<double> dq, dk1, dv1, dk2, dv2;
};

Reference two_source_reference(const TwoKvCase& c, uint64_t seed) {
  Reference r;
  r.dout = random_values(c.B * c.n * c.H * c.D, seed);
  TwoKvGrads g = two_kv_grads(c, r.dout);
  r.lse = std::move(g.lse), r.delta = std::move(g.delta), r.dq = std::move(g.dq);
  r.dk1 = std::move(g.dk1), r.dv1 = std::move(g.dv1), r.dk2 = std::move(g.dk2), r.dv2 = std::move(g.dv2);
  return r;
}

// One source: the queries against their own keys only (mask over k1's n rows).
Reference one_source_reference(const TwoKvCase& c, uint64_t seed) {
  Reference r;
  r.dout = random_values(c.B * c.n * c.H * c.D, seed);
  const AttnShape shape{c.B, c.n, c.n, c.H, c.Hkv, c.D};
  std::vector<double> out;  // (B, n, H, D)
  attention_forward_ref(shape, c.q.data(), c.k1.data(), c.v1.data(), c.mask(), out, r.lse);
  r.delta.assign(size_t(c.B * c.H * c.n), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.D; ++d) {
          const size_t e = size_t(((b * c.n + i) * c.H + h) * c.D + d);
          r.delta[size_t((b * c.H + h) * c.n + i)] += double(r.dout[e]) * out[e];
        }
  attention_backward_ref(shape, c.q.data(), c.k1.data(), c.v1.data(), r.dout.data(), r.lse.data(), r.delta.data(),
                         c.mask(), r.dq, r.dk1, r.dv1);
  return r;
}

enum class Via { list, two_kv };

// On the GPU: the list op (`words`) or attn_bwd_block_fresh_two_kv (one source: attn_bwd_block_fresh).
Grads run_gpu(const TwoKvCase& c, const DeviceCase& d, const Reference& ref, Via via, bool one_source,
              const std::vector<int32_t>* words = nullptr) {
  Buffer d_out(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}), lse(gpu(), DType::f32, {c.B, c.H, c.n}),
      delta(gpu(), DType::f32, {c.B, c.H, c.n}), dq(gpu(), DType::f32, {c.B, c.n, c.H, c.D}),
      dk1(gpu(), DType::f32, {c.B, c.n, c.Hkv, c.D}), dv1(gpu(), DType::f32, {c.B, c.n, c.Hkv, c.D}),
      dk2(gpu(), DType::f32, {c.B, c.R, c.Hkv, c.D}), dv2(gpu(), DType::f32, {c.B, c.R, c.Hkv, c.D});
  upload(d_out.t(), ref.dout);
  upload(lse.t(), to_f32(ref.lse));
  upload(delta.t(), to_f32(ref.delta));
  const std::vector<float> dq_start = random_values(c.B * c.n * c.H * c.D, 19);
  upload(dq.t(), dq_start);
  for (Buffer* b : {&dk1, &dv1, &dk2, &dv2}) poison(b->t());
  const Tensor none;
  if (via == Via::list) {
    Buffer list(gpu(), DType::i32, {int64_t(words->size())});  // (n_words) i32
    upload_i32(list.t(), *words);
    if (one_source)
      attn_bwd_work_list(d.q.t(), d.k1.t(), d.v1.t(), none, none, d_out.t(), lse.t(), delta.t(), dq.t(), dk1.t(),
                         dv1.t(), none, none, d.mask, list.t());
    else
      attn_bwd_work_list(d.q.t(), d.k1.t(), d.v1.t(), d.k2.t(), d.v2.t(), d_out.t(), lse.t(), delta.t(), dq.t(),
                         dk1.t(), dv1.t(), dk2.t(), dv2.t(), d.mask, list.t());
    download(dq.t());  // the call completed (the list buffer is freed after it)
  } else if (one_source) {
    attn_bwd_block_fresh(d.q.t(), d.k1.t(), d.v1.t(), d_out.t(), lse.t(), delta.t(), dq.t(), dk1.t(), dv1.t(), d.mask);
  } else {
    attn_bwd_block_fresh_two_kv(d.q.t(), d.k1.t(), d.v1.t(), d.k2.t(), d.v2.t(), d_out.t(), lse.t(), delta.t(),
                                dq.t(), dk1.t(), dv1.t(), dk2.t(), dv2.t(), d.mask);
  }
  Grads r{download(dq.t()), download(dk1.t()), download(dv1.t()), {}, {}};
  if (!one_source) r.dk2 = download(dk2.t()), r.dv2 = download(dv2.t());
  for (size_t e = 0; e < r.dq.size(); ++e) r.dq[e] -= dq_start[e];
  return r;
}

// The CPU op on the same (bf16-representable) values in f32.
Grads run_cpu(const TwoKvCase& c, const Reference& ref, bool one_source, const std::vector<int32_t>& words) {
  const HostTensor q = host(c.q, {c.B, c.n, c.H, c.D}), k1 = host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                   v1 = host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                   v2 = host(c.v2, {c.B, c.R, c.Hkv, c.D}), d_out = host(ref.dout, {c.B, c.n, c.H, c.D}),
                   lse = host(to_f32(ref.lse), {c.B, c.H, c.n}), delta = host(to_f32(ref.delta), {c.B, c.H, c.n});
  HostTensor dq = f32({c.B, c.n, c.H, c.D}), dk1 = f32({c.B, c.n, c.Hkv, c.D}), dv1 = f32({c.B, c.n, c.Hkv, c.D}),
             dk2 = f32({c.B, c.R, c.Hkv, c.D}), dv2 = f32({c.B, c.R, c.Hkv, c.D});
  for (HostTensor* t : {&dq, &dk1, &dv1, &dk2, &dv2}) poison(*t);
  fill(dq.t, 0.f);
  const HostTensor list = work_list_words_tensor(words);
  const Tensor none;
  if (one_source)
    attn_bwd_work_list(q, k1, v1, none, none, d_out, lse, delta, dq, dk1, dv1, none, none, c.mask(), list);
  else
    attn_bwd_work_list(q, k1, v1, k2, v2, d_out, lse, delta, dq, dk1, dv1, dk2, dv2, c.mask(), list);
  const auto vec = [](const HostTensor& t) { return std::vector<float>(t.f(), t.f() + t.numel()); };
  Grads r{vec(dq), vec(dk1), vec(dv1), {}, {}};
  if (!one_source) r.dk2 = vec(dk2), r.dv2 = vec(dv2);
  return r;
}

void expect_close(const Grads& got, const Grads& want, double tol, const std::string& what) {
  EXPECT_LT(rel_error(got.dq, want.dq), tol) << what << ": dQ " << worst_mismatch(got.dq, want.dq);
  EXPECT_LT(rel_error(got.dk1, want.dk1), tol) << what << ": dK " << worst_mismatch(got.dk1, want.dk1);
  EXPECT_LT(rel_error(got.dv1, want.dv1), tol) << what << ": dV " << worst_mismatch(got.dv1, want.dv1);
  if (!want.dk2.empty()) {
    EXPECT_LT(rel_error(got.dk2, want.dk2), tol) << what << ": dK2 " << worst_mismatch(got.dk2, want.dk2);
    EXPECT_LT(rel_error(got.dv2, want.dv2), tol) << what << ": dV2 " << worst_mismatch(got.dv2, want.dv2);
  }
}

void expect_no_nan(const Grads& g, const std::string& what) {
  for (const auto* x : {&g.dq, &g.dk1, &g.dv1, &g.dk2, &g.dv2})
    for (float e : *x) ASSERT_FALSE(std::isnan(e)) << what << ": NaN (a row left unwritten or a bad read)";
}

void expect_same_dkv_bits(const Grads& a, const Grads& b, const std::string& what) {
  EXPECT_TRUE(a.dk1 == b.dk1 && a.dv1 == b.dv1) << what << ": source 1's dK / dV bits differ";
  EXPECT_TRUE(a.dk2 == b.dk2 && a.dv2 == b.dv2) << what << ": source 2's dK / dV bits differ";
}

// The list for the case (one source: own keys only), with at least one task of several segments when asked.
AttnBwdWorkList list_for(const TwoKvCase& c, bool one_source) {
  DocWorkListInputs in = work_list_inputs_of(c);
  if (one_source) in.list_rows = c.n, in.k_stride = c.list;
  const AttnBwdWorkList list = doc_bwd_work_list(in);
  const std::string problem = doc_bwd_work_list_problem(list, in);
  EXPECT_TRUE(problem.empty()) << problem;
  return list;
}

void check_case(const TwoKvCase& c, const std::string& what, bool one_source = false) {
  SCOPED_TRACE(what);
  const AttnBwdWorkList list = list_for(c, one_source);
  ASSERT_GT(list.tasks.size(), 0u);
  const std::vector<int32_t> words = attn_work_list_words(list);
  const auto d = to_device(c);
  const Reference ref = one_source ? one_source_reference(c, 23) : two_source_reference(c, 23);
  const Grads fp64{to_f32(ref.dq), to_f32(ref.dk1), to_f32(ref.dv1), to_f32(ref.dk2), to_f32(ref.dv2)};
  ASSERT_TRUE(attn_bwd_work_list_runs(gpu(), DType::bf16, c.B, c.H, c.Hkv, c.D, c.n, c.n, one_source ? 0 : c.R,
                                      one_source ? c.n : c.list));

  ScopedAttnVariant forced(nullptr, "5");
  cuda::AttnVariantOverride whole_items = cuda::attn_variant_override();
  whole_items.bwd_doc_pieces = false;  // two_kv's items whole: its dK / dV tiles as the list's
  cuda::set_attn_variant_override(whole_items);
  const Grads got = run_gpu(c, *d, ref, Via::list, one_source, &words);
  expect_no_nan(got, "list (GPU)");
  expect_close(got, fp64, 1e-2, "list (GPU) vs fp64");
  const Grads cpu = run_cpu(c, ref, one_source, words);
  expect_no_nan(cpu, "list (CPU)");
  // Where the fp64 gradient is exactly zero (documents of length 1: dS = P (dP - delta) = 0, so dQ and dK are rounding
  // noise on both backends) the CPU's is compared as zero: an absolute bound, as against fp64.
  Grads cpu_or_zero = cpu;
  const auto zero_where_zero = [](std::vector<float>& x, const std::vector<float>& f64) {
    if (std::all_of(f64.begin(), f64.end(), [](float e) { return e == 0.f; })) x = f64;
  };
  zero_where_zero(cpu_or_zero.dq, fp64.dq);
  zero_where_zero(cpu_or_zero.dk1, fp64.dk1);
  zero_where_zero(cpu_or_zero.dv1, fp64.dv1);
  zero_where_zero(cpu_or_zero.dk2, fp64.dk2);
  zero_where_zero(cpu_or_zero.dv2, fp64.dv2);
  expect_close(got, cpu_or_zero, 1e-2, "list (GPU) vs list (CPU)");
  const Grads two_kv = run_gpu(c, *d, ref, Via::two_kv, one_source);
  expect_no_nan(two_kv, "two_kv");
  expect_same_dkv_bits(got, two_kv, "list vs attn_bwd_block_fresh_two_kv");
  EXPECT_LT(rel_error(got.dq, two_kv.dq), 1e-5) << "dQ vs two_kv " << worst_mismatch(got.dq, two_kv.dq);

  AttnBwdWorkList shuffled = list;  // the order is the kernel's schedule, not its result
  std::shuffle(shuffled.tasks.begin(), shuffled.tasks.end(), std::mt19937_64(17));
  const std::vector<int32_t> shuffled_words = attn_work_list_words(shuffled);
  const Grads again = run_gpu(c, *d, ref, Via::list, one_source, &shuffled_words);
  expect_same_dkv_bits(again, got, "shuffled list vs list");
  EXPECT_LT(rel_error(again.dq, got.dq), 1e-5);

  // Every segment cut into one-tile segments: the same query tiles in the same order per key tile (the kernel walks
  // each segment from the list's words), so the same dK / dV bits.
  AttnBwdWorkList cut = list;
  cut.segs.clear();
  for (AttnBwdTask& t : cut.tasks) {
    const int first = int(cut.segs.size());
    for (int g = t.first_seg; g < t.first_seg + t.segs; ++g) {
      const AttnQuerySeg& seg = list.segs[size_t(g)];
      for (int q = 0; q < seg.tiles; ++q) cut.segs.push_back(AttnQuerySeg{seg.first_tile + q, 1, seg.source, 0});
    }
    t.first_seg = first;
    t.segs = int16_t(int(cut.segs.size()) - first);
  }
  const std::vector<int32_t> cut_words = attn_work_list_words(cut);
  const Grads cut_got = run_gpu(c, *d, ref, Via::list, one_source, &cut_words);
  expect_same_dkv_bits(cut_got, got, "one-tile segments vs the list");
  EXPECT_LT(rel_error(cut_got.dq, got.dq), 1e-5);
}

// The case with each sample's own rows (its queries and own keys alike) in a shuffled order: a key tile's keys come
// from far-apart positions, so the query tiles that see it are scattered (tasks of many segments).
void shuffle_own_rows(TwoKvCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t Wq = c.H * c.D, Wk = c.Hkv * c.D;
  for (int64_t b = 0; b < c.B; ++b) {
    std::vector<int64_t> perm(size_t(c.n));  // (n) new row i = old row perm[i]
    for (int64_t i = 0; i < c.n; ++i) perm[size_t(i)] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    const TwoKvCase old = c;
    for (int64_t i = 0; i < c.n; ++i) {
      const int64_t o = perm[size_t(i)];
      c.q_pos[size_t(b * c.n + i)] = old.q_pos[size_t(b * c.n + o)];
      c.q_doc[size_t(b * c.n + i)] = old.q_doc[size_t(b * c.n + o)];
      c.k_pos[size_t(b * c.list + i)] = old.k_pos[size_t(b * c.list + o)];
      std::copy_n(old.q.begin() + (b * c.n + o) * Wq, Wq, c.q.begin() + (b * c.n + i) * Wq);
      std::copy_n(old.k1.begin() + (b * c.n + o) * Wk, Wk, c.k1.begin() + (b * c.n + i) * Wk);
      std::copy_n(old.v1.begin() + (b * c.n + o) * Wk, Wk, c.v1.begin() + (b * c.n + i) * Wk);
      std::copy_n(old.k_list.begin() + (b * c.list + o) * Wk, Wk, c.k_list.begin() + (b * c.list + i) * Wk);
      std::copy_n(old.v_list.begin() + (b * c.list + o) * Wk, Wk, c.v_list.begin() + (b * c.list + i) * Wk);
    }
  }
}

TEST(AttnBwdWorkListCuda, D128GqaOddDocumentsPaddedGatheredRows) {
  RT_REQUIRE_BWD_V5(128);
  // Own rows [300, 700) and [1200, 1500): n = 700 (a gap of 68 rows before source 2); source 2 padded with 300 rows
  // no query sees (two key tiles with no segment).
  TwoKvCase c = make_two_kv_case(2, 8, 2, 128, 2100, 300, 700, 1200, 1500, 17, round_bf16);
  pad_second_source(c, 300, 3, round_bf16);
  check_case(c, "odd documents, padded source 2");
}

TEST(AttnBwdWorkListCuda, D64DocumentsOfLengthOne) {
  RT_REQUIRE_BWD_V5(64);
  const TwoKvCase c =
      make_two_kv_case(2, 4, 2, 64, 900, 0, 300, 500, 640, 8, round_bf16, std::vector<int64_t>(900, 1), 2);
  ASSERT_GE(c.R, 128) << "source 2 must hold a TMA box of rows";
  check_case(c, "documents of length 1");
}

TEST(AttnBwdWorkListCuda, OneDocumentAcrossTheKeyList) {
  RT_REQUIRE_BWD_V5(128);
  check_case(make_two_kv_case(2, 8, 2, 128, 1500, 200, 455, 1000, 1129, 9, round_bf16, {1500}), "one document");
}

TEST(AttnBwdWorkListCuda, ShortDocumentsManySegments) {
  RT_REQUIRE_BWD_V5(64);
  // Source 2 holds the seen keys before, between and after the own chunks in position order, so a gathered key tile
  // is seen by query tiles at both ends of a chunk and not between (tasks of several segments).
  std::mt19937_64 rng(5);
  std::vector<int64_t> lens;
  for (int64_t p = 0; p < 2000; p += lens.back()) lens.push_back(1 + int64_t(rng() % 90));
  TwoKvCase c = make_two_kv_case(2, 4, 1, 64, 2000, 100, 611, 1300, 1517, 3, round_bf16, lens);
  pad_second_source(c, 140, 5, round_bf16);  // source 2 over one TMA box (it held 122 rows)
  int most = 0;
  for (const AttnBwdTask& t : list_for(c, false).tasks) most = std::max(most, int(t.segs));
  EXPECT_GE(most, 2) << "the case should hold tasks of several segments";
  check_case(c, "short documents");
}

TEST(AttnBwdWorkListCuda, ShuffledOwnRows) {
  RT_REQUIRE_BWD_V5(128);
  TwoKvCase c = make_two_kv_case(2, 8, 2, 128, 1800, 200, 640, 1000, 1290, 13, round_bf16);
  shuffle_own_rows(c, 11);
  check_case(c, "shuffled own rows");
}

TEST(AttnBwdWorkListCuda, OneSource) {
  RT_REQUIRE_BWD_V5(128);
  const TwoKvCase c = make_two_kv_case(2, 8, 2, 128, 1400, 150, 380, 900, 1090, 71, round_bf16);
  check_case(c, "one source", /*one_source=*/true);
}

TEST(AttnBwdWorkListCuda, HostCheckRefusesAMissingKeyTileAndASplitTask) {
  RT_REQUIRE_BWD_V5(128);
  const TwoKvCase c = make_two_kv_case(2, 4, 2, 128, 1400, 150, 380, 900, 1090, 5, round_bf16);
  const auto d = to_device(c);
  const Reference ref = two_source_reference(c, 3);
  const AttnBwdWorkList good = list_for(c, false);
  const char* old = std::getenv("RT_ATTN_WORK_LIST_CHECK");
  const std::string saved = old ? old : "";
  setenv("RT_ATTN_WORK_LIST_CHECK", "1", 1);
  const auto run_words = [&](const AttnBwdWorkList& l) {
    const std::vector<int32_t> w = attn_work_list_words(l);
    run_gpu(c, *d, ref, Via::list, false, &w);
  };
  EXPECT_NO_THROW(run_words(good));
  AttnBwdWorkList missing = good;
  missing.tasks.pop_back();
  try {
    run_words(missing);
    ADD_FAILURE() << "a list missing a key tile ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no task"), std::string::npos) << e.what();
  }
  AttnBwdWorkList split = good;
  split.tasks[0].parts = 2;
  EXPECT_THROW(run_words(split), Error);
  if (old) setenv("RT_ATTN_WORK_LIST_CHECK", saved.c_str(), 1);
  else unsetenv("RT_ATTN_WORK_LIST_CHECK");
}

TEST(AttnBwdWorkListCuda, RunsPredicate) {
  EXPECT_TRUE(attn_bwd_work_list_runs(Device::cpu(), DType::f32, 1, 8, 2, 96, 10, 10, 0, 10));
  RT_REQUIRE_CUDA();
  const bool v5 = cuda::attn_bwd_wgmma_supported(0, 128);
  EXPECT_EQ(attn_bwd_work_list_runs(gpu(), DType::bf16, 2, 8, 2, 128, 8192, 8192, 4096, 12288), v5);
  EXPECT_EQ(attn_bwd_work_list_runs(gpu(), DType::bf16, 2, 8, 2, 128, 8192, 8192, 0, 8192), v5) << "one source";
  EXPECT_FALSE(attn_bwd_work_list_runs(gpu(), DType::f32, 2, 8, 2, 128, 8192, 8192, 4096, 12288));
  EXPECT_FALSE(attn_bwd_work_list_runs(gpu(), DType::bf16, 2, 8, 2, 96, 8192, 8192, 4096, 12288)) << "D = 96";
  EXPECT_FALSE(attn_bwd_work_list_runs(gpu(), DType::bf16, 2, 8, 2, 128, 32, 8192, 4096, 12288)) << "Nq < 64";
  EXPECT_FALSE(attn_bwd_work_list_runs(gpu(), DType::bf16, 2, 8, 2, 128, 8192, 100, 4096, 4196)) << "Nk < 128";
  EXPECT_FALSE(attn_bwd_work_list_runs(gpu(), DType::bf16, 2, 8, 2, 128, 8192, 8192, 100, 8292)) << "Nk2 < 128";
}

}  // namespace
}  // namespace rt::test
