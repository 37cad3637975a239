// generate_main (framework/eval/generate.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "framework/base/checkpoint_io.h"
#include "framework/base/output_files.h"
#include "framework/base/run_errors.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/model_source.h"
#include "framework/eval/dump_logits.h"
#include "framework/eval/eval.h"
#include "framework/eval/command_inputs.h"
#include "framework/eval/decode_graph.h"
#include "framework/eval/generate.h"
#include "framework/plan/generate_limits.h"
#include "kernels/op_profile.h"
#include "framework/plan/plan_generate.h"
#include "framework/plan/resolve.h"
#include "framework/plan/trainer_setup.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "kernels/step_graph.h"
#include "parallel/comm/comm.h"
#include "parallel/schedule/doc_balance.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The prompt but its last token into this rank's cache shard: one pass through the training forward on the grid
// (each rank's rows of the layout's ring order, the K / V of prompt rows captured), or chunk by chunk
// (Model::prefill_chunk, this rank's slot of each chunk). `me`: this rank's cp rank.
void prefill(Model& model, KvCache& cache, const GenerateLayout& layout, const std::vector<int32_t>& prompt, int me,
             int cp) {
  const int64_t n = layout.rows_per_rank, Pp = int64_t(prompt.size()) - 1;
  if (layout.chunk > 0) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));  // (n) this rank's rows of the chunk, padded at the end
    for (int64_t c = 0; c < layout.chunks; ++c) {
      const int64_t start = c * layout.chunk, valid = std::min(layout.chunk, Pp - start);
      const int64_t slot = prefill_chunk_slot(me, c, cp);  // this rank's rows of the chunk: [slot n, (slot + 1) n)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = slot * n + j;  // the row's place in the chunk
        tokens[size_t(j)] = i < valid ? prompt[size_t(start + i)] : 0;
      }
      model.prefill_chunk(cache, tokens, c, start, valid);
    }
    return;
  }
  // Which global position each cp rank's local row holds (the loader's layout over the ring).
  const std::vector<int64_t>& order = layout.order;  // (T) ring order
  Batch batch;
  batch.batch = 1;
  batch.tokens_per_rank = n;
  batch.tokens.resize(size_t(n));       // (1, n)
  batch.targets.assign(size_t(n), -1);  // (1, n): no loss
  batch.positions.resize(size_t(n));    // (1, n)
  batch.groups.assign(size_t(n), 0);    // (1, n)
  for (int64_t j = 0; j < n; ++j) {
    const int64_t pos = order[size_t(me * n + j)];
    batch.positions[size_t(j)] = int32_t(pos);
    batch.tokens[size_t(j)] = pos < Pp ? prompt[size_t(pos)] : 0;
    if (pos < Pp) cache.capture.push_back(j);
  }
  if (Pp > 0) {
    model.set_kv_capture(&cache);
    model.prefill_forward(batch);  // the blocks only: no LM head over the prompt; returns when finished
    model.set_kv_capture(nullptr);
  }
  cache.rows = int64_t(cache.capture.size());
}

// What generate reads and checks before any work, alike on every rank: the checkpoint's weights and model, the
// config prepared for generate on a grid of this run's processes, the prompt, EOS and the outputs.
struct GenerateInputs {
  Config config;
  std::vector<HostTensor> weights;
  std::vector<int32_t> prompt;
  std::string grid_note, length_warning, hf_source;
  int64_t trained_len = 0, eos = -1;
};

