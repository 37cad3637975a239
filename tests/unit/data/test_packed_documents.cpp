// The defining property of packed documents (data.positions: document), on a CPU model: a packed sample's
// per-token losses equal those of its documents run one at a time, and the gradient of the packed summed loss
// equals the sum of the documents' summed-loss gradients (fp32, 1e-5 relative); two samples per batch with
// different documents (positions differ per sample). And a sample that is one document gives the same losses
// and gradients as no document mask.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/plan/trainer_setup.h"
#include "tests/unit/test_model_util.h"
#include "tests/unit/test_util.h"

namespace rt {
namespace {
using modeltest::LocalModel;

struct Doc {
  int64_t sample, start, length;
};

// One packed batch of B samples of T tokens, cut into documents of the given lengths per sample: positions
// restart at each document, the target crossing into the next document is dropped, the document mask is set.
Batch packed_batch(const std::vector<std::vector<int64_t>>& lengths, int64_t T, int vocab, uint64_t seed,
                   std::vector<Doc>* docs) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  const int64_t B = int64_t(lengths.size());
  Batch b;
  b.batch = B, b.tokens_per_rank = T;
  for (int64_t s = 0; s < B; ++s) {
    std::vector<int32_t> seq(static_cast<size_t>(T));
    for (auto& t : seq) t = tok(rng);
    std::vector<int64_t> start(static_cast<size_t>(T));
    int64_t p = 0;
    for (int64_t len : lengths[size_t(s)]) {
      docs->push_back({s, p, len});
      for (int64_t t = 0; t < len; ++t) start[size_t(p + t)] = p;
      p += len;
    }
    EXPECT_EQ(p, T);
    for (int64_t i = 0; i < T; ++i) {
      const bool crossing = i + 1 < T && start[size_t(i + 1)] == i + 1;
      b.tokens.push_back(seq[size_t(i)]);
      b.targets.push_back(i + 1 < T && !crossing ? seq[size_t(i + 1)] : -1);
      b.groups.push_back(0);
      b.positions.push_back(int32_t(i - start[size_t(i)]));
      b.doc_pos.push_back(i);
      b.doc_start.push_back(start[size_t(i)]);
    }
  }
  return b;
}

// Document d of a packed batch as a batch of its own: one sample of d.length tokens, positions from 0, no mask.
Batch doc_batch(const Batch& packed, const Doc& d) {
  Batch b;
  b.batch = 1, b.tokens_per_rank = d.length;
  const int64_t T = packed.tokens_per_rank;
  for (int64_t i = 0; i < d.length; ++i) {
    const size_t k = size_t(d.sample * T + d.start + i);
    b.tokens.push_back(packed.tokens[k]);
    b.targets.push_back(packed.targets[k]);
    b.groups.push_back(0);
    b.positions.push_back(int32_t(i));
  }
  return b;
}

std::vector<float> grads_of(const Model& m) {
  return std::vector<float>(m.grads().ptr<float>(), m.grads().ptr<float>() + m.grads().numel());
}

double rel(const std::vector<double>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  return std::sqrt(num / den);
}

TEST(PackedDocuments, LossesAndGradientsEqualTheDocumentsRunOneAtATime) {
  const ModelConfig cfg = modeltest::small_config("swiglu", 2, false);
  ModelOptions opt;
  opt.per_sample_positions = true;  // data.positions: document: a RoPE table row per sample and token
  const int64_t T = 24;
  std::vector<Doc> docs;
  const Batch packed = packed_batch({{5, 1, 10, 8}, {12, 3, 9}}, T, cfg.vocab_size, 5, &docs);
  LocalModel lp(cfg, opt, 2, T);
  modeltest::randomize_weights(*lp.model, 7, 0.3f);
  // global_count = 1: the gradient of the summed loss.
  const std::vector<float> losses = lp.model->step(packed, 1.0, true);
  const std::vector<float> g_packed = grads_of(*lp.model);
  std::vector<double> g_sum(g_packed.size(), 0.0);
  int compared = 0;
  for (const Doc& d : docs) {
    const Batch one = doc_batch(packed, d);
    LocalModel ld(cfg, opt, 1, d.length);
    modeltest::randomize_weights(*ld.model, 7, 0.3f);  // the same weights
    const std::vector<float> l1 = ld.model->step(one, 1.0, true);
    for (int64_t i = 0; i < d.length; ++i) {
      const size_t k = size_t(d.sample * T + d.start + i);
      if (packed.targets[k] < 0) continue;
      EXPECT_NEAR(losses[k], l1[size_t(i)], 1e-5 * std::max(1.f, std::abs(l1[size_t(i)])))
          << "sample " << d.sample << " position " << d.start + i;
      ++compared;
    }
    const std::vector<float> g1 = grads_of(*ld.model);
    for (size_t i = 0; i < g1.size(); ++i) g_sum[i] += g1[i];
  }
  EXPECT_EQ(compared, 2 * T - 7 /* document ends, sample ends */);
  EXPECT_LT(rel(g_sum, g_packed), 1e-5);

  // Without the mask (documents: none) the packed sample would attend across documents: the losses differ, so
  // the comparison above can fail.
  Batch unmasked = packed;
  unmasked.doc_pos.clear();
  unmasked.doc_start.clear();
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t i = 0; i < T; ++i) unmasked.positions[size_t(s * T + i)] = int32_t(i);
  const std::vector<float> l_unmasked = lp.model->step(unmasked, 1.0, false);
  double diff = 0;
  for (size_t k = 0; k < losses.size(); ++k) diff += std::abs(double(losses[k]) - l_unmasked[k]);
  EXPECT_GT(diff, 1e-3);
}

