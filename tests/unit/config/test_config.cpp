// Config loading: bad configs give errors that name the key (and line), nothing is created on disk,
// --set overrides, and the resolved YAML round-trips.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/run/run_dir.h"
#include "kernels/tensor.h"
#include "tests/unit/test_util.h"

namespace fs = std::filesystem;

namespace {

// Line numbers below refer to this text (line 1 = "model:").
const char* kBaseYaml =
    "model:\n"              // 1
    "  n_layer: 2\n"        // 2
    "  d_model: 64\n"       // 3
    "  n_head: 4\n"         // 4
    "  n_kv_head: 2\n"      // 5
    "  vocab_size: 64\n"    // 6
    "  mlp: gelu\n"         // 7
    "data:\n"               // 8
    "  source: copy\n"      // 9
    "  seq_len: 128\n"      // 10
    "parallel:\n"           // 11
    "  cp: 2\n"             // 12
    "  layout: zigzag\n"    // 13
    "train:\n"              // 14
    "  batch_size: 4\n"     // 15
    "  steps: 10\n"         // 16
    "  run_dir: RUNDIR\n"   // 17
    "optim:\n"              // 18
    "  lr: 3e-3\n"          // 19
    "  warmup_steps: 2\n"   // 20
    "device: cpu\n";        // 21

// The YAML without its first (comment) line, which names where the config came from.
std::string body(const std::string& yaml_text) { return yaml_text.substr(yaml_text.find('\n') + 1); }

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = rt::test::make_temp_dir("rt_test_config");
    run_dir_ = dir_ / "run";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string yaml(const std::vector<std::pair<std::string, std::string>>& replace = {}) const {
    std::string text = kBaseYaml;
    text.replace(text.find("RUNDIR"), 6, run_dir_.string());
    for (const auto& [from, to] : replace) {
      size_t at = text.find(from);
      EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the base YAML";
      if (at != std::string::npos) text.replace(at, from.size(), to);
    }
    return text;
  }
  std::string write(const std::string& text) const {
    const std::string path = (dir_ / "x.yaml").string();
    std::ofstream(path) << text;
    return path;
  }
  // Loads and expects an rt::Error containing every fragment; the run directory must not appear.
  void expect_error(const std::string& text, const std::vector<std::string>& overrides, int world_size,
                    const std::vector<std::string>& fragments) {
    const std::string path = write(text);
    try {
      rt::load_config(path, overrides, world_size);
      ADD_FAILURE() << "expected an error containing '" << fragments[0] << "'";
    } catch (const rt::Error& e) {
      const std::string msg = e.what();
      for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "missing '" << f << "' in:\n" << msg;
    }
    EXPECT_FALSE(fs::exists(run_dir_)) << "a failed config load created the run directory";
  }

  fs::path dir_, run_dir_;
};

TEST_F(ConfigTest, BaseConfigLoadsAndCreatesNothing) {
  const std::string path = write(yaml());
  const rt::Config c = rt::load_config(path, {}, 2);
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.parallel.cp, 2);
  EXPECT_FLOAT_EQ(c.optim.lr, 3e-3f);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.source_path, path);
  EXPECT_EQ(c.model.d_ff, 256);  // untouched default
  EXPECT_FALSE(fs::exists(run_dir_));
}

TEST_F(ConfigTest, UnknownKeyNamesPathLineAndSuggestion) {
  const std::string path = (dir_ / "x.yaml").string();
  expect_error(yaml({{"  n_head: 4", "  n_heads: 4"}}), {}, 0,
               {path + ":4: unknown key 'model.n_heads' (did you mean 'model.n_head'?)"});
}

TEST_F(ConfigTest, KeyInWrongSectionSuggestsTheRightOne) {
  expect_error(yaml({{"  steps: 10\n", "  steps: 10\n  lr: 0.1\n"}}), {}, 0,
               {":17: unknown key 'train.lr' (did you mean 'optim.lr'?)"});
}

TEST_F(ConfigTest, UnknownTopLevelKey) {
  expect_error(yaml({{"device: cpu", "devise: cpu"}}), {}, 0, {":21: unknown key 'devise' (did you mean 'device'?)"});
}

TEST_F(ConfigTest, WrongTypeNamesKeyAndLine) {
  expect_error(yaml({{"  d_model: 64", "  d_model: sixty-four"}}), {}, 0,
               {":3: 'model.d_model' must be an integer, got 'sixty-four'"});
  expect_error(yaml({{"  d_model: 64", "  d_model: 64.5"}}), {}, 0, {"'model.d_model' must be an integer", "whole number"});
  expect_error(yaml({{"  d_model: 64", "  d_model: [64, 128]"}}), {}, 0, {":3: 'model.d_model' must be an integer, got a list"});
  expect_error(yaml({{"  lr: 3e-3", "  lr: fast"}}), {}, 0, {":19: 'optim.lr' must be a number, got 'fast'"});
}

