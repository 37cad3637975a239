// `ringtrain eval --task loss-by-position` (framework/eval/eval_tasks.h) on CPU ranks, against one rank:
//   - its buckets average back (target-weighted) to the eval loss of the same grid, and their targets add up to
//     the eval's;
//   - each bucket's targets equal one rank's exactly and its mean loss within 1e-5 (a token counted at a wrong
//     position, under zigzag, striped, balanced or the all-to-all's split, moves a target between buckets);
//   - grids: cp 2 zigzag, cp 2 striped, cp 2 balanced with packed documents (by window and by document position),
//     tp 2, cp_a2a 2, dp 2.
// Runs under `mpirun -np 2`; fp32 on the CPU, random weights (each token's loss differs).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/plan/trainer_setup.h"
#include "framework/eval/eval_tasks.h"
#include "tests/mpi/mpi_world.h"
#include "tests/unit/test_shards.h"

using namespace rt;
namespace fs = std::filesystem;

namespace {

using rt::test::sub_world;
using rt::test::world_rank;
using rt::test::world_size;

struct GridCase {
  const char* name;
  int dp, cp, u, tp;
  const char* layout;
  bool documents = false;
  bool by_document = false;
};
void PrintTo(const GridCase& c, std::ostream* os) { *os << c.name; }

// Packed documents: an llm.c shard of documents of 1..23 tokens, each starting with token 0 (per rank).
std::string documents_shard() {
  return rt::test::write_llmc_shard_u16(
      (fs::temp_directory_path() / ("rt_eval_tasks_docs_" + std::to_string(world_rank()) + ".bin")).string(),
      rt::test::packed_document_tokens(4000));
}

Config make_config(const GridCase& c, int dp, int cp, int u, int tp, const std::string& layout) {
  std::ostringstream y;
  y << "model:\n  n_layer: 2\n  d_model: 16\n  n_head: 4\n  n_kv_head: 2\n  vocab_size: 24\n  mlp: swiglu\n"
    << "  d_ff: 32\n"
    << (c.documents ? "data:\n  source: shards\n  path: " + documents_shard() + "\n  eval_path: " + documents_shard() +
                          "\n  documents: eot\n  eot_token: 0\n"
                    : std::string("data:\n  source: copy\n"))
    << "  seq_len: 64\n  seed: 7\n"
    << "parallel:\n  dp: " << dp << "\n  cp: " << cp << "\n  cp_a2a: " << u << "\n  tp: " << tp
    << "\n  layout: " << layout << "\n"
    << "train:\n  batch_size: 4\n  steps: 10\n  eval_every: 0\n  eval_batches: 3\n  seed: 11\n"
    << "optim:\n  warmup_steps: 1\n"
    << "device: cpu\n";
  return parse_config_text(y.str(), {}, /*world_size=*/0, "test_eval_tasks");
}

PositionLosses run(const Config& config, ProcessGrid& grid, bool by_document, LossTally* eval_loss) {
  ModelSession session = build_session(config, ModelComms::from(grid), Device::cpu(), /*with_optimizer=*/false);
  session.model->init_weights(config.train.seed);
  std::unique_ptr<DataLoader> loader = make_loader(config, loader_rank(config, grid), "eval");
  const EvalPlan plan = plan_eval(config, *loader);
  PositionLosses p = loss_by_position(*session.model, *loader, plan, config.data.seq_len, by_document);
  if (eval_loss) *eval_loss = evaluate(*session.model, *loader, plan);
  return p;
}

class LossByPosition : public ::testing::TestWithParam<GridCase> {};

TEST_P(LossByPosition, AveragesBackToTheEvalLossAndMatchesOneRank) {
  const GridCase c = GetParam();
  const int size = c.dp * c.cp * c.tp;
  if (size > world_size()) GTEST_SKIP() << "needs " << size << " ranks";
  const Config config = make_config(c, c.dp, c.cp, c.u, c.tp, c.layout);
  std::shared_ptr<Comm> sub = sub_world(size);
  if (!sub) return;
  GridDims dims{c.dp, c.cp, c.tp};
  dims.cp_a2a = c.u;
  ProcessGrid grid = ProcessGrid::create(sub, dims);
  LossTally eval;
  const PositionLosses got = run(config, grid, c.by_document, &eval);
  ProcessGrid one = ProcessGrid::local();
  const PositionLosses ref = run(make_config(c, 1, 1, 1, 1, "contiguous"), one, c.by_document, nullptr);

  double sum = 0, count = 0;
  for (size_t k = 0; k < got.sum.size(); ++k) sum += got.sum[k], count += got.count[k];
  ASSERT_GT(eval.count[0], 0) << "the eval has no targets: the test would prove nothing";
  EXPECT_EQ(count, eval.count[0]) << "the buckets' targets do not add up to the eval's";
  EXPECT_NEAR(sum / count, eval.mean(0), 1e-6 * eval.mean(0)) << "the buckets do not average back to the eval loss";

  ASSERT_EQ(got.edges, ref.edges);
  int filled = 0;
  for (size_t k = 0; k < ref.sum.size(); ++k) {
    EXPECT_EQ(got.count[k], ref.count[k]) << "bucket [" << ref.edges[k] << ", " << ref.edges[k + 1] << ")";
    if (ref.count[k] == 0) continue;
    ++filled;
    const double want = ref.sum[k] / ref.count[k], have = got.sum[k] / std::max(got.count[k], 1.0);
    EXPECT_NEAR(have, want, 1e-5 * want) << "bucket [" << ref.edges[k] << ", " << ref.edges[k + 1] << ")";
  }
  EXPECT_GE(filled, 5) << "too few buckets with targets: the test would prove little";
  if (sub->rank() == 0)
    std::printf("[ %s ] %d buckets, eval loss %.6f over %.0f targets\n", c.name, filled, eval.mean(0), eval.count[0]);
}

// {name, dp, cp, cp_a2a, tp, layout, documents, by_document}
INSTANTIATE_TEST_SUITE_P(
    Grids, LossByPosition,
    ::testing::Values(GridCase{"cp2_zigzag", 1, 2, 1, 1, "zigzag"}, GridCase{"cp2_striped", 1, 2, 1, 1, "striped"},
                      GridCase{"cp2_balanced_documents", 1, 2, 1, 1, "balanced", true},
                      GridCase{"cp2_balanced_documents_by_document", 1, 2, 1, 1, "balanced", true, true},
                      GridCase{"tp2", 1, 1, 1, 2, "contiguous"}, GridCase{"cp2_a2a2", 1, 2, 2, 1, "contiguous"},
                      GridCase{"dp2", 2, 1, 1, 1, "contiguous"}),
    [](const ::testing::TestParamInfo<GridCase>& info) { return std::string(info.param.name); });

}  // namespace
