// TensorBoard event files (framework/run/tensorboard.h): the CRC-32C of TFRecord framing against published vectors,
// the tags, and a written file's framing read back. (tests/integration/tensorboard.sh reads real runs' files with
// TensorBoard's own reader and compares every value with metrics.jsonl.)
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "framework/run/crc32c.h"
#include "framework/run/tensorboard.h"
#include "framework/run/tensorboard_eval.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

TEST(Crc32c, PublishedVectors) {
  // RFC 3720 (iSCSI) appendix B.4, and the common check value of "123456789".
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[size_t(i)] = (unsigned char)i, down[size_t(i)] = (unsigned char)(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, ContinuesAcrossPieces) {
  std::mt19937 rng(std::random_device{}());
  std::vector<unsigned char> data(1000);
  for (auto& b : data) b = (unsigned char)(rng() & 0xFF);
  const size_t cut = rng() % data.size();
  EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, crc32c(data.data(), cut)), crc32c(data.data(), data.size()));
}

TEST(Crc32c, MaskedAsTfRecordWritesIt) {
  // TensorBoard's own masked_crc32c (tensorboard/compat/tensorflow_stub) gives these.
  EXPECT_EQ(mask_crc32c(crc32c("123456789", 9)), 0xC78AB0E5u);
  EXPECT_EQ(mask_crc32c(0), 0xA282EAD8u);
  const unsigned char length24[8] = {24, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(mask_crc32c(crc32c(length24, 8)), 0x224B7FA3u);
}

TEST(TensorBoard, TagsGroupEveryMetricsKey) {
  EXPECT_EQ(tensorboard_tag("step"), "");
  EXPECT_EQ(tensorboard_tag("total_steps"), "");
  EXPECT_EQ(tensorboard_tag("loss"), "train/loss");
  EXPECT_EQ(tensorboard_tag("loss_repeat_half"), "train/loss_repeat_half");
  EXPECT_EQ(tensorboard_tag("eval_loss"), "eval/eval_loss");
  EXPECT_EQ(tensorboard_tag("lr"), "optim/lr");
  EXPECT_EQ(tensorboard_tag("grad_norm"), "optim/grad_norm");
  EXPECT_EQ(tensorboard_tag("tok_per_s"), "perf/tok_per_s");
  EXPECT_EQ(tensorboard_tag("mfu"), "perf/mfu");
  EXPECT_EQ(tensorboard_tag("peak_mem_bytes"), "memory/peak_mem_bytes");
  EXPECT_EQ(tensorboard_tag("comm_exposed_ms"), "comm/comm_exposed_ms");
  EXPECT_EQ(tensorboard_tag("something_new"), "other/something_new");
}

// Reads a TFRecord file's records, checking each length and data CRC; fails the test on a bad one.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t at = 0;
  const auto u32 = [&](size_t p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | (unsigned char)bytes[p + size_t(i)];
    return v;
  };
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 16u) << "a truncated record at byte " << at;
    if (bytes.size() - at < 16) break;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | (unsigned char)bytes[at + size_t(i)];
    EXPECT_EQ(u32(at + 8), mask_crc32c(crc32c(bytes.data() + at, 8))) << "length CRC at byte " << at;
    EXPECT_LE(at + 16 + n, bytes.size());
    const std::string data = bytes.substr(at + 12, n);
    EXPECT_EQ(u32(at + 12 + n), mask_crc32c(crc32c(data.data(), data.size()))) << "data CRC at byte " << at;
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

TEST(TensorBoard, WriterFramesEveryEvent) {
  if (!tensorboard_built()) GTEST_SKIP() << "built without protobuf: " << tensorboard_off_line();
  const fs::path dir = fs::temp_directory_path() / ("rt_tb_" + std::to_string(std::random_device{}()));
  std::string first, second;
  {
    TensorBoardWriter w(dir.string(), 1);  // fresh: file_version only
    w.write_scalars(1, {{"train/loss", 2.5}, {"optim/lr", 1e-3}});
    w.write_scalars(2, {{"train/loss", NAN}});  // nothing finite: no event
    w.write_json_scalars(R"({"step":3,"total_steps":9,"loss":1.25,"grad_norm":null,"mfu":0.5})");
    w.write_scalars(4, {{"perf/eta_s", 0.0}});  // a zero is written (a proto3 field's zero would be left out)
    first = w.path();
  }
  {
    TensorBoardWriter w(dir.string(), 3);  // resumed at step 2: file_version, SessionLog START
    second = w.path();
  }
  EXPECT_LT(fs::path(first).filename().string(), fs::path(second).filename().string())
      << "a later start's file must sort after the earlier one";
  const std::vector<std::string> a = read_records(first), b = read_records(second);
  ASSERT_EQ(a.size(), 4u);  // version, step 1, step 3, step 4
  EXPECT_NE(a[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(a[1].find("train/loss"), std::string::npos);
  EXPECT_NE(a[2].find("perf/mfu"), std::string::npos);
  EXPECT_EQ(a[2].find("grad_norm"), std::string::npos) << "a null field must be left out";
  EXPECT_EQ(a[2].find("total_steps"), std::string::npos);
  EXPECT_NE(a[3].find(std::string("\x15\0\0\0\0", 5)), std::string::npos)
      << "the scalar 0 must be on the wire (field 2, fixed32 0)";
  ASSERT_EQ(b.size(), 2u);  // version, START
  fs::remove_all(dir);
}

TEST(TensorBoard, MoveAsideKeepsEarlierRuns) {
  const fs::path run = fs::temp_directory_path() / ("rt_tb_run_" + std::to_string(std::random_device{}()));
  EXPECT_EQ(move_tensorboard_aside(run.string()), "");  // nothing there
  fs::create_directories(run / "tensorboard");
  std::ofstream(run / "tensorboard" / "events.out.tfevents.1.h.1") << "x";
  const std::string moved = move_tensorboard_aside(run.string());
  EXPECT_EQ(moved, (run / "tensorboard.previous").string());
  EXPECT_TRUE(fs::exists(run / "tensorboard.previous" / "events.out.tfevents.1.h.1"));
  fs::create_directories(run / "tensorboard");
  std::ofstream(run / "tensorboard" / "events.out.tfevents.2.h.1") << "y";
  EXPECT_EQ(move_tensorboard_aside(run.string()), (run / "tensorboard.previous.2").string());
  fs::remove_all(run);
}

TEST(TensorBoard, EvalEventsGoUnderTheCheckpointsRunDir) {
  Config config;
  config.train.run_dir = "/nonexistent/configured";
  EXPECT_EQ(eval_events_dir(config, "loss-by-position", "/r/run/checkpoints/main/step_8"),
            "/r/run/tensorboard/eval/loss_by_position_step_8");
  EXPECT_EQ(eval_events_dir(config, "needle", "/r/run/checkpoints/main.b4/step_8/"),
            "/r/run/tensorboard/eval/needle_main.b4_step_8")
      << "two lineages' step_8 must not share a directory";
  EXPECT_EQ(eval_events_dir(config, "needle", "/r/run/checkpoints/step_3/model.safetensors"),
            "/r/run/tensorboard/eval/needle_step_3");
  EXPECT_EQ(eval_events_dir(config, "needle", "/elsewhere/model.safetensors"), "")
      << "no run directory: the checkpoint is not under checkpoints/ and train.run_dir does not exist";
}

}  // namespace
}  // namespace rt