TEST_F(ConfigTest, NegativeSizeNamesKeyAndBound) {
  expect_error(yaml({{"  n_layer: 2", "  n_layer: -1"}}), {}, 0, {"model.n_layer=-1 must be >= 1"});
  expect_error(yaml({{"  batch_size: 4", "  batch_size: 0"}}), {}, 0, {"train.batch_size=0 must be >= 1"});
}

TEST_F(ConfigTest, HeadsNotDividingModelWidth) {
  expect_error(yaml({{"  d_model: 64", "  d_model: 100"}, {"  n_head: 4", "  n_head: 3"}, {"  n_kv_head: 2", "  n_kv_head: 1"}}),
               {}, 0, {"model.d_model=100 is not divisible by model.n_head=3", "multiple of n_head"});
  expect_error(yaml({{"  n_kv_head: 2", "  n_kv_head: 3"}}), {}, 0,
               {"model.n_head=4 is not divisible by model.n_kv_head=3"});
  expect_error(yaml({{"  d_model: 64", "  d_model: 12"}}), {}, 0, {"head_dim", "is odd", "RoPE"});
}

TEST_F(ConfigTest, MissingDataFile) {
  const std::string missing = (dir_ / "no_such_file.txt").string();
  expect_error(yaml({{"  source: copy", "  source: bytes\n  path: " + missing}, {"  vocab_size: 64", "  vocab_size: 256"}}),
               {}, 0, {"data.path='" + missing + "' does not exist"});
  expect_error(yaml({{"  source: copy", "  source: shards\n  path: " + (dir_ / "*.bin").string()}}), {}, 0,
               {"data.path=", "matches no file"});
}

TEST_F(ConfigTest, BytesNeedVocab256) {
  const std::string text_file = (dir_ / "t.txt").string();
  std::ofstream(text_file) << std::string(4096, 'a');
  expect_error(yaml({{"  source: copy", "  source: bytes\n  path: " + text_file}}), {}, 0,
               {"model.vocab_size=64 is too small for data.source=bytes", "vocab_size >= 256"});
  // And with a vocabulary that fits, the same file loads.
  const std::string path = write(yaml({{"  source: copy", "  source: bytes\n  path: " + text_file},
                                       {"  vocab_size: 64", "  vocab_size: 256"}}));
  EXPECT_NO_THROW(rt::load_config(path, {}, 0));
}

TEST_F(ConfigTest, BadSetKeyAndBadSetValue) {
  expect_error(yaml(), {"model.n_heads=4"}, 0,
               {"--set model.n_heads=4: unknown key 'model.n_heads' (did you mean 'model.n_head'?)"});
  expect_error(yaml(), {"train.steps=ten"}, 0, {"--set train.steps=ten: 'train.steps' must be an integer, got 'ten'"});
  expect_error(yaml(), {"train.steps"}, 0, {"--set train.steps: expected key=value"});
}

TEST_F(ConfigTest, ZigzagDivisibility) {
  expect_error(yaml({{"  cp: 2", "  cp: 3"}, {"  seq_len: 128", "  seq_len: 100"}}), {}, 0,
               {"data.seq_len=100 is not divisible by 2*cp=6 required by parallel.layout=zigzag; use a multiple of 6 "
                "or layout: contiguous"});
  // contiguous only needs seq_len % cp.
  expect_error(yaml({{"  cp: 2", "  cp: 3"}, {"  seq_len: 128", "  seq_len: 100"}, {"layout: zigzag", "layout: contiguous"}}),
               {}, 0, {"data.seq_len=100 is not divisible by parallel.cp=3"});
  const std::string ok = write(yaml({{"  cp: 2", "  cp: 3"}, {"  seq_len: 128", "  seq_len: 102"}, {"layout: zigzag", "layout: contiguous"}}));
  EXPECT_NO_THROW(rt::load_config(ok, {}, 3));
}

TEST_F(ConfigTest, WorldSizeMismatch) {
  expect_error(yaml(), {}, 4, {"parallel.dp*cp*tp = 1*2*1 = 2 but the job runs on 4 rank(s)", "mpirun -np 2"});
  const std::string path = write(yaml());
  EXPECT_NO_THROW(rt::load_config(path, {}, 0));  // 0 skips the check (plan)
  EXPECT_NO_THROW(rt::load_config(path, {"parallel.dp=2", "train.batch_size=4"}, 4));
}

