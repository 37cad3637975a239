// The one resolve step (framework/plan/resolve.h): every auto of a config settled once, each by the function that
// decides it (the a2a chooser on the first samples, resolved_layout, the cp_scheme memory rule, plan_generate's
// chunk), with one row per auto; train, eval and plan settle the same config alike; the table is printed once, to
// stderr; memory decides cp_scheme: auto as the limit says; plan prices cp_a2a on causal samples when the data
// cannot be read, where train refuses; a config without auto has no table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/plan/a2a_auto.h"
#include "framework/plan/plan_generate.h"
#include "framework/plan/resolve.h"
#include "framework/plan/trainer_setup.h"
#include "kernels/device_memory.h"
#include "tests/unit/test_util.h"

namespace rt {
namespace {

// A text file whose lines are the documents (byte-level, EOT = '\n').
struct TextFile {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("rt_resolve_" + std::to_string(::getpid()) + ".txt")).string();
  TextFile() {
    std::ofstream f(path);
    for (int i = 0; i < 2048; ++i)
      f << "document " << i << (i % 3 ? " is short" : " is a good deal longer than that") << "\n";
  }
  ~TextFile() { std::filesystem::remove(path); }
};
const std::string& text_file() {
  static const TextFile file;
  return file.path;
}

// Every field the resolve step settles left at auto (device: cpu, so that a GPU machine settles the same).
std::string yaml() {
  return "model:\n  n_layer: 2\n  d_model: 64\n  n_head: 4\n  n_kv_head: 4\n  vocab_size: 256\n  d_ff: 256\n"
         "data:\n  source: bytes\n  path: " + text_file() + "\n  seq_len: 1024\n  documents: eot\n  eot_token: 10\n"
         "parallel:\n  cp: 4\n  cp_a2a: auto\n  layout: auto\n  cp_scheme: auto\n"
         "train:\n  batch_size: 4\n  steps: 1\n  checkpointing: none\n  mlp_chunk: -1\n"
         "optim:\n  warmup_steps: 0\n"
         "device: cpu\n";
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

std::map<std::string, ResolvedRow> rows_by_key(const Resolved& r) {
  std::map<std::string, ResolvedRow> m;
  for (const ResolvedRow& row : r.rows) {
    EXPECT_EQ(m.count(row.key), 0u) << row.key << " has two rows";
    m[row.key] = row;
  }
  return m;
}

ResolveInputs with_limit(double bytes) {
  ResolveInputs in;
  in.limits = [bytes](const Config&, Device, std::string* from) {
    *from = "the test's limit";
    PlanLimits l;
    l.device_bytes = bytes;
    return l;
  };
  return in;
}

TEST(Resolve, EachAutoOnceByTheFunctionThatDecidesIt) {
  const Config c = parse_config_text(yaml(), {}, 0);
  const Resolved r = resolve_autos(c, Purpose::train);
  const std::map<std::string, ResolvedRow> rows = rows_by_key(r);
  for (const char* key : {"parallel.cp_a2a", "parallel.layout", "parallel.cp_scheme", "train.mlp_chunk",
                          "parallel.comm"})
    EXPECT_EQ(rows.count(key), 1u) << key << "\n" << r.table();
  EXPECT_EQ(rows.count("device"), 0u) << "device: cpu is not auto";
  // cp_a2a: the chooser's pick on the first training samples' documents, written into the config.
  const A2aChoice direct = a2a_choice_for(c, first_samples_doc_starts(c, kA2aAutoSamples));
  EXPECT_EQ(r.config.parallel.cp_a2a, direct.pick);
  EXPECT_FALSE(r.config.parallel.cp_a2a_auto());
  EXPECT_EQ(rows.at("parallel.cp_a2a").resolved, std::to_string(direct.pick));
  EXPECT_NE(rows.at("parallel.cp_a2a").why.find("u=2 "), std::string::npos) << rows.at("parallel.cp_a2a").why;
  // layout: resolved_layout on the settled ring (documents on a ring: balanced; the config keeps auto).
  EXPECT_EQ(r.layout, resolved_layout(r.config));
  EXPECT_EQ(rows.at("parallel.layout").resolved, r.layout);
  EXPECT_EQ(r.config.parallel.layout, "auto");
  // cp_scheme: no limit is known on CPU ranks, so auto stays per batch.
  EXPECT_EQ(rows.at("parallel.cp_scheme").resolved, r.config.parallel.ring() > 1 ? "per batch" : "ring");
  EXPECT_EQ(r.config.parallel.cp_scheme, CpSchemeSetting::automatic);
  // device: auto resolves like resolve_device (cpu here unless a GPU is visible).
  const Resolved dev = resolve_autos(parse_config_text(yaml(), {"device=auto"}, 0), Purpose::train);
  ASSERT_EQ(rows_by_key(dev).count("device"), 1u);
  EXPECT_EQ(rows_by_key(dev).at("device").resolved, resolve_device(dev.config).str());
}

TEST(Resolve, TrainEvalAndPlanSettleTheSameConfigAlike) {
  const Config c = parse_config_text(yaml(), {}, 0);
  const Resolved train = resolve_autos(c, Purpose::train);
  for (Purpose purpose : {Purpose::eval, Purpose::plan}) {
    SCOPED_TRACE(purpose_name(purpose));
    const Resolved other = resolve_autos(c, purpose);
    EXPECT_EQ(other.config.parallel.cp_a2a, train.config.parallel.cp_a2a);
    EXPECT_EQ(other.config.parallel.cp_scheme, train.config.parallel.cp_scheme);
    EXPECT_EQ(other.layout, train.layout);
    EXPECT_EQ(other.device.str(), train.device.str());
    ASSERT_EQ(other.rows.size(), train.rows.size()) << other.table() << train.table();
    for (size_t i = 0; i < train.rows.size(); ++i) {
      EXPECT_EQ(other.rows[i].key, train.rows[i].key);
      EXPECT_EQ(other.rows[i].resolved, train.rows[i].resolved) << train.rows[i].key;
    }
  }
}

TEST(Resolve, TheTableIsPrintedOnceToStderr) {
  const Resolved r = resolve_autos(parse_config_text(yaml(), {}, 0), Purpose::eval);
  const std::string table = r.table();
  EXPECT_EQ(count_of(table, "start-up (eval)"), 1u) << table;
  for (const ResolvedRow& row : r.rows) EXPECT_EQ(count_of(table, "  " + row.key + ": "), 1u) << table;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  print_resolved(r);
  const std::string out = testing::internal::GetCapturedStdout(), err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "") << "stdout is the command's result";
  EXPECT_EQ(err, table);
  // Nothing auto: no table at all.
  const std::vector<std::string> sets = {"parallel.cp_a2a=1", "parallel.layout=zigzag", "parallel.cp_scheme=ring",
                                         "train.mlp_chunk=0", "parallel.comm=mpi"};
  const Config fixed = parse_config_text(yaml(), sets, 0);
  const Resolved none = resolve_autos(fixed, Purpose::train);
  EXPECT_TRUE(none.rows.empty()) << none.table();
  EXPECT_EQ(none.table(), "");
}

TEST(Resolve, MemoryDecidesCpSchemeAutoAsTheLimitSays) {
  const Config c = parse_config_text(yaml(), {"parallel.cp_a2a=1"}, 0);
  Config ring = c;
  ring.parallel.cp_scheme = CpSchemeSetting::ring;
  const double with_gather = plan_point(c, Device::cpu(), {}).device_bytes();
  const double ring_only = plan_point(ring, Device::cpu(), {}).device_bytes();
  ASSERT_GT(with_gather, ring_only);
  const Resolved roomy = resolve_autos(c, Purpose::train, with_limit(with_gather * 2));
  EXPECT_EQ(roomy.config.parallel.cp_scheme, CpSchemeSetting::automatic);
  EXPECT_EQ(rows_by_key(roomy).at("parallel.cp_scheme").resolved, "per batch");
  const Resolved tight = resolve_autos(c, Purpose::train, with_limit((with_gather + ring_only) / 2));
  EXPECT_EQ(tight.config.parallel.cp_scheme, CpSchemeSetting::ring);
  EXPECT_EQ(rows_by_key(tight).at("parallel.cp_scheme").resolved, "ring");
  EXPECT_NE(rows_by_key(tight).at("parallel.cp_scheme").why.find("auto runs the ring only"), std::string::npos);
  EXPECT_EQ(tight.limits_from, "the test's limit");
}

TEST(Resolve, PlanPricesCpA2aOnCausalSamplesWhenTheDataIsMissingWhereTrainRefuses) {
  Config c = parse_config_text(yaml(), {}, 0);
  c.data.path = text_file() + ".missing";
  EXPECT_NE(test::error_of([&] { resolve_autos(c, Purpose::train); }), "");
  ResolveInputs in;
  in.data_may_be_missing = true;
  const Resolved r = resolve_autos(c, Purpose::plan, in);
  EXPECT_FALSE(r.config.parallel.cp_a2a_auto());
  EXPECT_NE(rows_by_key(r).at("parallel.cp_a2a").why.find("could not be read here"), std::string::npos) << r.table();
}

TEST(Resolve, GenerateSettlesThePrefillChunkAsPlanGenerateDoes) {
  Config c = parse_config_text(yaml(), {"parallel.cp_a2a=1", "parallel.cp=2"}, 0);
  prepare_generate_config(c);
  ResolveInputs in = with_limit(1e12);
  in.prompt_tokens = 300, in.new_tokens = 8;
  const Resolved roomy = resolve_autos(c, Purpose::generate, in);
  ASSERT_TRUE(roomy.generate.has_value());
  EXPECT_EQ(roomy.generate->layout.chunk, 0);
  EXPECT_EQ(rows_by_key(roomy).at("generate --prefill-chunk").resolved, "one pass");
  // A limit below the one-pass prefill: chunks, as plan_generate picks them for that limit.
  const double one_pass = roomy.generate->device_bytes();
  in = with_limit(one_pass * 0.9);
  in.prompt_tokens = 300, in.new_tokens = 8;
  const Resolved tight = resolve_autos(c, Purpose::generate, in);
  const GeneratePlan direct = plan_generate(c, Device::cpu(), 300, 8, PrefillChunking{0, one_pass * 0.9, "x"});
  ASSERT_TRUE(tight.generate.has_value());
  EXPECT_EQ(tight.generate->layout.chunk, direct.layout.chunk);
  EXPECT_GT(direct.layout.chunk, 0) << "the limit must make it chunk";
  EXPECT_NE(rows_by_key(tight).at("generate --prefill-chunk").resolved.find("chunks"), std::string::npos);
  // An explicit chunk: no row (nothing was auto), the same plan.
  in.prefill_chunk = 64;
  const Resolved given = resolve_autos(c, Purpose::generate, in);
  EXPECT_EQ(rows_by_key(given).count("generate --prefill-chunk"), 0u);
  EXPECT_EQ(given.generate->layout.chunk, 64);
}

// `ringtrain plan --generate-context` resolves generate's autos as generate does (Purpose::generate on the prepared
// config), measuring a CUDA config without a GPU (planning); generate itself refuses device: cuda without one.
TEST(Resolve, PlanningResolvesAnotherCommandWithoutItsDevice) {
#ifndef RINGTRAIN_HAVE_CUDA
  GTEST_SKIP() << "a build without CUDA refuses device: cuda in the config";
#endif
  Config c = parse_config_text(yaml(), {"parallel.cp_a2a=1", "parallel.cp=2", "model.n_head=1", "model.n_kv_head=1",
                                        "device=cuda"}, 0);  // head dim 64, as the CUDA kernels take
  prepare_generate_config(c);
  ResolveInputs in = with_limit(1e12);
  in.prompt_tokens = 300, in.new_tokens = 8;
  in.planning = true;
  const Resolved planned = resolve_autos(c, Purpose::generate, in);
  EXPECT_TRUE(planned.device.is_cuda());
  ASSERT_TRUE(planned.generate.has_value());
  EXPECT_EQ(planned.generate->layout.chunk, 0);
  if (!cuda_available()) {
    in.planning = false;
    EXPECT_NE(test::error_of([&] { resolve_autos(c, Purpose::generate, in); }).find("device: cuda"), std::string::npos);
  }
}

}  // namespace
}  // namespace rt
