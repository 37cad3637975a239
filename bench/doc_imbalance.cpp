// The ring balance table of packed documents (parallel/schedule/doc_balance.h, parallel/schedule/ring_tile_cost.h): for
// each
// document-length mix, cp in {2, 4, 8} and T in {16K, 128K}, per layout (contiguous, zigzag, striped, docpack,
// balanced), as mean and worst over seeded sample windows:
//   - the pair imbalance: sum over ring steps of the slowest rank's visible pairs over the sum of the mean;
//   - the work efficiency: the kernels' tile cost of one whole call over the sample divided by the sum of the tile
//     costs of all (rank, step) calls (what bench_doc_ring_steps' whole / ring-in-sequence time ratio measures);
//   - for balanced, the ring efficiency: whole tile cost / (cp * critical path), the critical path being the sum
//     over steps of the slowest rank's tile cost (1 = a perfect cp-fold speed-up of the kernels' work);
// and the host time balanced takes per sample (balanced_ring_order: every candidate priced), which the loader pays.
//   bench_doc_imbalance [--doc-lengths FILE] [--samples N]
//   bench_doc_imbalance --features FILE [--cp 8] [--heads 16] [--dispatch-planned-with CALL,QUERY,FULL,EDGE]
// --features: the time model's inputs for one sample whose document lengths FILE lists (one per line, the sample is
// their sum): one JSON line per candidate of balanced (parallel/schedule/doc_balance.h) with, per ring step t and rank
// r, the
// call's tiles (full, partial, active query tiles; none where the call does not run), the whole call's tiles, the
// model's predicted critical path (with and without communication) and whether balanced picks it. The fit of the
// model's coefficients (bench/fit_ring_time_model.py) reads these lines. The dispatch's greedy weighs calls by the
// forward model, so a dispatch measured under other coefficients is rebuilt with them (--dispatch-planned-with: the
// forward call_us, query_tile_us, full_us, edge_us); its predicted times stay the compiled model's, `pick` too.
//   bench_doc_imbalance --list-candidates FILE [--cp 8] [--heads 16] [--kv-heads H] [--d 128] [--json OUT]
// --list-candidates: the chooser's candidates for the sample FILE lists, ring and gather, with their predicted times
// and the pick (bench/doc_candidates.h; the same listing as bench_doc_ring_steps --list-candidates, without CUDA).
//   bench_doc_imbalance --gather-features FILE --candidate LABEL [--cp 8] [--heads 16] [--own-split M,M,...]
// --gather-features: the gather scheme's calls of one candidate of the chooser (its label, e.g.
// 'gather:gatherpack(1)'), per rank the tiles [full, partial, active query tiles] of the own call, the gathered call
// and the own backward's parts A (own key rows [0, m)) and B ([m, n)), null where a call does not run, as one JSON
// line; m per rank from --own-split (what a measured row ran: its own_split_m), else the compiled model's
// (predict_own_bwd_split). Its rows received per rank too, to check the plan is the one measured.
// bench/fit_ring_time_model.py --gather fits the per-call model to measured gather rows with these.
// Mixes: FILE (default tests/data/python_stdlib_doc_lengths.txt), windows at seeded offsets into the stream of
// its documents; a seeded log-normal (median 2048 tokens, sigma 1.5: a long tail); short (uniform 1K-4K) and
// short_long (3 in 4 short, else 8K-32K), as bench/doc_attention_side_by_side.py draws them; one document per sample.
// docpack: the best of its split thresholds by balanced's rule. Prints markdown tables
// (bench/results/*-doc-imbalance.md records them).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "bench/doc_candidates.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/doc_dispatch.h"
#include "parallel/schedule/gather_plan.h"
#include "parallel/schedule/ring_schedule.h"

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

