// The loader's schedule and `ringtrain plan --doc-lengths`' pick are one function's (schedule_batch,
// parallel/schedule/batch_schedule.h): on the document mixes of bench/doc_attention_side_by_side.py (stdlib, short,
// short_long, magi; built here in C++), the plan's windows fed through the loader (make_windows_loader, one window per
// batch) come out with the order the plan names and the scheme it counts, window by window, for cp_scheme ring,
// gather and auto, on the ring alone and with the all-to-all (the ring over cp / 2). A second copy of the choice
// that drifted (another shape, cp instead of the ring, another rule for the gather) fails here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/plan/plan_docs.h"
#include "parallel/schedule/doc_balance.h"

namespace rt {
namespace {

constexpr int32_t kEot = 3;
constexpr int64_t kT = 16384;   // tokens per window
constexpr int kCp = 8;
constexpr int kWindows = 3;

// Document lengths of mix `name` for windows of n tokens, `count` documents, seeded (the mixes of
// bench/doc_attention_side_by_side.py: stdlib the committed file's lengths in order; short uniform 1K..4K; short_long
// 3 in 4 short, else 8K..32K; magi a stdlib length scaled to n / 65536 and clipped to n / 4).
std::vector<int64_t> mix(const std::string& name, int64_t n, int count, const std::vector<int64_t>& stdlib) {
  std::mt19937_64 rng(std::hash<std::string>()(name) ^ uint64_t(n));
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
  std::vector<int64_t> out;
  for (int d = 0; d < count; ++d) {
    if (name == "stdlib") {
      out.push_back(stdlib[size_t(d) % stdlib.size()]);
    } else if (name == "short") {
      out.push_back(uniform(1024, 4096));
    } else if (name == "short_long") {
      out.push_back(rng() % 4 == 0 ? uniform(8192, 32768) : uniform(1024, 4096));
    } else {
      const double scaled = double(stdlib[rng() % stdlib.size()]) * double(n) / 65536.0;
      out.push_back(std::clamp<int64_t>(std::llround(scaled), 1, n / 4));
    }
  }
  return out;
}

std::string write_lengths(const std::string& name, const std::vector<int64_t>& lengths) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rt_doc_schedule_" + name + "_" + std::to_string(::getpid()) + ".txt")).string();
  std::ofstream f(path);
  for (int64_t l : lengths) f << l << "\n";
  return path;
}

Config config_for(CpSchemeSetting scheme, int cp_a2a) {
  Config c;
  c.model.n_layer = 2;
  c.model.n_head = 32;
  c.model.n_kv_head = 8;
  c.model.d_model = 32 * 128;
  c.model.vocab_size = 16;
  c.data.seq_len = int(kT);
  c.data.documents = "eot";
  c.data.eot_token = kEot;
  c.parallel.cp = kCp;
  c.parallel.cp_a2a = cp_a2a;
  c.parallel.layout = "balanced";
  c.parallel.cp_scheme = scheme;
  c.train.batch_size = 1;
  return c;
}

// A window whose documents start where `starts` says: EOT at each document's first token, 1 elsewhere.
Window window_of(const std::vector<int64_t>& starts) {
  Window w;
  w.tokens.assign(starts.size(), 1);     // (T)
  w.targets.assign(starts.size(), -1);   // (T)
  for (size_t p = 0; p < starts.size(); ++p) {
    if (p > 0 && starts[p] == int64_t(p)) w.tokens[p] = kEot;
    if (p > 0) w.targets[p - 1] = w.tokens[p];
  }
  return w;
}

TEST(DocScheduleAgreement, TheLoaderRunsWhatThePlanPicksOnEveryMix) {
  const std::vector<int64_t> stdlib = read_doc_lengths(RT_TEST_DATA_DIR "/python_stdlib_doc_lengths.txt");
  std::set<std::string> labels_seen;
  std::set<CpScheme> auto_schemes_seen;
  for (const std::string name : {"stdlib", "short", "short_long", "magi"}) {
    const std::vector<int64_t> lengths = mix(name, kT, 64, stdlib);
    const std::string path = write_lengths(name, lengths);
    const std::vector<std::vector<int64_t>> windows = doc_length_windows(lengths, kT, kWindows);
    for (CpSchemeSetting scheme : {CpSchemeSetting::ring, CpSchemeSetting::gather, CpSchemeSetting::automatic})
      for (int u : {1, 2}) {
        SCOPED_TRACE(name + " cp_scheme " + cp_scheme_setting_name(scheme) + " cp_a2a " + std::to_string(u));
        const Config c = config_for(scheme, u);
        const DocLengthPlan plan = doc_length_plan(c, path, kWindows);
        ASSERT_EQ(plan.window_labels.size(), size_t(kWindows));
        ASSERT_EQ(plan.window_schemes.size(), size_t(kWindows));
        std::vector<Window> fed;
        for (const std::vector<int64_t>& starts : windows) fed.push_back(window_of(starts));
        LoaderRank rank;
        rank.cp = kCp, rank.cp_rank = kCp - 1, rank.ring = kCp / u, rank.layout = "balanced";
        std::unique_ptr<DataLoader> loader = make_windows_loader(c, rank, fed);
        for (int k = 0; k < kWindows; ++k) {
          const Batch b = loader->next();
          EXPECT_EQ(b.ring_layout, plan.window_labels[size_t(k)]) << "window " << k;
          EXPECT_EQ(b.cp_scheme, plan.window_schemes[size_t(k)]) << "window " << k;
          // The loader's document starts are the plan's window (so the two looked at the same documents).
          std::vector<int64_t> starts(static_cast<size_t>(kT));  // (T) by position
          for (int64_t col = 0; col < kT; ++col) starts[size_t(b.doc_pos[size_t(col)])] = b.doc_start[size_t(col)];
          EXPECT_EQ(starts, windows[size_t(k)]) << "window " << k;
          if (scheme != CpSchemeSetting::automatic) {
            EXPECT_EQ(b.cp_scheme, scheme == CpSchemeSetting::gather ? CpScheme::gather : CpScheme::ring);
          }
          if (scheme == CpSchemeSetting::automatic) auto_schemes_seen.insert(b.cp_scheme);
          labels_seen.insert(b.ring_layout);
        }
      }
    std::filesystem::remove(path);
  }
  // The mixes make the chooser work: more than one order is picked, so an agreement is not a constant's.
  EXPECT_GE(labels_seen.size(), 3u);
  EXPECT_FALSE(auto_schemes_seen.empty());
}

}  // namespace
}  // namespace rt
