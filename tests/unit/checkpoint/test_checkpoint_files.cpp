// Checkpoint files: safetensors round trip (and Python's safetensors when installed), corruption detected
// (flipped byte, truncation), a crash mid-save leaves the previous checkpoint loadable, keep-last-K.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "kernels/tensor.h"
#include "tests/unit/test_util.h"

namespace fs = std::filesystem;

namespace {

using rt::test::error_of;

rt::HostTensor random_tensor(const std::string& name, std::vector<int64_t> shape, std::mt19937& rng) {
  rt::HostTensor t;
  t.name = name;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::normal_distribution<float> dist(0.f, 1.f);
  t.values.resize(size_t(n));
  for (float& v : t.values) v = dist(rng);
  return t;
}

std::vector<rt::HostTensor> model_tensors(uint32_t seed) {
  std::mt19937 rng(seed);
  return {random_tensor("tok_embeddings.weight", {17, 8}, rng), random_tensor("layers.0.attn.wq.weight", {8, 8}, rng),
          random_tensor("layers.0.attn_norm.weight", {8}, rng), random_tensor("norm.weight", {8}, rng),
          random_tensor("lm_head.weight", {17, 8}, rng), random_tensor("scalar", {}, rng),
          random_tensor("empty", {0, 4}, rng)};
}

void expect_same(const std::vector<rt::HostTensor>& a, const std::vector<rt::HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << "order must be preserved";
    EXPECT_EQ(a[i].shape, b[i].shape) << a[i].name;
    ASSERT_EQ(a[i].values.size(), b[i].values.size()) << a[i].name;
    EXPECT_EQ(0, std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(float)))
        << a[i].name << " differs";
  }
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void write_all(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

class CheckpointFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = rt::test::make_temp_dir("rt_test_ckpt");
    ::unsetenv("RINGTRAIN_TEST_CRASH_IN_SAVE");
  }
  void TearDown() override {
    ::unsetenv("RINGTRAIN_TEST_CRASH_IN_SAVE");
    fs::remove_all(dir_);
  }
  std::string save(int64_t step, int keep = 3) {
    rt::TrainState s;
    s.step = step;
    s.data_cursor = uint64_t(step) * 1000003ull + (uint64_t(1) << 40);
    s.rng_state = "rng-" + std::to_string(step);
    s.config_hash = "abcdef0123456789";
    return rt::save_checkpoint(lineage(), model_tensors(uint32_t(step)), model_tensors(uint32_t(step + 1000)), s,
                               rt::ModelConfig{}, keep);
  }
  std::string run_dir() const { return (dir_ / "run").string(); }
  // These tests save into one lineage directory, run_dir/checkpoints (a run uses run_dir/checkpoints/<lineage>).
  std::string lineage() const { return (dir_ / "run" / "checkpoints").string(); }
  fs::path dir_;
};

TEST_F(CheckpointFilesTest, SafetensorsRoundTrip) {
  const auto tensors = model_tensors(3);
  const std::map<std::string, std::string> meta = rt::model_metadata(rt::ModelConfig{});
  const std::string path = (dir_ / "m.safetensors").string();
  rt::write_safetensors(path, tensors, meta);
  std::map<std::string, std::string> meta_back = {{"poison", "x"}};
  const auto back = rt::read_safetensors(path, &meta_back);
  expect_same(tensors, back);
  EXPECT_EQ(meta_back, meta);
  for (const char* key : {"n_layer", "d_model", "n_head", "n_kv_head", "vocab_size", "mlp", "d_ff", "rope_base",
                          "norm_eps", "tied_embeddings", "rope_scaling.type", "rope_scaling.factor",
                          "rope_scaling.low_freq_factor", "rope_scaling.high_freq_factor",
                          "rope_scaling.original_max_position_embeddings", "rope_scaling.beta_fast",
                          "rope_scaling.beta_slow", "rope_scaling.attention_factor"})
    EXPECT_TRUE(meta_back.count(key)) << key;
  EXPECT_EQ(meta_back.at("tied_embeddings"), "false");

  // The layout follows the format: u64 LE header size, JSON padded to 8 bytes, F32 entries.
  const std::string bytes = read_all(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["norm.weight"]["dtype"], "F32");
  EXPECT_EQ(header["tok_embeddings.weight"]["shape"], nlohmann::json({17, 8}));
  EXPECT_EQ(header["tok_embeddings.weight"]["data_offsets"], nlohmann::json({0, 17 * 8 * 4}));
  EXPECT_EQ(header["__metadata__"]["d_model"], "64");
}