// --features: one JSON line per candidate (see the header), for the sample FILE lists, at cp ranks and `heads` heads.
int print_features(const std::string& lengths_path, int cp, int64_t heads, const std::string& dispatch_planned_with) {
  const std::vector<int64_t> lengths = read_doc_lengths(lengths_path);
  int64_t T = 0;
  for (int64_t L : lengths) T += L;
  if (cp < 1 || T % cp != 0) {
    std::fprintf(stderr, "bench_doc_imbalance --features: %s holds %lld tokens, not a multiple of --cp %d; give a "
                         "sample whose length cp divides\n", lengths_path.c_str(), (long long)T, cp);
    return 2;
  }
  const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, T);  // (T) by position
  std::vector<int64_t> natural(static_cast<size_t>(T));                    // (T) position order
  for (int64_t c = 0; c < T; ++c) natural[size_t(c)] = c;
  const RingTileCost whole = ring_tile_cost(starts, natural, 1);
  RingShape shape;
  shape.heads = heads, shape.kv_heads = heads;
  std::vector<RingCandidate> cands = ring_candidates(starts, cp, shape, /*with_orders=*/false);
  const size_t pick = pick_balanced(cands);
  if (!dispatch_planned_with.empty()) {
    KernelTimeModel weights;
    if (std::sscanf(dispatch_planned_with.c_str(), "%lf,%lf,%lf,%lf", &weights.call_us, &weights.query_tile_us,
                    &weights.full_us, &weights.edge_us) != 4) {
      std::fprintf(stderr, "bench_doc_imbalance --features: --dispatch-planned-with '%s' is not four numbers; give "
                           "the forward call_us,query_tile_us,full_us,edge_us, e.g. 20,0.003,0.007,0.0105\n",
                   dispatch_planned_with.c_str());
      return 2;
    }
    const std::vector<int64_t> begins = document_begins(starts);  // (documents + 1)
    for (RingCandidate& c : cands)
      if (c.name == "dispatch") {
        c.spans = dispatch_ring_spans(begins, cp, 0, &weights);
        c.hops = ring_hop_plan_for_spans(begins, c.spans, cp);
        const std::vector<double> runs(c.hops.visible.begin(), c.hops.visible.end());  // (cp*cp) calls with a pair
        c.tiles = ring_tile_cost_for_rows(starts, ring_tile_rows(c.spans, T, cp), cp, runs);
        c.time = predict_ring_time(c.tiles, c.hops, whole, T / cp, shape);
      }
  }
  for (size_t k = 0; k < cands.size(); ++k) {
    const RingCandidate& c = cands[k];
    const RingTimePrediction& p = c.time;
    std::printf("{\"candidate\": \"%s\", \"name\": \"%s\", \"pick\": %s, \"T\": %lld, \"cp\": %d, \"heads\": %lld, "
                "\"whole\": [%.0f, %.0f, %.0f], \"model_fwd_us\": %.3f, \"model_bwd_us\": %.3f, "
                "\"model_fwd_compute_us\": %.3f, \"model_bwd_compute_us\": %.3f, \"calls\": [",
                c.label().c_str(), c.name.c_str(), k == pick ? "true" : "false", (long long)T, cp, (long long)heads,
                whole.full_tiles[0], whole.partial_tiles[0], whole.active[0], p.fwd_us, p.bwd_us, p.fwd_compute_us,
                p.bwd_compute_us);
    bool first = true;  // [t, r, full, partial, active] per call that runs: step t, rank r, block ring_source(r, t)
    for (int t = 0; t < cp; ++t)
      for (int r = 0; r < cp; ++r) {
        const size_t i = size_t(r * cp + ring_source(r, t, cp));
        if (!c.tiles.runs[i]) continue;
        std::printf("%s[%d, %d, %.0f, %.0f, %.0f]", first ? "" : ", ", t, r, c.tiles.full_tiles[i],
                    c.tiles.partial_tiles[i], c.tiles.active[i]);
        first = false;
      }
    std::printf("]}\n");
  }
  return 0;
}

// The sample FILE lists: document starts (T) by position; T must be a multiple of cp.
std::vector<int64_t> sample_from_file(const std::string& path, int cp) {
  const std::vector<int64_t> lengths = read_doc_lengths(path);
  int64_t T = 0;
  for (int64_t L : lengths) T += L;
  RT_CHECK(cp >= 1 && T % cp == 0, path << " holds " << T << " tokens, not a multiple of --cp " << cp
                                        << "; give a sample whose length cp divides");
  return doc_starts_from_lengths(lengths, T);
}

// "[full, partial, active]" of call (r, r) of c, or null where it does not run.
std::string call_tiles_json(const RingTileCost& c, int r, int cp) {
  const size_t i = size_t(r * cp + r);
  if (!c.runs[i]) return "null";
  char b[96];
  std::snprintf(b, sizeof b, "[%.0f, %.0f, %.0f]", c.full_tiles[i], c.partial_tiles[i], c.active[i]);
  return b;
}