TEST(PackedDocuments, SingleDocumentEqualsNoDocumentMask) {
  const ModelConfig cfg = modeltest::small_config("gelu", 4, true);
  ModelOptions opt;
  const int64_t T = 20;
  std::vector<Doc> docs;
  const Batch one_doc = packed_batch({{T}, {T}}, T, cfg.vocab_size, 9, &docs);
  Batch none = one_doc;
  none.doc_pos.clear();
  none.doc_start.clear();
  LocalModel lm(cfg, opt, 2, T);
  modeltest::randomize_weights(*lm.model, 3, 0.3f);
  const std::vector<float> a = lm.model->step(one_doc, 1.0, true);
  const std::vector<float> ga = grads_of(*lm.model);
  const std::vector<float> b = lm.model->step(none, 1.0, true);
  const std::vector<float> gb = grads_of(*lm.model);
  // Bit-identical on the CPU: a row's visible keys in a document-edge tile are one run, summed exactly as the
  // causal path sums its visible prefix (attn_fwd_block), and the RoPE table holds the same rows in both modes.
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], b[k]) << k;
  EXPECT_EQ(ga, gb);
}

// The RoPE table follows data.positions: shared positions (global) give one table of n rows that every sample
// reads; per-sample positions (document) give B*n rows, counted by the measuring arena (so `ringtrain plan`
// counts them). A model built for shared positions refuses a batch whose samples' positions differ, naming the
// setting, instead of rotating sample 1 by sample 0's positions.
TEST(PackedDocuments, RopeTableRowsFollowDataPositions) {
  const ModelConfig cfg = modeltest::small_config("gelu", 4, true);
  const int64_t B = 3, T = 64, D = cfg.d_model / cfg.n_head;
  auto measured = [&](bool per_sample) {
    LocalComm tp, cp, dp_cp;
    ModelComms comms;
    comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp;
    ModelOptions opt;
    opt.per_sample_positions = per_sample;
    Arena measuring = Arena::measuring(Device::cpu());
    Model m(cfg, opt, B, T, comms, measuring);
    return int64_t(measuring.peak());
  };
  const int64_t table_rows_bytes = (B - 1) * T * D * int64_t(sizeof(float));  // (B-1)*n more rows of D/2 (cos, sin)
  EXPECT_EQ(measured(true) - measured(false), table_rows_bytes);

  std::vector<Doc> docs;
  const Batch packed = packed_batch({{40, 24}, {10, 54}, {64}}, T, cfg.vocab_size, 4, &docs);
  LocalModel shared(cfg, ModelOptions{}, B, T);
  try {
    shared.model->step(packed, 1.0, false);
    ADD_FAILURE() << "a batch with per-sample positions was accepted by a model built for shared positions";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.positions: document"), std::string::npos) << e.what();
  }
  ModelOptions per_sample;
  per_sample.per_sample_positions = true;
  LocalModel lp(cfg, per_sample, B, T);
  modeltest::randomize_weights(*lp.model, 2, 0.3f);
  const std::vector<float> losses = lp.model->step(packed, 1.0, false);
  for (float l : losses) ASSERT_TRUE(std::isfinite(l));
  // A second batch with other documents rebuilds the table: the first document of sample 0 run alone matches.
  std::vector<Doc> docs2;
  const Batch packed2 = packed_batch({{7, 57}, {64}, {30, 34}}, T, cfg.vocab_size, 6, &docs2);
  const std::vector<float> losses2 = lp.model->step(packed2, 1.0, false);
  for (const Doc& d : {docs2[1], docs2[4]}) {  // sample 0's second document, sample 2's second
    LocalModel ld(cfg, ModelOptions{}, 1, d.length);
    modeltest::randomize_weights(*ld.model, 2, 0.3f);
    const std::vector<float> l1 = ld.model->step(doc_batch(packed2, d), 1.0, false);
    for (int64_t i = 0; i + 1 < d.length; ++i)
      EXPECT_NEAR(losses2[size_t(d.sample * T + d.start + i)], l1[size_t(i)], 1e-5 * std::max(1.f, l1[size_t(i)]))
          << "sample " << d.sample << " position " << d.start + i;
  }
}

// Issue 31 row 1: with the defaults (documents: eot, layout: auto -> balanced, positions: global) at cp >= 2,
// balanced lays out each sample by its own documents, so a rank's samples hold different positions. The model
// must then take a RoPE row per sample and token; a model built for shared positions under balanced is refused
// when it is built, never mid-run.
TEST(PackedDocuments, BalancedLayoutTakesPerSamplePositions) {
  for (const int cp : {2, 4}) {
    Config c;
    c.data.source = "shards";
    c.data.documents = "eot";
    c.parallel.cp = cp;
    ASSERT_EQ(resolved_layout(c), "balanced");
    ASSERT_EQ(c.data.positions, "global");
    EXPECT_TRUE(model_options(c, Device::cpu()).per_sample_positions) << "cp=" << cp;
    c.parallel.layout = "zigzag";  // a fixed layout: every sample has the same positions
    EXPECT_FALSE(model_options(c, Device::cpu()).per_sample_positions) << "cp=" << cp;
  }
  const ModelConfig cfg = modeltest::small_config("gelu", 4, true);
  ModelOptions shared;
  shared.layout = Layout::balanced;
  const std::string error = test::error_of([&] { LocalModel m(cfg, shared, 2, 64); });
  EXPECT_NE(error.find("parallel.layout=balanced"), std::string::npos) << error;
}

}  // namespace
}  // namespace rt