GenerateInputs read_generate_inputs(const Config& loaded, const GenerateArgs& args, int world_size) {
  GenerateInputs in;
  Config& config = in.config;
  config = loaded;
  std::map<std::string, std::string> metadata;
  in.weights = load_checkpoint_argument("generate", args.checkpoint, &metadata);
  apply_model_from_source(config, metadata, "checkpoint", args.checkpoint);
  if (auto it = metadata.find("hf_source"); it != metadata.end()) in.hf_source = it->second;
  in.trained_len = config.data.seq_len;
  if (auto it = metadata.find("context_length"); it != metadata.end() && std::atoll(it->second.c_str()) > 0)
    in.trained_len = std::atoll(it->second.c_str());
  prepare_generate_config(config);
  const std::string configured = "cp=" + std::to_string(config.parallel.cp) + " tp=" +
                                 std::to_string(config.parallel.tp);
  const int configured_ranks = config.parallel.cp * config.parallel.tp;
  in.grid_note = fit_grid_to_world(config, world_size);
  if (!in.grid_note.empty())  // in this command's words
    in.grid_note = "generate: the config's grid (" + configured + ") needs " + std::to_string(configured_ranks) +
                   " process(es) and this run has " + std::to_string(world_size) + "; generating on cp=" +
                   std::to_string(config.parallel.cp) + " tp=" + std::to_string(config.parallel.tp) +
                   " instead (the tokens are the same on any grid)";
  validate_config(config, world_size);
  RT_CHECK(args.prompt_ids_file.empty() == args.prompt_given,
           "generate: give the prompt once, as --prompt-ids FILE or --prompt \"1,2,3\"");
  in.prompt = !args.prompt_given ? parse_token_ids(read_input_file("generate", "--prompt-ids", args.prompt_ids_file),
                                                   "--prompt-ids " + args.prompt_ids_file)
                                 : parse_token_ids(args.prompt, "--prompt");
  const std::vector<int32_t>& prompt = in.prompt;
  const std::string prompt_option = args.prompt_given ? "--prompt" : "--prompt-ids";  // named in every refusal
  RT_CHECK(!prompt.empty(), "generate " << prompt_option << ": the prompt is empty; give at least one token id "
                                           "(--prompt \"1\")");
  for (size_t i = 0; i < prompt.size(); ++i)
    RT_CHECK(prompt[i] < config.model.vocab_size, "generate " << prompt_option << ": token " << i << " is " << prompt[i]
                 << ", outside the model's vocabulary of " << config.model.vocab_size << " ids [0, "
                 << config.model.vocab_size - 1 << "]; was the prompt made with another tokenizer?");
  const std::string out_of_range =  // before any sum of them (framework/plan/generate_limits.h)
      check_generate_counts({int64_t(prompt.size()), args.max_new_tokens, args.prefill_chunk, prompt_option});
  RT_CHECK(out_of_range.empty(), "generate: " << out_of_range);
  const std::string bad_graph = check_cuda_graph_setting(args.cuda_graph);
  RT_CHECK(bad_graph.empty(), "generate: " << bad_graph);
  RT_CHECK(!(args.profile && args.cuda_graph == "on"),
           "generate: --profile times each op of a decode step, which a CUDA graph's replay hides; give --cuda-graph "
           "off or auto (which --profile turns off) with it");
  const std::string bad_sampling = check_sampling(args.sampling);
  RT_CHECK(bad_sampling.empty(), "generate: " << bad_sampling);
  const std::string refused = check_prompt_length(int64_t(prompt.size()), in.trained_len, config.model.rope_scaling,
                                                  &in.length_warning);
  RT_CHECK(refused.empty(), "generate " << prompt_option << ": " << refused);
  RT_CHECK(!args.eos_given || args.eos_id < config.model.vocab_size,
           "generate: --eos-id " << args.eos_id << " is outside the model's vocabulary of " << config.model.vocab_size
           << " ids [0, " << config.model.vocab_size - 1 << "], so generation could never stop at it; give an id "
           "in that range, or a negative one to never stop at EOS");
  in.eos = resolve_eos_id(args, config, in.hf_source);
  if (!args.out.empty()) check_output_file("generate", "--out", args.out, args.overwrite);
  if (!args.dump_logits.empty()) check_output_file("generate", "--dump-logits", args.dump_logits, args.overwrite);
  RT_CHECK(args.out.empty() || args.dump_logits.empty() ||
           std::filesystem::absolute(args.out) != std::filesystem::absolute(args.dump_logits),
           "generate: --out and --dump-logits name the same file '" << args.out << "'; give two paths");
  return in;
}