TEST_F(ConfigTest, TensorAndDataParallelDivisibility) {
  expect_error(yaml(), {"parallel.tp=3", "parallel.cp=1"}, 0, {"model.n_head=4 is not divisible by parallel.tp=3"});
  expect_error(yaml(), {"parallel.dp=3"}, 0, {"train.batch_size=4 is not divisible by parallel.dp=3"});
}

TEST_F(ConfigTest, NamesAndRanges) {
  expect_error(yaml({{"  mlp: gelu", "  mlp: relu"}}), {}, 0, {"model.mlp='relu' is not a valid choice; use one of: gelu, swiglu"});
  expect_error(yaml({{"layout: zigzag", "layout: spiral"}}), {}, 0, {"parallel.layout='spiral'", "contiguous"});
  expect_error(yaml(), {"train.checkpointing=some"}, 0, {"train.checkpointing='some'", "selective"});
  expect_error(yaml(), {"optim.lr=-1"}, 0, {"optim.lr=-1 must be >= 0"});
  expect_error(yaml(), {"optim.warmup_steps=50"}, 0, {"optim.warmup_steps=50 exceeds train.steps=10"});
  expect_error(yaml(), {"data.copy_span=64"}, 0, {"data.copy_span=64 does not fit", "use copy_span <= 63"});
  expect_error(yaml(), {"model.vocab_size=2"}, 0, {"model.vocab_size=2 is too small for the copy task"});
  expect_error(yaml(), {"device=tpu"}, 0, {"device='tpu'", "auto, cpu, cuda"});
  expect_error(yaml(), {"checkpoint.resume=" + (dir_ / "nope").string()}, 0, {"checkpoint.resume=", "is not a directory"});
}

TEST_F(ConfigTest, AllProblemsReportedTogether) {
  expect_error(yaml({{"  n_layer: 2", "  n_layer: 0"}, {"  steps: 10", "  steps: 0"}}), {}, 0,
               {"problems in config", "model.n_layer=0", "train.steps=0"});
  expect_error(yaml({{"  n_head: 4", "  n_heads: 4"}, {"  d_model: 64", "  d_model: x"}}), {}, 0,
               {"2 problems", ":4: unknown key 'model.n_heads'", ":3: 'model.d_model' must be an integer"});
}

TEST_F(ConfigTest, YamlSyntaxErrorAndDuplicateKey) {
  expect_error(yaml({{"  seq_len: 128", "  seq_len: [128"}}), {}, 0, {"x.yaml:", "YAML syntax error"});
  expect_error(yaml({{"  steps: 10", "  steps: 10\n  steps: 20"}}), {}, 0, {":17: duplicate key 'train.steps'"});
  expect_error("- model\n- data\n", {}, 0, {"the top level must be a map of sections"});
  expect_error(yaml({{"data:\n  source: copy\n  seq_len: 128\n", "data: copy\n"}}), {}, 0,
               {"section 'data' must be a map"});
}

TEST_F(ConfigTest, MissingConfigFile) {
  try {
    rt::load_config((dir_ / "missing.yaml").string(), {}, 0);
    ADD_FAILURE() << "expected an error";
  } catch (const rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.yaml' cannot be opened"), std::string::npos) << e.what();
  }
}

TEST_F(ConfigTest, SetOverridesEveryType) {
  const std::string path = write(yaml());
  const rt::Config c = rt::load_config(
      path,
      {"model.n_layer=5", "optim.lr=0.0125", "model.tied_embeddings=true", "model.mlp=swiglu", "device=auto",
       "data.seed=18446744073709551615", "log.peak_tflops=989.5", "train.steps=20", "train.steps=30",
       "train.run_dir='" + (dir_ / "other run").string() + "'"},
      0);
  EXPECT_EQ(c.model.n_layer, 5);
  EXPECT_FLOAT_EQ(c.optim.lr, 0.0125f);
  EXPECT_TRUE(c.model.tied_embeddings);
  EXPECT_EQ(c.model.mlp, "swiglu");
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.data.seed, 18446744073709551615ull);
  EXPECT_DOUBLE_EQ(c.log.peak_tflops, 989.5);
  EXPECT_EQ(c.train.steps, 30);  // the last --set wins
  EXPECT_EQ(c.train.run_dir, (dir_ / "other run").string());
  EXPECT_FALSE(fs::exists(dir_ / "other run"));
}

