// parallel.cp_scheme: auto and memory (framework/plan/cp_scheme_memory.h): auto runs the ring only when the gather
// scheme's buffers are what keeps a rank from fitting and the ring alone fits; it stays auto when everything
// fits, when nothing fits (the usual out-of-memory error), when the limit is unknown, and never touches an
// explicit cp_scheme or a config where the gather cannot run. The needs come from plan_point (measuring arenas,
// nothing allocated), so the limits below are placed between the two measured needs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "framework/config/config.h"
#include "framework/plan/cp_scheme_memory.h"
#include "framework/plan/plan_fit.h"

namespace rt {
namespace {

// A text file of 64 KiB whose lines are the documents (nothing is read to plan; the config's checks want the size).
struct TextFile {  // removed when the test program ends
  std::string path = (std::filesystem::temp_directory_path() /
                      ("rt_cp_scheme_memory_" + std::to_string(::getpid()) + ".txt")).string();
  TextFile() {
    std::ofstream f(path);
    for (int i = 0; i < 2048; ++i) f << "document " << i << " of thirty-two bytes, more or less\n";
  }
  ~TextFile() { std::filesystem::remove(path); }
};
std::string text_file() {
  static const TextFile file;
  return file.path;
}

std::string yaml() {
  return "model:\n  n_layer: 2\n  d_model: 64\n  n_head: 1\n  n_kv_head: 1\n  vocab_size: 256\n  d_ff: 256\n"
         "data:\n  source: bytes\n  path: " + text_file() + "\n  seq_len: 1024\n  documents: eot\n  eot_token: 10\n"
         "parallel:\n  cp: 4\n  cp_scheme: auto\n"
         "train:\n  batch_size: 4\n  steps: 1\n  checkpointing: none\n"
         "optim:\n  warmup_steps: 0\n"
         "device: cpu\n";
}

PlanLimits limit_of(double bytes) {
  PlanLimits l;
  l.device_bytes = bytes;
  return l;
}

double need(const Config& c) { return plan_point(c, Device::cpu(), PlanLimits{}).device_bytes(); }

TEST(CpSchemeMemory, TheDecision) {
  EXPECT_FALSE(cp_scheme_auto_falls_back({100, 80, 120})) << "everything fits";
  EXPECT_TRUE(cp_scheme_auto_falls_back({100, 80, 90})) << "only the ring fits";
  EXPECT_TRUE(cp_scheme_auto_falls_back({100, 90, 90})) << "the ring fits exactly";
  EXPECT_FALSE(cp_scheme_auto_falls_back({100, 80, 70})) << "nothing fits";
  EXPECT_FALSE(cp_scheme_auto_falls_back({100, 80, 0})) << "unknown limit";
  const double MiB = 1024.0 * 1024;
  const std::string note = cp_scheme_fallback_note({85.6 * MiB, 60.2 * MiB, 76.8 * MiB});
  for (const char* part : {"auto runs the ring only", "25.40 MiB", "85.60 MiB", "76.80 MiB", "60.20 MiB",
                           "Lower data.seq_len or train.batch_size", "parallel.cp_scheme: ring"})
    EXPECT_NE(note.find(part), std::string::npos) << part << " missing from: " << note;
}

TEST(CpSchemeMemory, AutoTakesTheRingOnlyWhenOnlyTheRingFits) {
  const Config base = parse_config_text(yaml(), {}, 0);
  Config ring_cfg = base;
  ring_cfg.parallel.cp_scheme = CpSchemeSetting::ring;
  const double with_gather = need(base), ring_only = need(ring_cfg);
  ASSERT_GT(with_gather, ring_only * 1.05) << "the gather's buffers must show in the arena";

  Config roomy = base;  // everything fits
  EXPECT_EQ(resolve_cp_scheme_memory(roomy, Device::cpu(), limit_of(with_gather * 2)), "");
  EXPECT_EQ(roomy.parallel.cp_scheme, CpSchemeSetting::automatic);

  Config tight = base;  // only the ring fits
  const std::string note = resolve_cp_scheme_memory(tight, Device::cpu(), limit_of((with_gather + ring_only) / 2));
  EXPECT_EQ(tight.parallel.cp_scheme, CpSchemeSetting::ring);
  EXPECT_NE(note.find("auto runs the ring only"), std::string::npos) << note;

  Config none = base;  // nothing fits: left to the out-of-memory error
  EXPECT_EQ(resolve_cp_scheme_memory(none, Device::cpu(), limit_of(ring_only / 2)), "");
  EXPECT_EQ(none.parallel.cp_scheme, CpSchemeSetting::automatic);

  Config unknown = base;  // no limit known (the trainer on CPU ranks)
  EXPECT_EQ(resolve_cp_scheme_memory(unknown, Device::cpu(), PlanLimits{}), "");
  EXPECT_EQ(unknown.parallel.cp_scheme, CpSchemeSetting::automatic);
}

TEST(CpSchemeMemory, ExplicitSchemesAndConfigsWithoutTheGatherAreLeftAlone) {
  const Config base = parse_config_text(yaml(), {}, 0);
  Config ring_cfg = base;
  ring_cfg.parallel.cp_scheme = CpSchemeSetting::ring;
  const PlanLimits between = limit_of((need(base) + need(ring_cfg)) / 2);
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"parallel.cp_scheme=gather"}, {"parallel.cp_scheme=ring"}, {"data.documents=none"},
           {"parallel.cp=1"}}) {
    Config c = parse_config_text(yaml(), sets, 0);
    const CpSchemeSetting before = c.parallel.cp_scheme;
    EXPECT_EQ(resolve_cp_scheme_memory(c, Device::cpu(), between), "") << sets[0];
    EXPECT_EQ(c.parallel.cp_scheme, before) << sets[0];
  }
}

}  // namespace
}  // namespace rt