// The resolve step's inputs for generate: the prompt, the new tokens, --prefill-chunk, and the memory a rank has
// (--device-memory-gib, else a GPU's memory, else a CPU rank's share of the host's).
ResolveInputs generate_resolve_inputs(const GenerateArgs& args, int64_t prompt_tokens, int world_size) {
  ResolveInputs in;
  in.prompt_tokens = prompt_tokens, in.new_tokens = args.max_new_tokens, in.prefill_chunk = args.prefill_chunk;
  const double gib = args.device_memory_gib;
  in.limits = [gib, world_size](const Config&, Device device, std::string* from) {
    PlanLimits l;
    l.device_bytes = gib > 0              ? gib * 1024.0 * 1024 * 1024
                     : device.is_cuda()   ? double(device_total_bytes(device))
                                          : double(host_physical_bytes()) / std::max(1, world_size);
    *from = gib > 0 ? "--device-memory-gib" : device.is_cuda() ? "the GPU" : "this CPU rank's share of the host memory";
    return l;
  };
  return in;
}

// Rank 0's start-up lines (stderr: stdout is the result): the grid and prompt notes, and what each rank allocates.
void print_generate_start(const GenerateInputs& in, const GenerateArgs& args, const GeneratePlan& plan) {
  const GenerateLayout& layout = plan.layout;
  const int64_t P = int64_t(in.prompt.size()), n = layout.rows_per_rank;
  if (!in.grid_note.empty()) std::fprintf(stderr, "%s\n", in.grid_note.c_str());
  if (!in.length_warning.empty()) std::fprintf(stderr, "warning: generate: %s\n", in.length_warning.c_str());
  if (P + args.max_new_tokens > in.trained_len)
    std::fprintf(stderr, "warning: generate: prompt + --max-new-tokens = %lld tokens runs past the trained context "
                 "of %lld\n", (long long)(P + args.max_new_tokens), (long long)in.trained_len);
  std::fprintf(stderr, "generate: KV cache %.0f bytes per rank (%lld rows; K and V %.0f bytes), prefill arena %.0f "
               "bytes (%lld tokens per rank), %.0f bytes per rank with the allowance\n", plan.cache_bytes,
               (long long)layout.capacity, plan.kv_bytes, plan.prefill_bytes, (long long)n, plan.device_bytes());
  if (layout.chunk > 0)
    std::fprintf(stderr, "generate: prefill of %lld tokens in %lld chunks of %lld (%lld per cp rank; each chunk's "
                 "queries meet every rank's cache shard, %.0f bytes of queries and states per rank): %s\n",
                 (long long)(P - 1), (long long)layout.chunks, (long long)layout.chunk, (long long)n, plan.chunk_bytes,
                 plan.chunk_note.c_str());
}

// The decode: one step per new token, the first running the prompt's last token; rank 0 chooses each token and
// every rank takes its choice. shard_rows (cp): cached rows per cp rank, grown as the new rows land.
struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<float> step_logits;  // (steps, V) rank 0, --dump-logits
  std::string stop = "max_new_tokens";
  double seconds = 0;
  bool graphed = false;    // the steps after the first replayed one CUDA graph
  size_t graph_nodes = 0;  // its nodes
  double capture_s = 0;    // its capture and instantiation, inside `seconds` (the first step)
};

