// train.precision: fp8 through the real binary on 2 CPU ranks (a cp=2 ring): what a user sees.
//   - bad input is refused at start-up with exit 2, naming the layer, the dimension and the fix (a dimension the
//     recipe cannot tile; an unknown recipe), by train and by plan alike;
//   - the start-up line and every metrics.jsonl step line state the precision and the recipe;
//   - a bf16 checkpoint continues under fp8 and back (train.precision is a knob a resume may change: the
//     checkpoints hold fp32 masters, and current scaling keeps no FP8 state).
#include <regex>

#include "tests/mpi/run_job_util.h"

namespace {

using rt::test::ProcessResult;
namespace fs = std::filesystem;

class Fp8Train : public rt::test::RunJobTest {
 protected:
  // The run_job_util model (d_model 32, 2 heads of 16, d_ff 64, 32 tokens, batch 4) tiles by 16: every GEMM dimension
  // on 2 cp ranks (16 tokens x 4 sequences = 64 per rank) is a multiple of 16.
  void expect_code(const std::string& command, int code, const std::vector<std::string>& says) {
    const ProcessResult r = bash(command);
    EXPECT_EQ(r.exit_code, code) << command << "\n" << r.output;
    for (const std::string& s : says) EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "'\n" << r.output;
    if (code == 2)
      EXPECT_FALSE(std::regex_search(r.output, std::regex(R"(\.(cpp|h|cu):[0-9]+\])")))
          << command << ": a source location in a user's error\n" << r.output;
  }
};

TEST_F(Fp8Train, ADimensionTheRecipeCannotTileIsRefusedAtStartUpWithExit2) {
  const std::string cfg = config("fp8.yaml", (dir_ / "bad").string());
  // block tiles by 128: 64 tokens per rank (and d_model 32) cannot.
  expect_code("$MPIRUN -np 2 --oversubscribe $BIN train " + cfg + " --set train.precision=fp8 --set fp8.recipe=block",
              2, {"fp8.recipe=block", "layer 0 attn.wq", "M = 64 (the rows of the output (tokens", "multiple of 128",
               "fp8.recipe: tensorwise"});
  expect_code("$BIN plan " + cfg + " --set train.precision=fp8 --set fp8.recipe=block", 2,
              {"layer 0 attn.wq", "multiple of 128"});
  // tensorwise tiles by 16: d_ff 40 cannot (the MLP's GEMMs), named with the layer.
  expect_code("$MPIRUN -np 2 --oversubscribe $BIN train " + cfg + " --set train.precision=fp8 --set model.d_ff=40", 2,
              {"layer 0 mlp.fc", "40", "multiple of 16"});
  // With fp8.bf16_first_last the first fp8 layer is named.
  expect_code("$BIN plan " + cfg + " --set train.precision=fp8 --set model.d_ff=40 --set model.n_layer=3 "
              "--set fp8.bf16_first_last=true", 2, {"layer 1 mlp.fc"});
  expect_code("$BIN plan " + cfg + " --set train.precision=fp8 --set fp8.recipe=blockwise", 2, {"fp8.recipe"});
  expect_code("$BIN plan " + cfg + " --set train.precision=fp16", 2, {"train.precision"});
}

TEST_F(Fp8Train, ABf16CheckpointContinuesUnderFp8AndBack) {
  const fs::path run = dir_ / "switch";
  const std::string cfg = config("switch.yaml", run.string());
  const std::string train = "$MPIRUN -np 2 --oversubscribe $BIN train " + cfg;
  ProcessResult r = bash(train + " --set train.steps=10 --set checkpoint.every=10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("precision: bf16"), std::string::npos) << r.output;
  r = bash(train + " --set train.steps=20 --set checkpoint.every=10 --set checkpoint.resume=auto "
           "--set train.precision=fp8 --set fp8.recipe=rowwise");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: changed (allowed) train.precision: bf16 -> fp8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("precision: fp8 (fp8.recipe: rowwise"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checkpoints hold no scaling state"), std::string::npos) << r.output;
  r = bash(train + " --set train.steps=30 --set checkpoint.every=10 --set checkpoint.resume=auto "
           "--set train.precision=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train.precision: fp8 -> bf16"), std::string::npos) << r.output;
  // Every step once, and each step line says which precision it ran in.
  const std::map<int, int> steps = rt::test::step_counts(run / "metrics.jsonl");
  for (int s = 1; s <= 30; ++s) EXPECT_EQ(steps.count(s) ? steps.at(s) : 0, 1) << "step " << s;
  std::ifstream in(run / "metrics.jsonl");
  std::map<int, std::string> ran;  // step -> "bf16" | "fp8 <recipe>"
  std::string line;
  double last_loss = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ASSERT_TRUE(j.contains("precision")) << line;
    ran[j["step"].get<int>()] = j["precision"].get<std::string>() +
                                (j.contains("fp8_recipe") ? " " + j["fp8_recipe"].get<std::string>() : "");
    if (j["loss"].is_number()) last_loss = j["loss"].get<double>();
  }
  for (int s = 1; s <= 30; ++s)
    EXPECT_EQ(ran[s], s <= 10 ? "bf16" : s <= 20 ? "fp8 rowwise" : "bf16") << "step " << s;
  EXPECT_TRUE(std::isfinite(last_loss) && last_loss > 0) << last_loss;
}

}  // namespace
