// The ring imbalance table of packed documents (parallel/doc_balance.h): for each document-length mix, cp in
// {2, 4, 8} and T in {16K, 128K}, the imbalance (sum over ring steps of the slowest rank's visible pairs over
// the sum of the mean) of contiguous, zigzag, striped and balanced, as mean and worst over seeded sample windows.
//   bench_doc_imbalance [--doc-lengths FILE] [--samples N]
// Mixes: FILE (default tests/data/python_stdlib_doc_lengths.txt), windows at seeded offsets into the stream of
// its documents; a seeded log-normal (median 2048 tokens, sigma 1.5: a long tail); one document per sample.
// Prints a markdown table (bench/results/*-doc-imbalance.md records one).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "parallel/doc_balance.h"

using namespace rt;

namespace {

struct Mix {
  std::string name;
  std::vector<int64_t> lengths;  // empty: one document per sample
};

// Document starts of sample `k` of a mix: a window of T tokens at a seeded document and offset.
std::vector<int64_t> sample_starts(const Mix& mix, int64_t T, uint64_t k) {
  if (mix.lengths.empty()) return std::vector<int64_t>(static_cast<size_t>(T), 0);
  std::mt19937_64 rng(1000 + k);
  const size_t doc = size_t(rng() % mix.lengths.size());
  const int64_t offset = int64_t(rng() % uint64_t(mix.lengths[doc]));
  return doc_starts_from_lengths(mix.lengths, T, doc, offset);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = RT_SOURCE_DIR "/tests/data/python_stdlib_doc_lengths.txt";
  int samples = 8;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--doc-lengths") && i + 1 < argc) path = argv[++i];
    else if (!std::strcmp(argv[i], "--samples") && i + 1 < argc) samples = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--doc-lengths FILE] [--samples N]\n", argv[0]);
      return 2;
    }
  }
  std::vector<Mix> mixes;
  mixes.push_back({"file:" + path.substr(path.find_last_of('/') + 1), read_doc_lengths(path)});
  {
    std::mt19937_64 rng(7);
    std::lognormal_distribution<double> ln(std::log(2048.0), 1.5);
    Mix m{"lognormal(median 2048, sigma 1.5)", {}};
    for (int d = 0; d < 4096; ++d) m.lengths.push_back(std::max<int64_t>(1, std::min<int64_t>(1 << 20, int64_t(ln(rng)))));
    mixes.push_back(m);
  }
  mixes.push_back({"one document per sample", {}});
  const Layout fixed[] = {Layout::contiguous, Layout::zigzag, Layout::striped};
  std::printf("imbalance = sum over ring steps of max over ranks of visible pairs / sum of the mean; "
              "mean (worst) over %d sample windows\n\n", samples);
  std::printf("| mix | T | cp | contiguous | zigzag | striped | balanced | balanced picks |\n|---|---|---|---|---|---|---|---|\n");
  for (const Mix& mix : mixes)
    for (int64_t T : {int64_t(16384), int64_t(131072)})
      for (int cp : {2, 4, 8}) {
        double mean[4] = {0, 0, 0, 0}, worst[4] = {0, 0, 0, 0};
        std::string picks;
        for (int k = 0; k < samples; ++k) {
          const std::vector<int64_t> starts = sample_starts(mix, T, uint64_t(k));
          for (int l = 0; l < 4; ++l) {
            std::string chosen;
            const std::vector<int64_t> order =
                l < 3 ? layout_ring_order(fixed[l], T, cp) : balanced_ring_order(starts, cp, &chosen);
            const double imb = ring_imbalance(ring_pair_counts(starts, order, cp), cp);
            mean[l] += imb / samples;
            worst[l] = std::max(worst[l], imb);
            if (l == 3 && picks.find(chosen) == std::string::npos) picks += (picks.empty() ? "" : ",") + chosen;
          }
        }
        std::printf("| %s | %lldK | %d |", mix.name.c_str(), (long long)(T / 1024), cp);
        for (int l = 0; l < 4; ++l) std::printf(" %.3f (%.3f) |", mean[l], worst[l]);
        std::printf(" %s |\n", picks.c_str());
      }
  return 0;
}