// graphed: one rank's steps as replays of one CUDA graph (framework/eval/decode_graph.h); the token goes to the
// device with the step's other inputs, so no broadcast and no token copies.
Decoded decode(Model& model, KvCache& cache, std::vector<int64_t> shard_rows, ProcessGrid& grid,
               const GenerateInputs& in, const GenerateArgs& args, GraphedDecode* graphed) {
  const bool rank0 = grid.world().rank() == 0;
  const int me = grid.cp_rank();
  const int64_t V = in.config.model.vocab_size, P = int64_t(in.prompt.size());
  std::vector<float> logits(static_cast<size_t>(V));  // (V)
  const Tensor host_logits(logits.data(), DType::f32, Device::cpu(), {1, V});
  int32_t token_host = in.prompt.back();
  const Tensor host_token(&token_host, DType::i32, Device::cpu(), {1});
  SampleRng rng(args.sampling.seed);
  Decoded d;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t pos = P - 1; int64_t(d.tokens.size()) < args.max_new_tokens; ++pos) {
    const int owner = int(std::min_element(shard_rows.begin(), shard_rows.end()) - shard_rows.begin());
    if (graphed) {
      graphed->step(token_host, pos);  // one rank: it holds every row; adds the row
    } else {
      copy_cast(cache.token, host_token);
      model.decode_step(cache, pos, owner == me);
      if (owner == me) ++cache.rows;
    }
    ++shard_rows[size_t(owner)];
    if (rank0) {  // rank 0 chooses; every rank takes its choice
      copy_cast(host_logits, cache.logits);
      if (!args.dump_logits.empty()) d.step_logits.insert(d.step_logits.end(), logits.begin(), logits.end());
      token_host = choose_token(logits.data(), V, args.sampling, rng);
      if (!graphed) copy_cast(cache.token, host_token);
    }
    if (!graphed) {
      grid.world().broadcast(cache.token, 0);
      copy_cast(host_token, cache.token);
    }
    d.tokens.push_back(token_host);
    if (in.eos >= 0 && token_host == in.eos) {
      d.stop = "eos";
      break;
    }
  }
  d.seconds = seconds_since(t0);
  if (graphed) {
    d.graphed = graphed->graphed();
    d.graph_nodes = graphed->nodes();
    d.capture_s = graphed->capture_seconds();
  }
  return d;
}

// Rank 0: the result as one JSON object, on stdout or in --out, and --dump-logits; every output to a temporary first,
// then all renamed together (framework/base/output_files.h).
// --profile: the per-op GPU time of the prefill and of the decode (kernels/op_profile.h), longest first.
struct OpProfile {
  std::vector<OpTime> prefill, decode;
};

// Rank 0's --profile table on stderr: per op its calls and GPU ms, the decode's also per new token.
void print_op_profile(const OpProfile& p, int64_t new_tokens) {
  auto table = [](const char* what, const std::vector<OpTime>& ops, int64_t per) {
    double sum = 0;
    for (const OpTime& op : ops) sum += op.ms;
    std::fprintf(stderr, "generate --profile: %s, %.3f ms of GPU time in ops (CUDA events around each)%s\n", what, sum,
                 ops.empty() ? " -- none timed (no CUDA device)" : "");
    for (const OpTime& op : ops)
      std::fprintf(stderr, "  %-28s %8lld calls %10.3f ms %6.1f%%%s\n", op.name.c_str(), (long long)op.calls, op.ms,
                   sum > 0 ? 100 * op.ms / sum : 0.0,
                   per > 0 ? (" " + std::to_string(1e3 * op.ms / double(per)) + " us per token").c_str() : "");
  };
  table("prefill", p.prefill, 0);
  table("decode", p.decode, new_tokens);
}

