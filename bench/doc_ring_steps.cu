// bench_doc_ring_steps: ringtrain's document-masked attention on one packed sample, on one GPU:
//   whole:  one call over the sample in natural order (attn_fwd_whole; attn_bwd_delta + zeroed dQ +
//           attn_bwd_block_fresh), the document mask AttnMask::docs: what a single-GPU run makes;
//   ring:   the kernel calls of a cp-rank ring (--cp, --layout, default 8 and balanced, the loader's choice with
//           documents), run one after another, as bench_ring_steps does for causal attention: per rank, state reset,
//           for each step t the block of rank ring_source(r, t, cp) with the mask of those rows (a step with no
//           visible pair is skipped, as RingAttention skips it), finalize; the backward per rank: delta, zeroed dQ,
//           attn_bwd_block per visible step into dQ and the source block's dK / dV. No communication.
//   ring critical path: each visible call timed alone; the sum over steps of the slowest rank's call (a ring step
//           waits for its slowest rank), the time a real compute-bound ring would take.
//   gather (--scheme gather): the gather scheme of parallel/schedule/gather_plan.h over the same order, instead of the
//   ring:
//           per rank its queries against its own keys and against exactly the key rows they see, gathered into one
//           buffer in position order; bench/doc_gather_steps.cuh says what is timed, the paths and the check.
// Sample: B = 1, N = the sum of the document lengths read from --lengths FILE (one per line, '#' comments;
// bench/doc_attention_side_by_side.py writes them), H = --h (16) query heads of d = --d (128), --kv-heads K / V
// heads (default H; fewer is GQA, e.g. --h 32 --kv-heads 8 for Llama-3-8B), bf16.
// TFLOP/s on visible pairs for every row: 4 d FLOPs per pair forward, 10 d backward (per head).
// Timing (--timing, bench/cuda_bench_util.cuh): queued (default), the mean of --reps (10) calls issued back to back
// with the host ahead of the GPU, after --warmup (3); lone, the median of --reps calls each timed alone on an idle
// GPU (the host's enqueue time included).
// Output: a table on stdout and, with --json FILE, one JSON object (kind "doc_ring_steps").
//
// --layout: contiguous, zigzag, striped, balanced, dispatch (the mask-area dispatch), doc-striped, docpack (the
// best of balanced's docpack candidates) or gatherpack (the best of its gatherpack candidates, priced for gather).
// --scheme auto: the chooser's pick among the ring and gather candidates (balanced_ring_choice), layout and scheme
// both; --layout is ignored. The model line gives the time model's critical path and bytes for the
// order (parallel/schedule/ring_time_model.h) and balanced's pick; the ring rows add MagiAttention's figure of merit.
// The plan line also gives the tile model's prediction (parallel/schedule/ring_tile_cost.h) of whole /
// ring-in-sequence.
// The time model's shape (RingShape) is --h / --kv-heads / --d: balanced's candidates are priced for it.
//   bench_doc_ring_steps --lengths FILE [--cp 8] [--layout balanced] [--scheme ring|gather|auto] [--d 128] [--h 16]
//                        [--kv-heads H] [--warmup 3] [--reps 10] [--timing queued|lone] [--no-ring] [--plan-only]
//                        [--json FILE] [--candidate LABEL] [--list-candidates] [--deliver model|none]
//                        [--bwd-work-list]
// --plan-only: the sample's pairs, the ring's skipped calls and imbalance, and with --scheme gather the gather plan
// (rows per rank, bytes, the model's path), computed on the host; no GPU needed. --no-ring: the whole call only.
// --candidate LABEL: any one candidate of the chooser (the ring and gather candidates --scheme auto chooses among),
// named exactly as RingCandidate::label() writes it, e.g. 'zigzag', 'docpack(4096/runs)', 'gather:gatherpack(0.5)':
// its layout and its scheme (so no --scheme with it; --layout is ignored).
// --doc-plans step (default) | call: step makes each distinct call's document set-up (tile summaries, spans, order)
// once and reuses it in every later call, as a training step does over its layers (kernels/attn_doc_plans.h); the
// warm-up calls make it, so the timed calls launch no set-up kernel. call: every call makes its own (before issue 46).
// The gather's one-launch forward and backward are in RingAttention's default form (issue 46), by its rule
// (parallel/cp/gather_list_form.h, shared with RingAttention): attn_fwd_work_list / attn_bwd_work_list (bwd v5's list
// mode) over the call's work lists where the list kernel runs the call, so the paths, the efficiencies and the JSON's
// path_* / eff_* / one_fwd_ms / one_bwd_ms hold the lists' times ("one_fwd_work_list" / "one_bwd_work_list" mark the
// ranks; the plan line "gather one-launch forms" names the rule's kernels); with RT_ATTN_WORK_LIST=0 in the
// environment they hold attn_fwd_whole_two_kv's / attn_bwd_block_fresh_two_kv's, as RingAttention then runs them. The
// other form is always timed beside each where the list runs, their bits compared: the "work list fwd" / "work list
// bwd" lines, and work_list_fwd_ms / two_kv_fwd_ms / work_list_*_bit_mismatches, work_list_bwd_ms / two_kv_bwd_ms /
// work_list_bwd_dkv_bit_mismatches / work_list_bwd_dq_rel in the JSON (bench/doc_gather_steps.cuh,
// bench/doc_gather_bwd_list.cuh). --work-list / --bwd-work-list (with --scheme gather) ask for that side by side with
// RT_ATTN_WORK_LIST=0 too; with the list on (the default) they change nothing in the paths (--bwd-work-list adds the
// backward's 64-row stage counts), and they stay accepted for the older commands in bench/NOTES.md and bench/results.
// --deliver model (with the gather scheme; none, the default, leaves it out): per receiving rank, the one-launch
// forward timed WITH the exchange under it on this GPU: its own-first work list (doc_work_list_ordered own_first) launched
// at t = 0 under ready flags, its gathered rows in place, a side stream raising the flag (a copy-engine copy of the
// epoch) at the NVLink model's exchange time C_kv after a 1-thread delay kernel (one SM at most until C_kv,
// <= 0.8% of the launch's throughput then; the stamp kernel's ~2-3 us are inside the timing). Printed beside the
// two-call and one-launch candidates per rank ("forward with comm per rank"), the forward's path with comm taking the
// best of the three per rank ("the best form per rank", t / o / d for each rank), the delivered result's bits against
// the same list with the flag preset ("bits vs preset"; they must be equal); JSON: fwd_comm_two_calls_ms,
// fwd_comm_one_launch_ms, fwd_comm_delivered_ms, fwd_comm_form, path_comm_fwd_best_ms, eff_comm_fwd_best,
// deliver_*. What is timed and how much the delivery perturbs it: bench/doc_gather_deliver.cuh.
// --bwd-work-list (with the gather scheme): the backward's side by side above also with RT_ATTN_WORK_LIST=0 (the paths
// then keep attn_bwd_block_fresh_two_kv, as RingAttention runs it), and per receiving rank the 64-row stages per head
// each form runs (JSON work_list_bwd_stages_list_two_kv_fewest). With --plan-only, host only: those stages
// (print_bwd_list_plan).
// --list-candidates: host only, no GPU: one line per candidate of the chooser for this sample, cp and shape, with its
// predicted fwd / bwd and the pick marked (bench/doc_candidates.h); with --json FILE the same as one JSON object.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "bench/doc_candidates.h"
#include "bench/doc_gather_plan.h"
#include "bench/doc_gather_report.cuh"
#include "bench/doc_gather_steps.cuh"
#include "kernels/attention.h"
#include "kernels/attn_doc_plans.h"
#include "kernels/cuda_api.h"
#include "kernels/ops.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/layout.h"
#include "parallel/schedule/ring_schedule.h"