TEST_F(CheckpointFilesTest, PythonSafetensorsLoadsTheFile) {
  const auto tensors = model_tensors(5);
  const std::string path = (dir_ / "py.safetensors").string();
  rt::write_safetensors(path, tensors, {{"mlp", "gelu"}});
  double sum = 0;
  for (const auto& t : tensors)
    for (float v : t.values) sum += double(v) * double(v);
  const std::string script = (dir_ / "check.py").string();
  std::ofstream(script) << "import sys\n"
                           "try:\n"
                           "    from safetensors.numpy import load_file\n"
                           "except ImportError:\n"
                           "    sys.exit(77)\n"
                           "from safetensors import safe_open\n"
                           "t = load_file(sys.argv[1])\n"
                           "assert t['tok_embeddings.weight'].shape == (17, 8), t['tok_embeddings.weight'].shape\n"
                           "assert str(t['norm.weight'].dtype) == 'float32'\n"
                           "assert t['scalar'].shape == ()\n"
                           "with safe_open(sys.argv[1], 'np') as f: assert f.metadata() == {'mlp': 'gelu'}\n"
                           "s = sum(float((v.astype('float64') ** 2).sum()) for v in t.values())\n"
                           "assert abs(s - float(sys.argv[2])) <= 1e-9 * abs(s), (s, sys.argv[2])\n"
                           "import numpy as np\n"
                           "from safetensors.numpy import save_file\n"
                           "save_file({'b': np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,\n"
                           "           'a': np.full(5, 0.25, np.float32)}, sys.argv[3], metadata={'k': 'v'})\n";
  char sum_text[64];
  std::snprintf(sum_text, sizeof sum_text, "%.17g", sum);
  const std::string from_python = (dir_ / "from_python.safetensors").string();
  const std::string cmd = "python3 " + script + " " + path + " " + sum_text + " " + from_python;
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    GTEST_SKIP() << "Python safetensors/numpy not installed (pip install safetensors numpy)";
  ASSERT_EQ(status, 0) << cmd;
  // And a file written by Python reads back here (its tensors sorted by name, as the package lays them out).
  std::map<std::string, std::string> meta;
  const auto back = rt::read_safetensors(from_python, &meta);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"k", "v"}}));
  for (const auto& t : back) {
    if (t.name == "a") {
      EXPECT_EQ(t.shape, std::vector<int64_t>{5});
      for (float v : t.values) EXPECT_EQ(v, 0.25f);
    } else {
      EXPECT_EQ(t.name, "b");
      EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
      for (size_t i = 0; i < t.values.size(); ++i) EXPECT_EQ(t.values[i], float(i) - 2.5f);
    }
  }
}

TEST_F(CheckpointFilesTest, CheckpointRoundTripAndState) {
  const std::string d = save(7);
  EXPECT_EQ(d, (fs::path(run_dir()) / "checkpoints" / "step_7").string());
  EXPECT_EQ(rt::latest_checkpoint(lineage()), d);
  const rt::LoadedCheckpoint c = rt::load_checkpoint(d);
  expect_same(c.model, model_tensors(7));
  expect_same(c.optimizer, model_tensors(1007));
  EXPECT_EQ(c.state.step, 7);
  EXPECT_EQ(c.state.data_cursor, 7ull * 1000003ull + (uint64_t(1) << 40));
  EXPECT_EQ(c.state.rng_state, "rng-7");
  EXPECT_EQ(c.state.config_hash, "abcdef0123456789");
  std::map<std::string, std::string> meta;
  rt::read_safetensors(d + "/model.safetensors", &meta);
  EXPECT_EQ(meta.at("n_layer"), "2");
  // Saving the same step again replaces it cleanly.
  EXPECT_EQ(save(7), d);
  EXPECT_NO_THROW(rt::load_checkpoint(d));
}

TEST_F(CheckpointFilesTest, FlippedByteIsDetected) {
  const std::string d = save(3);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const fs::path p = fs::path(d) / file;
    const std::string original = read_all(p);
    std::string bad = original;
    bad[bad.size() - 5] ^= 0x10;  // inside the last tensor's data
    write_all(p, bad);
    const std::string e = error_of([&] { rt::load_checkpoint(d); });
    EXPECT_NE(e.find(std::string(file) + " is corrupted (checksum"), std::string::npos) << e;
    write_all(p, original);
  }
  EXPECT_NO_THROW(rt::load_checkpoint(d));
  // A flipped byte in the header is caught by the safetensors reader itself.
  const fs::path p = fs::path(d) / "model.safetensors";
  std::string bad = read_all(p);
  bad[9] = '#';
  write_all(p, bad);
  const std::string e = error_of([&] { rt::read_safetensors(p.string(), nullptr); });
  EXPECT_NE(e.find("model.safetensors' is corrupted: the JSON header does not parse"), std::string::npos) << e;
}