TEST_F(ConfigTest, ResolvedYamlRoundTrips) {
  const std::string path = write(yaml());
  const rt::Config a = rt::load_config(path, {"optim.lr=0.0031", "optim.eps=1e-9", "model.norm_eps=3.3e-6",
                                              "train.run_dir=" + (dir_ / "r \"q\"").string(), "data.seed=987654321987"},
                                       0);
  const std::string text = rt::config_to_yaml(a);
  const rt::Config b = rt::parse_config_text(text, {}, 0, "resolved");
  EXPECT_EQ(body(text), body(rt::config_to_yaml(b))) << "a second round trip changed the text";
  EXPECT_EQ(b.optim.lr, a.optim.lr);  // bitwise: floats are written in shortest round-trip form
  EXPECT_EQ(b.optim.eps, a.optim.eps);
  EXPECT_EQ(b.model.norm_eps, a.model.norm_eps);
  EXPECT_EQ(b.train.run_dir, a.train.run_dir);
  EXPECT_EQ(b.data.seed, a.data.seed);
  EXPECT_EQ(rt::model_config_hash(a), rt::model_config_hash(b));
  // Defaults round-trip too.
  const rt::Config d = rt::parse_config_text(rt::config_to_yaml(rt::Config{}), {}, 0);
  EXPECT_EQ(body(rt::config_to_yaml(d)), body(rt::config_to_yaml(rt::Config{})));
}

TEST_F(ConfigTest, TableAndHash) {
  const rt::Config c = rt::load_config(write(yaml()), {}, 0);
  const std::string table = rt::config_table(c);
  for (const char* key : {"model.n_layer", "parallel.layout", "optim.lr", "device", "tokens/step"})
    EXPECT_NE(table.find(key), std::string::npos) << key;
  rt::Config other = c;
  other.train.steps = 999;  // not a model field: same hash
  EXPECT_EQ(rt::model_config_hash(c), rt::model_config_hash(other));
  other.model.d_ff = 128;
  EXPECT_NE(rt::model_config_hash(c), rt::model_config_hash(other));
  EXPECT_EQ(rt::model_config_hash(c).size(), 16u);
}

TEST_F(ConfigTest, AutoLayoutResolves) {
  rt::Config c;
  EXPECT_EQ(rt::resolved_layout(c), "contiguous");
  c.parallel.cp = 2;
  EXPECT_EQ(rt::resolved_layout(c), "zigzag");
  c.parallel.layout = "striped";
  EXPECT_EQ(rt::resolved_layout(c), "striped");
  expect_error(yaml({{"layout: zigzag", "layout: auto"}, {"  seq_len: 128", "  seq_len: 130"}}), {}, 0,
               {"not divisible by 2*cp=4", "(auto with cp > 1)"});
}

TEST_F(ConfigTest, PrepareRunDirWritesResolvedConfig) {
  const rt::Config c = rt::load_config(write(yaml()), {"model.n_layer=3"}, 0);
  EXPECT_FALSE(fs::exists(run_dir_));
  rt::prepare_run_dir(c);
  ASSERT_TRUE(fs::exists(rt::resolved_config_path(c)));
  const rt::Config back = rt::load_config(rt::resolved_config_path(c), {}, 0);
  EXPECT_EQ(back.model.n_layer, 3);
  EXPECT_EQ(rt::metrics_path(c), (run_dir_ / "metrics.jsonl").string());
}

// log.metrics_file stays inside train.run_dir: an absolute path or a '..' would move another run's metrics aside.
TEST_F(ConfigTest, MetricsFileOutsideRunDirIsRefused) {
  for (const std::string bad : {"../A/metrics.jsonl", "/tmp/metrics.jsonl", "logs/../../metrics.jsonl", ".."}) {
    expect_error(yaml(), {"log.metrics_file=" + bad}, 0,
                 {"log.metrics_file='" + bad + "' leaves train.run_dir", "give a path inside the run directory"});
  }
  // A subdirectory of run_dir the run would not create is refused at validation (issue 43, row 11); one that
  // exists is taken.
  expect_error(yaml(), {"log.metrics_file=logs/metrics..jsonl"}, 0,
               {"log.metrics_file='logs/metrics..jsonl' is in the directory 'logs'", "does not exist"});
  fs::create_directories(run_dir_ / "logs");
  const rt::Config nested = rt::load_config(write(yaml()), {"log.metrics_file=logs/metrics..jsonl"}, 0);
  EXPECT_EQ(rt::metrics_path(nested), (run_dir_ / "logs/metrics..jsonl").string());
}

}  // namespace