using namespace rt;

namespace {

using bench::call_ms;
using Dev = bench::DeviceBuffer;

struct Timed {
  double fwd_ms = 0, bwd_ms = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int cp = 8, warmup = 3, reps = 10;
  int64_t D = 128, H = 16, Hkv = 0;  // Hkv 0: --h
  bool ring = true, plan_only = false, list_candidates = false, scheme_given = false, plans_per_step = true;
  bool work_list = false, deliver = false, bwd_work_list = false;
  std::string lengths_path, layout_str = "balanced", json_path, scheme = "ring", candidate;
  bench::CallTiming timing = bench::CallTiming::queued;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--lengths") lengths_path = next();
    else if (a == "--cp") cp = std::stoi(next());
    else if (a == "--layout") layout_str = next();
    else if (a == "--d") D = std::stoll(next());
    else if (a == "--h") H = std::stoll(next());
    else if (a == "--kv-heads") Hkv = std::stoll(next());
    else if (a == "--scheme") scheme = next(), scheme_given = true;
    else if (a == "--candidate") candidate = next();
    else if (a == "--list-candidates") list_candidates = true;
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--timing") {
      const std::string t = next();
      if (!bench::parse_call_timing(t, timing)) {
        std::fprintf(stderr, "bench_doc_ring_steps: --timing %s: valid timings are queued and lone\n", t.c_str());
        return 2;
      }
    } else if (a == "--doc-plans") {
      const std::string m = next();
      if (m != "step" && m != "call") {
        std::fprintf(stderr, "bench_doc_ring_steps: --doc-plans %s: valid are step and call\n", m.c_str());
        return 2;
      }
      plans_per_step = m == "step";
    } else if (a == "--no-ring") ring = false;
    else if (a == "--work-list") work_list = true;
    else if (a == "--bwd-work-list") bwd_work_list = true;
    else if (a == "--deliver") {
      const std::string d = next();
      if (d != "model" && d != "none") {
        std::fprintf(stderr, "bench_doc_ring_steps: --deliver %s: valid are model and none\n", d.c_str());
        return 2;
      }
      deliver = d == "model";
    }
    else if (a == "--plan-only") plan_only = true;
    else if (a == "--json") json_path = next();
    else {
      std::fprintf(stderr, "usage: bench_doc_ring_steps --lengths FILE [--cp 8] [--layout balanced] "
                           "[--scheme ring|gather|auto] [--d 128] [--h 16] [--kv-heads H] [--warmup 3] [--reps 10] "
                           "[--timing queued|lone] [--doc-plans step|call] [--no-ring] [--plan-only] [--json FILE] "
                           "[--candidate LABEL] [--list-candidates] [--work-list] [--bwd-work-list] "
                           "[--deliver model|none]\n");
      return 2;
    }
  }
  if (lengths_path.empty()) {
    std::fprintf(stderr, "bench_doc_ring_steps: --lengths FILE is required (one document length per line)\n");
    return 2;
  }
  if (Hkv == 0) Hkv = H;
  if (scheme != "ring" && scheme != "gather" && scheme != "auto") {
    std::fprintf(stderr, "bench_doc_ring_steps: --scheme %s: valid schemes are ring, gather and auto\n", scheme.c_str());
    return 2;
  }
  if (cp < 1 || H < 1 || Hkv < 1 || H % Hkv != 0) {
    std::fprintf(stderr, "bench_doc_ring_steps: needs cp >= 1 and --kv-heads dividing --h (got cp %d, h %ld, "
                         "kv-heads %ld)\n", cp, long(H), long(Hkv));
    return 2;
  }
  if (!candidate.empty() && (scheme_given || list_candidates)) {
    std::fprintf(stderr, "bench_doc_ring_steps: --candidate %s names its scheme and layout; leave out --scheme and "
                         "--list-candidates\n", candidate.c_str());
    return 2;
  }
  bool gather = scheme == "gather";
  try {
    const bool list_on = gather_work_list_from_env();  // RT_ATTN_WORK_LIST: unset or 1 the list, 0 two_kv
    const std::vector<int64_t> lengths = read_doc_lengths(lengths_path);
    int64_t N = 0;
    double pairs = 0;  // visible (query, key) pairs of the sample: sum of L (L + 1) / 2
    for (int64_t L : lengths) N += L, pairs += double(L) * double(L + 1) / 2;
    RT_CHECK(N % cp == 0, "bench_doc_ring_steps: the documents hold " << N << " tokens, not a multiple of cp=" << cp
                                                                      << "; cut the last document");
    const int64_t n = N / cp;
    const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, N);  // (N) by position
    std::string chosen = layout_str;
    std::vector<int64_t> order;  // (N) ring order: rank 0's positions, rank 1's, ...
    RingShape shape;  // the time model's shape: this run's heads, K/V heads and head dim
    shape.heads = H, shape.kv_heads = Hkv, shape.head_dim = D;
    if (list_candidates) {  // host only: the chooser's candidates and its pick
      bench::print_candidate_listing(starts, cp, shape, json_path);
      return 0;
    }
    std::vector<RingCandidate> cands = ring_candidates(starts, cp, shape);  // balanced's candidates, predicted
    const size_t pick = pick_balanced(cands);
    if (!candidate.empty()) {  // one candidate of the chooser by its label: layout and scheme
      const std::vector<RingCandidate> all = bench::chooser_candidates(starts, cp, shape);
      const RingCandidate& c = all[bench::find_candidate(all, candidate)];
      order = ring_order_from_spans(c.spans, N, cp);
      gather = c.gather;
      scheme = gather ? "gather" : "ring";
      layout_str = "candidate";
      chosen = c.label();
    } else if (scheme == "auto") {  // the chooser's pick among ring and gather candidates: layout and scheme
      const RingChoice choice = balanced_ring_choice(starts, cp, shape, /*with_gather=*/true);
      order = choice.order;
      gather = choice.gather;
      scheme = gather ? "gather" : "ring";
      chosen = "auto:" + choice.label;
    } else if (layout_str == "gatherpack") {  // the best gatherpack candidate by the gather scheme's predicted time
      std::vector<RingCandidate> packs;
      for (RingCandidate& c : ring_candidates(starts, cp, shape, true, true))
        if (c.name == "gatherpack") packs.push_back(std::move(c));
      RT_CHECK(!packs.empty(), "bench_doc_ring_steps: no gatherpack candidate (cp = 1?)");
      RingCandidate& best = packs[pick_balanced(packs)];
      chosen = best.label();
      order = std::move(best.order);
    } else if (layout_str == "dispatch" || layout_str == "doc-striped") {  // one candidate by name
      for (RingCandidate& c : cands)
        if (c.name == layout_str) order = c.order;
    } else if (layout_str == "docpack") {  // balanced's docpack candidates only (the best of them by balanced's rule)
      std::vector<RingCandidate> packs;
      for (RingCandidate& c : ring_candidates(starts, cp, shape))
        if (c.name == "docpack") packs.push_back(std::move(c));
      RT_CHECK(!packs.empty(), "bench_doc_ring_steps: balanced has no docpack candidate for this sample");
      RingCandidate& best = packs[pick_balanced(packs)];
      chosen = "docpack(" + std::to_string(best.split_min) + (best.run_max ? "/runs)" : ")");
      order = std::move(best.order);
    } else {
      const Layout layout = parse_layout(layout_str);
      order = layout == Layout::balanced ? balanced_ring_order(starts, cp, &chosen, shape)
                                         : layout_ring_order(layout, N, cp);
    }
    RT_CHECK(order.size() == size_t(N), "bench_doc_ring_steps: no " << layout_str << " candidate for this sample");
    const std::vector<double> work = ring_pair_counts(starts, order, cp);  // (cp*cp) pairs per (rank, source)
    // The time model (parallel/schedule/ring_time_model.h) for this order at this shape, and the chooser's pick.
    std::vector<int64_t> natural(static_cast<size_t>(N));  // (N) position order
    for (int64_t c = 0; c < N; ++c) natural[size_t(c)] = c;
    const RingHopPlan hops = ring_hop_plan_for_order(starts, order, cp);
    const RingTimePrediction predicted = predict_ring_time(ring_tile_cost(starts, order, cp, work), hops,
                                                           ring_tile_cost(starts, natural, 1), n, shape);
    std::printf("model: critical path fwd %.3f ms bwd %.3f ms (efficiency %.3f / %.3f), communication %.1f%% of it "
                "(NVLink model %.0f GB/s, %.0f us per hop); bytes per layer %.1f MiB of the ring's %.1f MiB; "
                "balanced picks %s\n",
                predicted.fwd_us * 1e-3, predicted.bwd_us * 1e-3, predicted.efficiency_fwd(), predicted.efficiency_bwd(),
                100 * predicted.comm_share(), LinkModel{}.bytes_per_us * 1e-3, LinkModel{}.hop_latency_us,
                predicted.bytes_per_layer / 1048576.0, predicted.ring_bytes_per_layer / 1048576.0,
                cands[pick].label().c_str());
    // The kernels' tile cost model (parallel/schedule/ring_tile_cost.h): what whole / ring-in-sequence should come to.
    const RingTileCost tiles = ring_tile_cost(starts, order, cp, work);
    const double model_work_eff = whole_tile_cost(starts) / tiles.total;
    const double model_ring_eff = whole_tile_cost(starts) / (cp * tiles.critical);
    std::vector<int64_t> nat_pos(static_cast<size_t>(N)), ring_pos(static_cast<size_t>(N)),
        ring_start(static_cast<size_t>(N));  // (1, N) int64 each
    for (int64_t c = 0; c < N; ++c) {
      nat_pos[size_t(c)] = c;
      ring_pos[size_t(c)] = order[size_t(c)];
      ring_start[size_t(c)] = starts[size_t(order[size_t(c)])];
    }

    int skipped = 0;  // ring calls with no visible pair (RingAttention skips them)
    for (int r = 0; r < cp; ++r)
      for (int s = 0; s < cp; ++s) skipped += work[size_t(r * cp + s)] > 0 ? 0 : 1;
    std::printf("sample: N %ld, %zu documents, %.0f visible pairs (%.4f of causal); cp=%d %s (%s): %d of %d calls "
                "skipped, imbalance %.3f; tile model: whole / ring work %.3f, whole / (cp x critical path) %.3f\n",
                long(N), lengths.size(), pairs, pairs / (double(N) * double(N + 1) / 2), cp, layout_str.c_str(),
                chosen.c_str(), skipped, cp * cp, ring_imbalance(work, cp), model_work_eff, model_ring_eff);
    if (deliver && !gather)
      std::printf("note: --deliver model applies to the gather scheme only; this run is the ring's (ignored)\n");
    bench::GatherBench gather_plan;  // --scheme gather: the plan of this order
    if (gather) {
      gather_plan = bench::gather_bench(starts, order, cp, shape);
      bench::print_gather_plan(gather_plan);
      bench::print_gather_forms(gather_plan, list_on);
      if (bwd_work_list && plan_only) bench::print_bwd_list_plan(gather_plan.plan, order, ring_start);
    }
    std::fflush(stdout);
    if (plan_only) return 0;
    if (!cuda_available()) {
      std::fprintf(stderr, "bench_doc_ring_steps: no CUDA device (--plan-only prints the sample's plan without one)\n");
      return 1;
    }
    cuda::init(0);
    bench::RingStepBuffers buf(N, H, D, Hkv);  // inputs drawn at random
    Dev d_nat_pos(size_t(N) * 8), d_nat_start(size_t(N) * 8), d_ring_pos(size_t(N) * 8),
        d_ring_start(size_t(N) * 8);  // (1, N) int64 each: the document mask on the device of q
    CUDA_CHECK(cudaMemcpy(d_nat_pos.p, nat_pos.data(), size_t(N) * 8, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_nat_start.p, starts.data(), size_t(N) * 8, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_ring_pos.p, ring_pos.data(), size_t(N) * 8, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_ring_start.p, ring_start.data(), size_t(N) * 8, cudaMemcpyHostToDevice));
    const int64_t* np = static_cast<const int64_t*>(d_nat_pos.p);
    const int64_t* ns = static_cast<const int64_t*>(d_nat_start.p);
    const int64_t* rp = static_cast<const int64_t*>(d_ring_pos.p);
    const int64_t* rs = static_cast<const int64_t*>(d_ring_start.p);
    // --doc-plans step: one plan per distinct call for the whole run (the mask arrays above stay as they are; the
    // gather's per-rank arrays start a new batch in measure_gather): cp ring calls per rank of n x n rows, the whole
    // call, the gather's few per rank; a call that finds no room makes its own set-up.
    const int64_t plan_words = (cp + 4) * attn_doc_plan_words(1, N, N) + 32 * (int64_t(cp) * cp + 64);
    bench::DeviceBuffer plan_space(plans_per_step ? size_t(plan_words) * 8 : 8);  // (plan_words) int64
    AttnDocPlans plans = plans_per_step ? AttnDocPlans(0, plan_space.p, plan_words) : AttnDocPlans();
    const AttnDocPlanScope plan_scope(plans_per_step ? &plans : nullptr);

    // The whole sample in natural order, one call each way.
    AttnMask whole_mask;
    whole_mask.docs.q_pos = whole_mask.docs.k_pos = np;
    whole_mask.docs.q_doc_start = ns;
    whole_mask.docs.q_stride = whole_mask.docs.k_stride = N;
    auto whole_fwd = [&] { buf.whole_fwd(whole_mask); };
    auto whole_bwd = [&] { buf.whole_bwd(whole_mask); };
    Timed t_whole;
    t_whole.fwd_ms = call_ms(timing, whole_fwd, warmup, reps);
    whole_fwd();
    t_whole.bwd_ms = call_ms(timing, whole_bwd, warmup, reps);

    // The ring's calls: rank r's rows are [r*n, (r+1)*n) of every buffer, in ring order (the inputs are random, so
    // only the mask arrays need the order); the mask of rank r against source s as RingAttention::step_plan.
    auto step_mask = [&](int r, int s) {
      AttnMask mask;
      mask.docs.q_pos = rp + r * n;
      mask.docs.q_doc_start = rs + r * n;
      mask.docs.k_pos = rp + s * n;
      mask.docs.q_stride = mask.docs.k_stride = N;
      return mask;
    };
    auto visible = [&](int r, int s) { return work[size_t(r * cp + s)] > 0; };
    const bench::RingStepBuffers::StepMask mask_of = [&](int r, int s, AttnMask* mask) {
      *mask = step_mask(r, s);
      return visible(r, s);
    };
    auto ring_fwd = [&] { buf.ring_fwd(cp, n, mask_of); };
    auto ring_bwd = [&] { buf.ring_bwd(cp, n, mask_of); };
    Timed t_ring, t_path;
    bench::GatherMeasured gathered;  // --scheme gather
    if (ring && gather)
      gathered = bench::measure_gather(buf, gather_plan, order, ring_start, rp, rs, mask_of, shape, warmup, reps,
                                      timing, plans_per_step ? &plans : nullptr, list_on, work_list, deliver,
                                      bwd_work_list);
    if (ring && !gather) {
      t_ring.fwd_ms = call_ms(timing, ring_fwd, warmup, reps);
      ring_fwd();  // the LSE the backward reads
      t_ring.bwd_ms = call_ms(timing, ring_bwd, warmup, reps);
      // Critical path: per step t, the slowest rank's call (each timed as --timing says).
      for (int t = 0; t < cp; ++t) {
        double fwd_max = 0, bwd_max = 0;
        for (int r = 0; r < cp; ++r) {
          const int s = ring_source(r, t, cp);
          if (!visible(r, s)) continue;
          AttnState st = buf.rank_state(r, n);
          attn_state_reset(st);
          const AttnMask mask = step_mask(r, s);
          fwd_max = std::max(fwd_max, call_ms(timing, [&] { buf.fwd_step(r, s, n, st, mask); }, 1, reps));
          bwd_max = std::max(bwd_max, call_ms(timing, [&] { buf.bwd_step(r, s, n, mask); }, 1, reps));
        }
        t_path.fwd_ms += fwd_max;
        t_path.bwd_ms += bwd_max;
      }
    }

    auto tf = [&](double per_pair, double ms) { return ms > 0 ? per_pair * D * H * pairs / (ms * 1e-3) / 1e12 : 0.0; };
    std::printf("document-masked attention, one GPU: N %ld, %zu documents, d %ld, H %ld, bf16, %.0f visible pairs "
                "(%.3f of causal); calls timed %s, document set-up per %s\n",
                long(N), lengths.size(), long(D), long(H), pairs, pairs / (double(N) * double(N + 1) / 2),
                bench::call_timing_name(timing), plans_per_step ? "step (made once, reused)" : "call");
    std::printf("  whole call            fwd %9.3f ms %7.1f TF/s | bwd %9.3f ms %7.1f TF/s\n", t_whole.fwd_ms,
                tf(4, t_whole.fwd_ms), t_whole.bwd_ms, tf(10, t_whole.bwd_ms));
    const double flops_fwd = 4.0 * D * H * pairs, flops_bwd = 10.0 * D * H * pairs;  // mask FLOPs, all heads
    // With the modelled comm added per ring step as max(compute, comm) where the measured path is the compute.
    const double comm_fwd_ms = (predicted.fwd_us - predicted.fwd_compute_us) * 1e-3;
    const double comm_bwd_ms = (predicted.bwd_us - predicted.bwd_compute_us) * 1e-3;
    if (ring && gather) {
      std::printf("  cp=%d %s (%s) gather, %ld K/V heads:\n", cp, layout_str.c_str(), chosen.c_str(), long(Hkv));
      bench::print_gather_result(gather_plan, gathered, t_whole.fwd_ms, t_whole.bwd_ms, flops_fwd, flops_bwd);
    }
    if (ring && !gather) {
      std::printf("  cp=%d %s (%s) ring: %d of %d calls skipped (no visible pair), imbalance %.3f\n", cp,
                  layout_str.c_str(), chosen.c_str(), skipped, cp * cp, ring_imbalance(work, cp));
      std::printf("  ring calls in sequence fwd %9.3f ms %7.1f TF/s | bwd %9.3f ms %7.1f TF/s | whole / ring: fwd "
                  "%.3f, bwd %.3f\n",
                  t_ring.fwd_ms, tf(4, t_ring.fwd_ms), t_ring.bwd_ms, tf(10, t_ring.bwd_ms),
                  t_whole.fwd_ms / t_ring.fwd_ms, t_whole.bwd_ms / t_ring.bwd_ms);
      std::printf("  ring critical path    fwd %9.3f ms (x%d = %.3f ms of GPU time) | bwd %9.3f ms\n", t_path.fwd_ms,
                  cp, cp * t_path.fwd_ms, t_path.bwd_ms);
      // MagiAttention's figure of merit: mask FLOPs / (critical path x cp), per GPU.
      std::printf("  efficiency (whole / (cp x path)) fwd %.3f bwd %.3f | with the comm model fwd %.3f bwd %.3f | "
                  "TFLOP/s per GPU (mask FLOPs / (path x cp)) fwd %.1f bwd %.1f\n",
                  t_whole.fwd_ms / (cp * t_path.fwd_ms), t_whole.bwd_ms / (cp * t_path.bwd_ms),
                  t_whole.fwd_ms / (cp * (t_path.fwd_ms + comm_fwd_ms)),
                  t_whole.bwd_ms / (cp * (t_path.bwd_ms + comm_bwd_ms)), tf(4, t_path.fwd_ms) / cp,
                  tf(10, t_path.bwd_ms) / cp);
    }
    std::fflush(stdout);
    if (!json_path.empty()) {
      FILE* json = std::fopen(json_path.c_str(), "w");
      RT_CHECK(json != nullptr, "bench_doc_ring_steps: cannot write --json " << json_path);
      std::fprintf(json,
                   "{\"kind\":\"doc_ring_steps\",\"N\":%ld,\"docs\":%zu,\"d\":%ld,\"H\":%ld,\"kv_heads\":%ld,"
                   "\"scheme\":\"%s\",\"visible_pairs\":%.0f,\"whole_fwd_ms\":%.4f,\"whole_bwd_ms\":%.4f,"
                   "\"whole_fwd_tflops\":%.2f,\"whole_bwd_tflops\":%.2f,\"deterministic\":%s,\"timing\":\"%s\","
                   "\"doc_plans\":\"%s\"",
                   long(N), lengths.size(), long(D), long(H), long(Hkv), scheme.c_str(), pairs, t_whole.fwd_ms,
                   t_whole.bwd_ms, tf(4, t_whole.fwd_ms), tf(10, t_whole.bwd_ms),
                   deterministic_attention() ? "true" : "false", bench::call_timing_name(timing),
                   plans_per_step ? "step" : "call");
      if (ring && gather) {
        std::fprintf(json,
                     ",\"cp\":%d,\"layout\":\"%s\",\"chosen\":\"%s\",\"pick\":\"%s\",\"ring_model_path_fwd_ms\":%.4f,"
                     "\"ring_model_path_bwd_ms\":%.4f",
                     cp, layout_str.c_str(), chosen.c_str(), cands[pick].label().c_str(), predicted.fwd_us * 1e-3,
                     predicted.bwd_us * 1e-3);
        bench::json_gather(json, gather_plan, &gathered, t_whole.fwd_ms, t_whole.bwd_ms, flops_fwd, flops_bwd);
      }
      if (!ring && gather) bench::json_gather(json, gather_plan, nullptr, 0, 0, 0, 0);  // the plan only
      if (ring && !gather)
        std::fprintf(json,
                     ",\"cp\":%d,\"layout\":\"%s\",\"chosen\":\"%s\",\"skipped_calls\":%d,\"imbalance\":%.4f,"
                     "\"ring_fwd_ms\":%.4f,\"ring_bwd_ms\":%.4f,\"ring_fwd_tflops\":%.2f,\"ring_bwd_tflops\":%.2f,"
                     "\"path_fwd_ms\":%.4f,\"path_bwd_ms\":%.4f,\"model_work_eff\":%.4f,\"model_ring_eff\":%.4f",
                     cp, layout_str.c_str(), chosen.c_str(), skipped, ring_imbalance(work, cp), t_ring.fwd_ms,
                     t_ring.bwd_ms, tf(4, t_ring.fwd_ms), tf(10, t_ring.bwd_ms), t_path.fwd_ms, t_path.bwd_ms,
                     model_work_eff, model_ring_eff);
      if (ring && !gather)
        std::fprintf(json,
                     ",\"path_comm_fwd_ms\":%.4f,\"path_comm_bwd_ms\":%.4f,\"pick\":\"%s\",\"model_path_fwd_ms\":%.4f,"
                     "\"model_path_bwd_ms\":%.4f,\"model_comm_share\":%.4f,"
                     "\"model_bytes_per_layer\":%.0f,\"ring_bytes_per_layer\":%.0f,\"fom_fwd_tflops_per_gpu\":%.2f,"
                     "\"fom_bwd_tflops_per_gpu\":%.2f",
                     t_path.fwd_ms + comm_fwd_ms, t_path.bwd_ms + comm_bwd_ms, cands[pick].label().c_str(),
                     predicted.fwd_us * 1e-3, predicted.bwd_us * 1e-3,
                     predicted.comm_share(), predicted.bytes_per_layer, predicted.ring_bytes_per_layer,
                     tf(4, t_path.fwd_ms) / cp, tf(10, t_path.bwd_ms) / cp);
      std::fprintf(json, "}\n");
      std::fclose(json);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_doc_ring_steps: %s\n", e.what());
    return 1;
  }
  return 0;
}