void write_generate_result(const GenerateInputs& in, const GenerateArgs& args, const Resolved& resolved,
                           const GenerateLayout& layout, double prefill_s, double prefill_warmup_s, const Decoded& d,
                           const OpProfile* profile) {
  const Config& config = in.config;
  const int64_t P = int64_t(in.prompt.size()), V = config.model.vocab_size;
  const double tokens_per_s = d.seconds > 0 ? double(d.tokens.size()) / d.seconds : 0;
  nlohmann::json j;
  j["prompt_ids"] = in.prompt;
  j["new_ids"] = d.tokens;
  j["stop"] = d.stop;
  j["eos_id"] = in.eos >= 0 ? nlohmann::json(in.eos) : nlohmann::json(nullptr);
  j["prompt_tokens"] = P;
  j["prefill_s"] = prefill_s;
  j["prefill_warmup_s"] = prefill_warmup_s >= 0 ? nlohmann::json(prefill_warmup_s) : nlohmann::json(nullptr);
  j["decode_s"] = d.seconds;
  if (profile != nullptr) {  // --profile: GPU ms per op
    for (const auto& [key, ops] : {std::pair<const char*, const std::vector<OpTime>*>{"prefill_profile_ms",
                                                                                    &profile->prefill},
                                   {"decode_profile_ms", &profile->decode}}) {
      nlohmann::json o = nlohmann::json::object();
      for (const OpTime& op : *ops) o[op.name] = op.ms;
      j[key] = o;
    }
  }
  j["decode_tokens_per_s"] = tokens_per_s;
  j["grid"] = {{"cp", config.parallel.cp}, {"cp_a2a", config.parallel.cp_a2a}, {"tp", config.parallel.tp}};
  j["prefill_chunks"] = layout.chunks;
  j["prefill_chunk"] = layout.chunk;
  j["device"] = resolved.device.is_cpu() ? "cpu" : "cuda";
  j["decode_cuda_graph"] = d.graphed;
  j["decode_graph_nodes"] = d.graph_nodes;
  j["decode_graph_capture_s"] = d.capture_s;
  j["hf_source"] = in.hf_source;
  std::fprintf(stderr, "generate: prefill %lld tokens in %.4g s (cp=%d cp_a2a=%d tp=%d); decode %zu tokens in "
               "%.4g s, %.1f tokens/s (%s); stopped at %s\n", (long long)(P - 1), prefill_s, config.parallel.cp,
               config.parallel.cp_a2a, config.parallel.tp, d.tokens.size(), d.seconds, tokens_per_s,
               d.graphed ? "one CUDA graph per step" : "ungraphed", d.stop.c_str());
  OutputFiles outputs("generate");
  const int64_t steps = int64_t(d.tokens.size());
  if (!args.dump_logits.empty()) {
    const std::string tmp = outputs.temporary("--dump-logits", args.dump_logits);
    try {
      write_npy(tmp, "<f4", {steps, V}, d.step_logits.data(), d.step_logits.size() * sizeof(float));
    } catch (const std::exception& e) {
      throw RunError(kExitUsage, std::string("generate --dump-logits: ") + e.what() +
                                     "; none of this command's outputs was written");
    }
  }
  const std::string text = j.dump() + "\n";
  if (!args.out.empty()) outputs.write_text("--out", args.out, text);
  outputs.commit();
  if (!args.dump_logits.empty())
    std::fprintf(stderr, "generate: wrote %s (%lld x %lld float32 logits)\n", args.dump_logits.c_str(),
                 (long long)steps, (long long)V);
  if (args.out.empty()) std::fputs(text.c_str(), stdout);
  else std::fprintf(stderr, "generate: wrote %s\n", args.out.c_str());
}

}  // namespace

