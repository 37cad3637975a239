// Generation's prefill (Model::prefill_forward: the blocks only, no LM head over the prompt, on a forward-only model
// that keeps no activations for a backward) gives the logits generation chooses its first token from (the prompt's
// last token through the first decode step against the prefilled cache) equal to the training forward's logits at
// the prompt's last position (one rank, a model built for training, the whole prompt in one forward; its final
// hidden state times the LM head in fp64 on the host).
// Not bit-exact: fp32 on the CPU, equal up to reassociation. The decode step's attention sums the keys in split-KV
// pieces and merges the cp ranks' states, the training forward's flash attention in its own key tiles; the head is
// a float GEMM here and fp64 there. Bound: max |difference| <= 2e-5 x max |logit| (about 100 float roundings).
// Grids: the configured cp = the ranks of this run (1, or 2 as a zigzag ring), one pass and chunked (chunks of 10
// tokens, each sharded over the ranks). Fresh random weights and prompt each run (the seed is printed).
// Runs under mpirun -np 1 and -np 2.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/plan/plan_generate.h"
#include "framework/plan/trainer_setup.h"
#include "kernels/ops.h"
#include "tests/mpi/mpi_world.h"

using namespace rt;

namespace {

using rt::test::sub_world;
using rt::test::world_rank;
using rt::test::world_size;

constexpr int64_t kPrompt = 37;  // tokens; the one-pass prefill runs 36, padded to a multiple of 2 cp

Config make_config(int cp, int64_t seq_len, uint64_t seed) {
  std::ostringstream y;
  y << "model:\n  n_layer: 3\n  d_model: 32\n  n_head: 4\n  n_kv_head: 2\n  vocab_size: 50\n  mlp: swiglu\n"
    << "  d_ff: 48\n  tied_embeddings: false\n"
    << "data:\n  source: copy\n  seq_len: " << seq_len << "\n"
    << "parallel:\n  cp: " << cp << "\n  layout: " << (cp > 1 ? "zigzag" : "contiguous") << "\n"
    << "train:\n  batch_size: 1\n  steps: 1\n  eval_every: 0\n  seed: " << seed << "\n"
    << "optim:\n  warmup_steps: 1\n"
    << "device: cpu\n";
  return parse_config_text(y.str(), {}, /*world_size=*/0, "test_prefill");
}

uint64_t shared_seed() {
  uint64_t seed = std::random_device{}();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return seed;
}

std::vector<int32_t> random_prompt(uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<int32_t> p(static_cast<size_t>(kPrompt));  // (P)
  for (auto& t : p) t = int32_t(rng() % uint64_t(vocab));
  return p;
}

// The training forward on one rank: the whole prompt, then its last row's final hidden state times the LM head.
std::vector<double> training_last_logits(const std::vector<int32_t>& prompt, uint64_t seed) {
  const Config config = make_config(1, kPrompt + 3, seed);  // seq_len 40: the prompt and 3 pad tokens after it
  ProcessGrid one = ProcessGrid::local();
  ModelSession s = build_session(config, ModelComms::from(one), Device::cpu(), /*with_optimizer=*/true);
  s.model->init_weights(seed);
  const int64_t T = config.data.seq_len;
  Batch b;
  b.batch = 1, b.tokens_per_rank = T;
  b.tokens.assign(size_t(T), 0);      // (1, T)
  b.targets.assign(size_t(T), -1);    // (1, T)
  b.positions.resize(size_t(T));      // (1, T)
  b.groups.assign(size_t(T), 0);      // (1, T)
  for (int64_t i = 0; i < T; ++i) {
    b.positions[size_t(i)] = int32_t(i);
    if (i < kPrompt) b.tokens[size_t(i)] = prompt[size_t(i)];
    if (i + 1 < kPrompt) b.targets[size_t(i)] = prompt[size_t(i + 1)];
  }
  s.model->step(b, s.model->global_target_count(b), /*want_grad=*/false);
  const ModelShape& sh = s.model->shape();
  std::vector<float> hidden(size_t(T * sh.C));  // (T, C)
  copy_cast(Tensor(hidden.data(), DType::f32, Device::cpu(), {T, sh.C}), s.model->final_hidden());
  const std::vector<HostTensor> weights = s.model->gather_full(s.model->master(), "");
  const HostTensor* w = nullptr;  // (V, C)
  for (const HostTensor& t : weights)
    if (t.name == "lm_head.weight") w = &t;
  EXPECT_NE(w, nullptr);
  std::vector<double> logits(size_t(sh.V));  // (V)
  const float* x = hidden.data() + (kPrompt - 1) * sh.C;
  for (int64_t v = 0; v < sh.V; ++v) {
    double acc = 0;
    for (int64_t c = 0; c < sh.C; ++c) acc += double(x[c]) * double(w->values[size_t(v * sh.C + c)]);
    logits[size_t(v)] = acc;
  }
  return logits;
}

// Generation's path, as framework/eval/generate.cpp runs it: the prefill of the prompt but its last token on the
// grid (one pass, or chunks of `chunk`), then the last token's decode step. Returns its logits (V) on every rank.
std::vector<float> generation_first_logits(const std::vector<int32_t>& prompt, uint64_t seed, ProcessGrid& grid,
                                           int64_t chunk) {
  const int cp = grid.dims().cp;
  Config config = make_config(cp, 4 * cp, seed);
  prepare_generate_config(config);
  const GenerateLayout layout = generate_layout(config, kPrompt, 1, chunk);
  EXPECT_EQ(layout.chunk > 0, chunk > 0) << "the layout did not take the chunking asked for";
  LocalComm one;
  ModelSession s = build_session(generate_model_config(config, layout),
                                 generate_model_comms(ModelComms::from(grid), layout, one), Device::cpu(),
                                 /*with_optimizer=*/false);
  Model& model = *s.model;
  model.init_weights(seed);
  Arena measuring = Arena::measuring(Device::cpu());
  model.make_kv_cache(measuring, layout.capacity, layout.chunk > 0);
  Arena arena(Device::cpu(), measuring.peak() + 4096);
  KvCache cache = model.make_kv_cache(arena, layout.capacity, layout.chunk > 0);
  const int64_t n = layout.rows_per_rank, Pp = kPrompt - 1;
  const int me = grid.cp_rank();
  if (layout.chunk > 0) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));  // (n) this rank's rows of the chunk, padded at the end
    for (int64_t c = 0; c < layout.chunks; ++c) {
      const int64_t start = c * layout.chunk, valid = std::min(layout.chunk, Pp - start);
      const int64_t slot = prefill_chunk_slot(me, c, cp);
      for (int64_t j = 0; j < n; ++j)
        tokens[size_t(j)] = slot * n + j < valid ? prompt[size_t(start + slot * n + j)] : 0;
      model.prefill_chunk(cache, tokens, c, start, valid);
    }
  } else {
    Batch b;
    b.batch = 1, b.tokens_per_rank = n;
    b.tokens.resize(size_t(n));          // (1, n)
    b.targets.assign(size_t(n), -1);     // (1, n)
    b.positions.resize(size_t(n));       // (1, n)
    b.groups.assign(size_t(n), 0);       // (1, n)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = layout.order[size_t(me * n + j)];
      b.positions[size_t(j)] = int32_t(pos);
      b.tokens[size_t(j)] = pos < Pp ? prompt[size_t(pos)] : 0;
      if (pos < Pp) cache.capture.push_back(j);
    }
    model.set_kv_capture(&cache);
    model.prefill_forward(b);
    model.set_kv_capture(nullptr);
    cache.rows = int64_t(cache.capture.size());
  }
  EXPECT_EQ(cache.rows, layout.shard_rows[size_t(me)]) << "the prefill cached another row count than the layout";
  std::vector<int64_t> shard_rows = layout.shard_rows;
  const int owner = int(std::min_element(shard_rows.begin(), shard_rows.end()) - shard_rows.begin());
  int32_t token = prompt.back();
  copy_cast(cache.token, Tensor(&token, DType::i32, Device::cpu(), {1}));
  model.decode_step(cache, kPrompt - 1, owner == me);
  std::vector<float> logits(size_t(model.shape().V), NAN);  // (V), poisoned
  copy_cast(Tensor(logits.data(), DType::f32, Device::cpu(), {1, model.shape().V}), cache.logits);
  return logits;
}