TEST_F(CheckpointFilesTest, TruncationIsDetected) {
  const std::string d = save(4);
  const fs::path p = fs::path(d) / "optimizer.safetensors";
  const std::string original = read_all(p);
  write_all(p, original.substr(0, original.size() - 100));
  std::string e = error_of([&] { rt::load_checkpoint(d); });
  EXPECT_NE(e.find("optimizer.safetensors has"), std::string::npos) << e;
  EXPECT_NE(e.find("(truncated or replaced)"), std::string::npos) << e;
  e = error_of([&] { rt::read_safetensors(p.string(), nullptr); });
  EXPECT_NE(e.find("(truncated)"), std::string::npos) << e;
  write_all(p, original.substr(0, 5));
  e = error_of([&] { rt::read_safetensors(p.string(), nullptr); });
  EXPECT_NE(e.find("fewer than the 8-byte header length"), std::string::npos) << e;
  // A missing state.json means an incomplete checkpoint.
  fs::remove(fs::path(d) / "state.json");
  e = error_of([&] { rt::load_checkpoint(d); });
  EXPECT_NE(e.find("has no state.json: it is incomplete"), std::string::npos) << e;
  EXPECT_EQ(rt::latest_checkpoint(lineage()), "");
}

TEST_F(CheckpointFilesTest, CrashMidSaveKeepsPreviousCheckpoint) {
  const std::string good = save(10);
  ::setenv("RINGTRAIN_TEST_CRASH_IN_SAVE", "1", 1);
  const std::string e = error_of([&] { save(20); });
  EXPECT_NE(e.find("simulated crash"), std::string::npos) << e;
  ::unsetenv("RINGTRAIN_TEST_CRASH_IN_SAVE");
  EXPECT_TRUE(fs::exists(fs::path(run_dir()) / "checkpoints" / ".tmp_step_20" / "model.safetensors"))
      << "the hook should leave a partial temp dir behind";
  EXPECT_FALSE(fs::exists(fs::path(run_dir()) / "checkpoints" / "step_20"));
  EXPECT_EQ(rt::latest_checkpoint(lineage()), good);
  const rt::LoadedCheckpoint c = rt::load_checkpoint(good);
  EXPECT_EQ(c.state.step, 10);
  expect_same(c.model, model_tensors(10));
  // A directory that looks like a checkpoint but lacks state.json is ignored too.
  fs::create_directories(fs::path(run_dir()) / "checkpoints" / "step_99");
  fs::create_directories(fs::path(run_dir()) / "checkpoints" / "step_x1");
  EXPECT_EQ(rt::latest_checkpoint(lineage()), good);
  // The next save succeeds and clears the leftover.
  const std::string next = save(20);
  EXPECT_EQ(rt::latest_checkpoint(lineage()), next);
  EXPECT_FALSE(fs::exists(fs::path(run_dir()) / "checkpoints" / ".tmp_step_20"));
}

TEST_F(CheckpointFilesTest, KeepLastK) {
  for (int64_t step : {100, 200, 300, 400, 500}) save(step, 2);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir()) / "checkpoints"))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step_400", "step_500"}));
  EXPECT_EQ(rt::latest_checkpoint(lineage()), (fs::path(run_dir()) / "checkpoints" / "step_500").string());
  // Numeric, not lexicographic, order: step_1000 is newer than step_500.
  save(1000, 2);
  EXPECT_EQ(rt::latest_checkpoint(lineage()), (fs::path(run_dir()) / "checkpoints" / "step_1000").string());
  EXPECT_FALSE(fs::exists(fs::path(run_dir()) / "checkpoints" / "step_400"));
}

TEST_F(CheckpointFilesTest, BadSafetensorsHeadersAreNamed) {
  const std::string path = (dir_ / "h.safetensors").string();
  auto with_header = [&](const std::string& json, size_t data_bytes) {
    std::string s(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(s.data(), &n, 8);
    write_all(path, s + json + std::string(data_bytes, '\0'));
    return error_of([&] { rt::read_safetensors(path, nullptr); });
  };
  EXPECT_NE(with_header(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", 4).find("dtype \"BF16\""),
            std::string::npos);
  EXPECT_NE(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8).find("shape needs 12"),
            std::string::npos);
  EXPECT_NE(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12).find("trailing bytes"),
            std::string::npos);
  EXPECT_NE(with_header(R"({"a":{"dtype":"F32","shape":[2]}})", 8).find("lacks dtype, shape or data_offsets"),
            std::string::npos);
  EXPECT_EQ(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8), "<no error>");
}

}  // namespace