int generate_main(const Config& loaded, const GenerateArgs& args, int world_size) {
  GenerateInputs in;
  agree_on([&] { in = read_generate_inputs(loaded, args, world_size); }, kExitUsage);
  // Every auto in one step (framework/plan/resolve.h): the device, cp_a2a, the layout and the prefill chunk, with
  // what this rank will allocate (framework/plan/plan_generate.h, as `ringtrain plan --generate-context` counts it);
  // refused up front when the arenas alone exceed the device (a GPU's memory; a CPU rank's share of the host).
  Resolved resolved;
  agree_on([&] {
    resolved = resolve_autos(in.config, Purpose::generate,
                             generate_resolve_inputs(args, int64_t(in.prompt.size()), world_size));
    const std::string problem =
        generate_memory_problem(*resolved.generate, resolved.limits.device_bytes, resolved.limits_from);
    RT_CHECK(problem.empty(), "generate: " << problem);
  }, kExitUsage);
  in.config = resolved.config;
  const GeneratePlan& plan = *resolved.generate;
  const GenerateLayout& layout = plan.layout;
  const Device device = resolved.device;
  ProcessGrid grid = make_process_grid(in.config, device);
  const bool rank0 = grid.world().rank() == 0;
  // --cuda-graph: graphed on one CUDA rank, else ungraphed (framework/eval/decode_graph.h); said once, here.
  const DecodeGraphChoice graph_choice = choose_decode_graph(
      args.profile ? "off" : args.cuda_graph, device.is_cuda() && StepGraph::available(device), grid.world().size());
  if (rank0) {
    print_resolved(resolved);
    print_generate_start(in, args, plan);
    std::fprintf(stderr, "%s\n", graph_choice.line.c_str());
  }
  LocalComm one;  // chunked: the model's ring and all-to-all (its attention reads the cache instead)
  ModelSession session = build_session(generate_model_config(in.config, layout),
                                       generate_model_comms(ModelComms::from(grid), layout, one), device,
                                       /*with_optimizer=*/false);
  Model& model = *session.model;
  agree_on([&] {
    model.scatter_full(model.weights(), in.weights, "");
    model.sync_compute_weights();
  }, kExitUsage);
  in.weights.clear();

  // The cache: each cp rank's prompt rows (the loader's layout over the ring, or the chunks' pieces), then the new
  // ones; chunked, it also holds the chunks' queries and states.
  const int me = grid.cp_rank();
  const bool chunked = layout.chunk > 0;
  Arena measuring = Arena::measuring(device);
  model.make_kv_cache(measuring, layout.capacity, chunked);
  Arena cache_arena(device, measuring.peak() + 4096);
  KvCache cache = model.make_kv_cache(cache_arena, layout.capacity, chunked);

  double prefill_warmup_s = -1;  // --warmup: the untimed first prefill's seconds
  if (args.warmup) {
    const auto t_warmup = std::chrono::steady_clock::now();
    prefill(model, cache, layout, in.prompt, me, in.config.parallel.cp);
    grid.world().barrier();
    prefill_warmup_s = seconds_since(t_warmup);
    cache.rows = 0;  // the timed prefill fills the cache again from row 0
    cache.capture.clear();
  }
  const auto t_prefill = std::chrono::steady_clock::now();
  if (args.profile) op_profile_begin();
  prefill(model, cache, layout, in.prompt, me, in.config.parallel.cp);
  OpProfile profile;
  if (args.profile) profile.prefill = op_profile_end();
  RT_CHECK(cache.rows == layout.shard_rows[size_t(me)], "generate: the prefill cached " << cache.rows
               << " rows on cp rank " << me << ", the layout " << layout.shard_rows[size_t(me)]);
  grid.world().barrier();
  const double prefill_s = seconds_since(t_prefill);

  std::unique_ptr<GraphedDecode> graphed;
  if (graph_choice.graphed) graphed = std::make_unique<GraphedDecode>(model, cache, args.cuda_graph == "on");
  if (args.profile) op_profile_begin();
  const Decoded decoded = decode(model, cache, layout.shard_rows, grid, in, args, graphed.get());
  if (args.profile) profile.decode = op_profile_end();
  if (rank0 && args.profile) print_op_profile(profile, int64_t(decoded.tokens.size()));
  if (rank0)
    write_generate_result(in, args, resolved, layout, prefill_s, prefill_warmup_s, decoded,
                          args.profile ? &profile : nullptr);
  return 0;
}

}  // namespace rt