// --gather-features (see the header). own_split: (cp) key row m per rank, or empty for the model's.
int print_gather_features(const std::string& path, const std::string& label, int cp, const RingShape& shape,
                          const std::vector<int64_t>& own_split) {
  const std::vector<int64_t> starts = sample_from_file(path, cp);  // (T) by position
  const int64_t T = int64_t(starts.size()), n = T / cp;
  const std::vector<RingCandidate> cands = bench::chooser_candidates(starts, cp, shape);
  const RingCandidate& c = cands[bench::find_candidate(cands, label)];
  RT_CHECK(c.gather, "--gather-features: " << label << " is a ring candidate; give a gather one (gather:...)");
  RT_CHECK(own_split.empty() || own_split.size() == size_t(cp), "--own-split: " << own_split.size()
                                                                                 << " values for cp = " << cp);
  const KvGatherPlan plan = kv_gather_plan_for_spans(document_begins(starts), c.spans, cp);
  const KvGatherTiles tiles = kv_gather_tiles(starts, c.spans, plan, cp);
  const RingTileRows own = ring_tile_rows(c.spans, T, cp);
  std::vector<double> diagonal(size_t(cp) * size_t(cp), 0.0);  // (cp*cp) the own calls (r, r)
  std::vector<int64_t> m(static_cast<size_t>(cp));              // (cp) each rank's split row
  RingTileRows part_a = own, part_b = own;  // the own call's key tiles [0, m / 128) and [m / 128, end)
  for (int r = 0; r < cp; ++r) {
    diagonal[size_t(r * cp + r)] = 1;
    m[size_t(r)] = own_split.empty() ? predict_own_bwd_split(tiles, plan, r, shape).m : own_split[size_t(r)];
    RT_CHECK(m[size_t(r)] >= 0 && m[size_t(r)] < n && m[size_t(r)] % kCostKeyTileRows == 0,
             "--own-split: rank " << r << "'s m = " << m[size_t(r)] << " is not a multiple of " << kCostKeyTileRows
                                  << " below n = " << n);
    const std::vector<int64_t>& key = own.key[size_t(r)];  // (2 * key tiles) first, last position of each
    const size_t cut = size_t(2 * (m[size_t(r)] / kCostKeyTileRows));
    part_a.key[size_t(r)].assign(key.begin(), key.begin() + std::ptrdiff_t(m[size_t(r)] ? cut : key.size()));
    part_b.key[size_t(r)].assign(key.begin() + std::ptrdiff_t(m[size_t(r)] ? cut : key.size()), key.end());
  }
  std::vector<double> split_runs = diagonal;  // (cp*cp) part B runs only where the rank splits
  for (int r = 0; r < cp; ++r) split_runs[size_t(r * cp + r)] = m[size_t(r)] > 0 ? 1 : 0;
  const RingTileCost a = ring_tile_cost_for_rows(starts, part_a, cp, diagonal);
  const RingTileCost b = ring_tile_cost_for_rows(starts, part_b, cp, split_runs);
  std::printf("{\"candidate\": \"%s\", \"T\": %lld, \"cp\": %d, \"heads\": %lld, \"recv_rows\": [%s], "
              "\"own_split_m\": [%s], \"model_fwd_us\": %.3f, \"model_bwd_us\": %.3f, \"ranks\": [",
              label.c_str(), (long long)T, cp, (long long)shape.heads, bench::join_ints(plan.recv_rows).c_str(),
              bench::join_ints(m).c_str(), c.time.fwd_us, c.time.bwd_us);
  for (int r = 0; r < cp; ++r)
    std::printf("%s{\"own\": %s, \"gathered\": %s, \"own_a\": %s, \"own_b\": %s}", r ? ", " : "",
                call_tiles_json(tiles.own, r, cp).c_str(), call_tiles_json(tiles.gathered, r, cp).c_str(),
                call_tiles_json(a, r, cp).c_str(), call_tiles_json(b, r, cp).c_str());
  std::printf("]}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = RT_SOURCE_DIR "/tests/data/python_stdlib_doc_lengths.txt", features_path, dispatch_planned_with;
  std::string list_path, gather_path, candidate, json_out, own_split_arg;
  int samples = 8, features_cp = 8;
  int64_t features_heads = 16, kv_heads = 0, head_dim = 128;  // kv_heads 0: --heads
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--doc-lengths") && i + 1 < argc) path = argv[++i];
    else if (!std::strcmp(argv[i], "--samples") && i + 1 < argc) samples = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--features") && i + 1 < argc) features_path = argv[++i];
    else if (!std::strcmp(argv[i], "--cp") && i + 1 < argc) features_cp = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--heads") && i + 1 < argc) features_heads = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--dispatch-planned-with") && i + 1 < argc) dispatch_planned_with = argv[++i];
    else if (!std::strcmp(argv[i], "--list-candidates") && i + 1 < argc) list_path = argv[++i];
    else if (!std::strcmp(argv[i], "--gather-features") && i + 1 < argc) gather_path = argv[++i];
    else if (!std::strcmp(argv[i], "--candidate") && i + 1 < argc) candidate = argv[++i];
    else if (!std::strcmp(argv[i], "--own-split") && i + 1 < argc) own_split_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--kv-heads") && i + 1 < argc) kv_heads = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--d") && i + 1 < argc) head_dim = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_out = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--doc-lengths FILE] [--samples N] | --features FILE [--cp 8] [--heads 16] "
                           "[--dispatch-planned-with CALL,QUERY,FULL,EDGE] | --list-candidates FILE [--cp 8] "
                           "[--heads 16] [--kv-heads H] [--d 128] [--json OUT] | --gather-features FILE --candidate "
                           "LABEL [--cp 8] [--heads 16] [--kv-heads H] [--d 128] [--own-split M,M,...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!list_path.empty() || !gather_path.empty()) {
    RingShape shape;  // the time model's shape the candidates are priced for
    shape.heads = features_heads, shape.kv_heads = kv_heads ? kv_heads : features_heads, shape.head_dim = head_dim;
    if (shape.heads < 1 || shape.kv_heads < 1 || shape.heads % shape.kv_heads != 0 || head_dim < 1) {
      std::fprintf(stderr, "bench_doc_imbalance: needs --kv-heads dividing --heads and --d >= 1 (got heads %lld, "
                           "kv-heads %lld, d %lld)\n", (long long)shape.heads, (long long)shape.kv_heads,
                   (long long)head_dim);
      return 2;
    }
    if (!gather_path.empty() && candidate.empty()) {
      std::fprintf(stderr, "bench_doc_imbalance --gather-features: give --candidate LABEL (e.g. gather:contiguous)\n");
      return 2;
    }
    try {
      if (!list_path.empty()) {
        bench::print_candidate_listing(sample_from_file(list_path, features_cp), features_cp, shape, json_out);
        return 0;
      }
      std::vector<int64_t> own_split;  // (cp) or empty
      for (size_t at = 0; at < own_split_arg.size();) {
        const size_t comma = std::min(own_split_arg.find(',', at), own_split_arg.size());
        own_split.push_back(std::stoll(own_split_arg.substr(at, comma - at)));
        at = comma + 1;
      }
      return print_gather_features(gather_path, candidate, features_cp, shape, own_split);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_doc_imbalance: %s\n", e.what());
      return 1;
    }
  }
  if (!features_path.empty()) {
    try {
      return print_features(features_path, features_cp, features_heads, dispatch_planned_with);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_doc_imbalance --features: %s\n", e.what());
      return 1;
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
  {
    std::mt19937_64 rng(8);  // bench/doc_attention_side_by_side.py's short and short_long mixes
    Mix s{"short (1K-4K)", {}}, sl{"short_long (3/4 1K-4K, 1/4 8K-32K)", {}};
    for (int d = 0; d < 4096; ++d) {
      s.lengths.push_back(1024 + int64_t(rng() % 3073));
      sl.lengths.push_back(rng() % 4 == 0 ? 8192 + int64_t(rng() % 24577) : 1024 + int64_t(rng() % 3073));
    }
    mixes.push_back(s);
    mixes.push_back(sl);
  }
  mixes.push_back({"one document per sample", {}});
  enum { kContiguous, kZigzag, kStriped, kDocpack, kBalanced, kLayouts };
  const char* names[kLayouts] = {"contiguous", "zigzag", "striped", "docpack", "balanced"};
  struct Stat {
    double mean = 0, worst = 0;  // worst: max for imbalance, min for efficiencies
    bool seen = false;
    void add(double v, int samples, bool larger_is_worse) {
      mean += v / samples;
      worst = !seen ? v : (larger_is_worse ? std::max(worst, v) : std::min(worst, v));
      seen = true;
    }
  };
  struct Row {
    std::string head, picks;
    Stat imb[kLayouts], eff[kLayouts], ring_eff, ring_eff_bwd;
  };
  std::vector<Row> rows;
  double pick_ms_128k_cp8 = 0;
  int pick_count_128k_cp8 = 0;
  for (const Mix& mix : mixes)
    for (int64_t T : {int64_t(16384), int64_t(131072)})
      for (int cp : {2, 4, 8}) {
        Row row;
        char head[160];
        std::snprintf(head, sizeof head, "| %s | %lldK | %d |", mix.name.c_str(), (long long)(T / 1024), cp);
        row.head = head;
        for (int k = 0; k < samples; ++k) {
          const std::vector<int64_t> starts = sample_starts(mix, T, uint64_t(k));
          const double whole = whole_tile_cost(starts);
          const auto t0 = std::chrono::steady_clock::now();
          std::string chosen;
          const std::vector<int64_t> picked = balanced_ring_order(starts, cp, &chosen);  // what the loader runs
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          if (T == 131072 && cp == 8) pick_ms_128k_cp8 += ms, ++pick_count_128k_cp8;
          const std::vector<RingCandidate> cands = ring_candidates(starts, cp);  // every order, for the tables
          const size_t best = pick_balanced(cands);
          if (cands[best].order != picked || cands[best].label() != chosen) {
            std::fprintf(stderr, "balanced_ring_order picked %s, ring_candidates %s\n", chosen.c_str(),
                         cands[best].label().c_str());
            return 1;
          }
          const RingCandidate* at[kLayouts] = {nullptr, nullptr, nullptr, nullptr, &cands[best]};
          for (const RingCandidate& c : cands)  // docpack: the fastest predicted of its thresholds
            if (c.name == "docpack" && (!at[kDocpack] || c.time.total_us() < at[kDocpack]->time.total_us()))
              at[kDocpack] = &c;
          for (const RingCandidate& c : cands) {
            if (c.name == "zigzag") at[kZigzag] = &c;
            if (c.name == "striped") at[kStriped] = &c;
          }
          for (const RingCandidate& c : cands)
            if (c.name == "contiguous") at[kContiguous] = &c;
          for (int l = 0; l < kLayouts; ++l) {
            if (!at[l]) continue;
            row.imb[l].add(ring_imbalance(ring_pair_counts(starts, at[l]->order, cp), cp), samples, true);
            row.eff[l].add(whole / at[l]->tiles.total, samples, false);
          }
          row.ring_eff.add(cands[best].time.efficiency_fwd(), samples, false);
          row.ring_eff_bwd.add(cands[best].time.efficiency_bwd(), samples, false);
          const std::string pick = cands[best].label();
          if (row.picks.find(pick) == std::string::npos) row.picks += (row.picks.empty() ? "" : ", ") + pick;
        }
        rows.push_back(row);
      }
  auto cell = [](const Stat& s) {
    char b[48];
    if (!s.seen) return std::string(" - |");
    std::snprintf(b, sizeof b, " %.3f (%.3f) |", s.mean, s.worst);
    return std::string(b);
  };
  std::printf("Pair imbalance = sum over ring steps of max over ranks of visible pairs / sum of the mean; "
              "mean (worst) over %d sample windows. docpack(N[/runs]): documents of N tokens or more split over the ring[, runs of adjacent short documents kept together].\n\n",
              samples);
  std::printf("| mix | T | cp |");
  for (const char* n : names) std::printf(" %s |", n);
  std::printf(" balanced picks |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("%s", r.head.c_str());
    for (int l = 0; l < kLayouts; ++l) std::printf("%s", cell(r.imb[l]).c_str());
    std::printf(" %s |\n", r.picks.c_str());
  }
  std::printf("\nWork efficiency = kernel tiles of one whole call / sum of the tiles of all (rank, step) calls "
              "(64-row query x 128-key tiles, partial %.1f, skipped 0); ring efficiency = whole / (cp x critical "
              "path); mean (worst).\n\n", kPartialTileCost);
  std::printf("| mix | T | cp |");
  for (const char* n : names) std::printf(" work eff. %s |", n);
  std::printf(" predicted ring eff. balanced fwd | bwd |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("%s", r.head.c_str());
    for (int l = 0; l < kLayouts; ++l) std::printf("%s", cell(r.eff[l]).c_str());
    std::printf("%s%s\n", cell(r.ring_eff).c_str(), cell(r.ring_eff_bwd).c_str());
  }
  if (pick_count_128k_cp8 > 0)
    std::printf("\nbalanced per sample at T=128K, cp=8 (balanced_ring_order: every candidate priced, the pick's "
                "order built): %.1f ms mean on the host\n",
                pick_ms_128k_cp8 / pick_count_128k_cp8);
  return 0;
}
