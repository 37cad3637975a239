// parallel.cp_a2a: auto through the real binary on 4 CPU ranks (cp = 4, 4 heads, the copy task): the start-up line
// names every candidate's predicted efficiency and the pick; the model picks u > 1 here (16 tokens per rank: the
// ring's per-step call costs dominate); run_dir/config.yaml holds the integer, not auto; and the loss of every step
// equals one rank's on the same batches (fp32: only the summation order differs).
#include <cmath>
#include <cstdlib>

#include "tests/mpi/run_job_util.h"

namespace {

using rt::test::ProcessResult;
namespace fs = std::filesystem;

std::vector<double> losses(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

class TrainA2aAuto : public rt::test::RunJobTest {};

TEST_F(TrainA2aAuto, AutoPicksAnIntegerAndTrainsLikeOneRank) {
  const fs::path grid = dir_ / "grid", one = dir_ / "one";
  const std::string opts = " --set model.n_head=4 --set model.n_kv_head=4 --set train.steps=5"
                           " --set checkpoint.every=0 --set checkpoint.save_final=false";
  ProcessResult r = bash("$TRAIN " + config("g.yaml", grid.string()) + opts +
                         " --set parallel.cp=4 --set parallel.cp_a2a=auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string mark = "parallel.cp_a2a: auto -> ";
  const size_t at = r.output.find(mark);
  ASSERT_NE(at, std::string::npos) << r.output;
  const int u = std::atoi(r.output.c_str() + at + mark.size());
  EXPECT_GT(u, 1) << r.output;
  EXPECT_EQ(rt::test::count_of(r.output, "parallel.cp_a2a: auto -> "), 1u) << r.output;  // rank 0 only
  for (const char* c : {"u=1 ", "u=2 ", "u=4 "}) EXPECT_NE(r.output.find(c), std::string::npos) << r.output;
  std::ifstream saved(grid / "config.yaml");
  const std::string yaml((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
  EXPECT_NE(yaml.find("cp_a2a: " + std::to_string(u)), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("cp_a2a: auto"), std::string::npos) << yaml;

  r = bash("$TRAIN " + config("o.yaml", one.string()) + opts + " --set parallel.cp=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> a = losses(grid / "metrics.jsonl"), b = losses(one / "metrics.jsonl");
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t s = 0; s < a.size(); ++s) EXPECT_NEAR(a[s], b[s], 1e-5 * std::fabs(b[s])) << "step " << s + 1;
}

}  // namespace