class Prefill : public ::testing::TestWithParam<int64_t> {};

TEST_P(Prefill, FirstLogitsEqualTheTrainingForwardsLastPosition) {
  const int64_t chunk = GetParam();
  const int cp = world_size();
  const uint64_t seed = shared_seed();
  const std::vector<int32_t> prompt = random_prompt(seed, 50);
  const std::vector<double> want = training_last_logits(prompt, seed);
  std::shared_ptr<Comm> world = sub_world(cp);
  ProcessGrid grid = ProcessGrid::create(world, GridDims{1, cp, 1});
  const std::vector<float> got = generation_first_logits(prompt, seed, grid, chunk);
  ASSERT_EQ(got.size(), want.size());
  double scale = 0, worst = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t v = 0; v < got.size(); ++v) {
    ASSERT_TRUE(std::isfinite(got[v])) << "logit " << v << " is not finite (seed " << seed << ")";
    worst = std::max(worst, std::fabs(double(got[v]) - want[v]));
  }
  ASSERT_GT(scale, 1e-3) << "the logits are all near zero: the test would prove nothing";
  if (world_rank() == 0)
    std::printf("cp=%d %s: max |generation - training| = %.3g of max |logit| %.3g (seed %llu)\n", cp,
                chunk > 0 ? ("chunks of " + std::to_string(chunk)).c_str() : "one pass", worst, scale,
                (unsigned long long)seed);
  EXPECT_LE(worst, 2e-5 * scale) << "seed " << seed;
}

INSTANTIATE_TEST_SUITE_P(OnePassAndChunked, Prefill, ::testing::Values(int64_t(0), int64_t(10)),
                         [](const auto& info) { return info.param > 0 ? std::string("chunked") : std::string("one_pass"); });

}  // namespace