// train.deterministic_attention: parsed from YAML or --set, off by default; a non-boolean is refused.
TEST_F(ConfigTest, DeterministicAttentionKnob) {
  const std::string path = write(yaml());
  EXPECT_FALSE(rt::load_config(path, {}, 2).train.deterministic_attention);
  const rt::Config on = rt::load_config(path, {"train.deterministic_attention=true"}, 2);
  EXPECT_TRUE(on.train.deterministic_attention);
  expect_error(yaml(), {"train.deterministic_attention=maybe"}, 2, {"train.deterministic_attention"});
}

TEST(ConfigPaths, DirectoryOrEmptyFileIsRefused) {
  const fs::path dir = fs::temp_directory_path() / ("rt_cfg_paths_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "empty.yaml") << "# nothing but a comment\n\n";
  std::ofstream(dir / "blank.yaml") << "";
  auto error_of = [](const std::string& path) {
    try {
      rt::load_config(path, {}, 0);
    } catch (const rt::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(dir.string()).find("is a directory; give a YAML file, e.g. one of: "), std::string::npos)
      << error_of(dir.string());
  for (const char* f : {"empty.yaml", "blank.yaml"})
    EXPECT_NE(error_of((dir / f).string()).find("holds no settings"), std::string::npos) << error_of((dir / f).string());
  // One setting is enough.
  std::ofstream(dir / "one.yaml") << "device: cpu\n";
  EXPECT_EQ(error_of((dir / "one.yaml").string()), "no error");
  fs::remove_all(dir);
}

namespace {
// parallel.cp_a2a (issue 32): u must divide cp, and tp x u must divide the query heads; each refusal names the
// numbers and what would work. A valid hybrid prints its ring degree, a2a degree and heads per rank.
TEST_F(ConfigTest, AllToAllDegreeRefusedUnlessItDividesCpAndTheHeads) {
  expect_error(yaml(), {"parallel.cp=4", "parallel.cp_a2a=3"}, 0,
               {"parallel.cp_a2a=3 does not divide parallel.cp=4", "use a cp_a2a of 1, 2, 4"});
  expect_error(yaml(), {"parallel.cp=8", "parallel.cp_a2a=8", "parallel.tp=1"}, 0,
               {"parallel.tp x parallel.cp_a2a = 1 x 8 = 8 does not divide model.n_head=4", "use a cp_a2a of 1, 2, 4"});
  expect_error(yaml(), {"parallel.cp=4", "parallel.cp_a2a=4", "parallel.tp=2"}, 0,
               {"2 x 4 = 8 does not divide model.n_head=4", "use a cp_a2a of 1, 2 with tp=2"});
  expect_error(yaml(), {"parallel.cp_a2a=0"}, 0, {"parallel.cp_a2a"});
  const rt::Config c = rt::load_config(write(yaml()), {"parallel.cp=4", "parallel.cp_a2a=2", "parallel.tp=2"}, 8);
  EXPECT_EQ(c.parallel.ring(), 2);
  const std::string table = rt::config_table(c);
  EXPECT_NE(table.find("(derived) ring degree"), std::string::npos) << table;
  EXPECT_NE(table.find("(derived) a2a degree"), std::string::npos) << table;
  EXPECT_NE(table.find("(derived) heads/rank"), std::string::npos) << table;
  EXPECT_NE(table.find("n_head / (tp * cp_a2a)"), std::string::npos) << table;
  // zigzag is over the ring: seq_len must be a multiple of 2 * ring, not of 2 * cp.
  const rt::Config z = rt::load_config(write(yaml({{"  seq_len: 128", "  seq_len: 12"}})),
                                       {"parallel.cp=6", "parallel.cp_a2a=3", "model.n_head=3", "model.n_kv_head=1",
                                        "model.d_model=48"},
                                       6);
  EXPECT_EQ(z.parallel.ring(), 2);
}
}  // namespace

#ifdef RINGTRAIN_HAVE_CUDA
// eval and generate take the model from the checkpoint: a device: cuda config without a model section must load
// (the defaults' head dim 16 is not the model's; build_session checks the real one), while an explicit bad shape is
// still refused at load.
TEST_F(ConfigTest, CudaHeadDimCheckedOnlyWhereTheConfigSetsTheShape) {
  const std::string no_model = "device: cuda\ndata:\n  source: copy\n  seq_len: 64\n";
  EXPECT_NO_THROW(rt::parse_config_text(no_model, {}, 0, "no_model"));
  try {
    rt::parse_config_text(no_model + "model:\n  d_model: 64\n  n_head: 4\n", {}, 0, "bad_shape");
    ADD_FAILURE() << "expected the head-dim refusal for an explicit d_model / n_head of 16";
  } catch (const rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dims 64 and 128"), std::string::npos) << e.what();
  }
}
#endif
