// The ringtrain command:
//   ringtrain train <config.yaml> [--set key=value]...
//   ringtrain plan  <config.yaml> [--json] [--max-seq-len] [--device-memory-gib G] [--host-memory-gib H]
//                   [--ranks-per-node R] [--doc-lengths FILE] [--set key=value]...
//   ringtrain eval  <config.yaml> --checkpoint DIR [--dump-logits FILE] [--set key=value]...
//                   [--task loss|loss-by-position|needle|ruler] [--by window|document] [--cases DIR]
//                   [--out FILE.jsonl]
//                   [--overwrite]
//   ringtrain generate <config.yaml> --checkpoint DIR --prompt-ids FILE|--prompt IDS [--max-new-tokens N]
//                   [--temperature T] [--top-k K] [--top-p P] [--seed S] [--eos-id E] [--prefill-chunk N] [--cuda-graph auto|on|off] [--profile]
//                   [--device-memory-gib G] [--dump-logits FILE.npy] [--out FILE] [--overwrite]
//   ringtrain import-hf <hf_dir> --out <checkpoint_dir> [--device auto|cpu|cuda] [--overwrite]
//   ringtrain export-hf <checkpoint_dir> --out <hf_dir> [--dtype bf16|fp32] [--overwrite]
//   ringtrain version
// MPI is initialised once here (a plain `ringtrain train x.yaml` runs as a singleton world of one rank).
// Exit codes (framework/base/run_errors.h): 0 finished, 2 usage, config, data or checkpoint error (command-line
// errors included), 3 divergence, 4 watchdog, 128+N stopped by signal N after a complete save, 1 anything else.
// Errors: one found by every rank alike (the config, a refused run_dir or resume) is printed once, as
// "ringtrain: error: <message>", and every rank exits with its code without MPI_Abort's banner. Any other
// error prints "ringtrain: error on rank R (host:pid): <message>" and aborts the whole job at once, so that no
// rank waits forever in a collective. Both also go to $RINGTRAIN_ERROR_FILE when set (launch/train.sh prints
// it again after mpirun's own lines).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "framework/base/output_files.h"
#include "framework/base/run_errors.h"
#include "framework/base/version.h"
#include "framework/config/config.h"
#include "framework/eval/command_inputs.h"
#include "framework/eval/eval.h"
#include "framework/eval/generate.h"
#include "framework/hf/hf_commands.h"
#include "framework/hf/init_from.h"
#include "framework/plan/plan.h"
#include "framework/run/trainer.h"
#include "kernels/tensor.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/comm/fault.h"
#include "parallel/comm/watchdog.h"

namespace {

struct Args {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string checkpoint;
  std::string dump_logits;  // eval: .npy file for the first eval batch's logits
  rt::PlanArgs plan;        // plan: --json, --max-seq-len, limits
  rt::EvalTaskArgs eval_task;  // eval: --task, --by, --cases, --out
  rt::GenerateArgs generate;
};

struct HfArgs {
  std::string source, out;
  std::string device = "auto";  // import-hf
  std::string dtype = "bf16";   // export-hf
  uint64_t shard_bytes = uint64_t(5) << 30;
  int64_t max_positions = 0;  // export-hf: only when --max-position-embeddings is given
  bool overwrite = false;     // --overwrite: replace an existing --out directory
};

// A CLI11 check from one of plan's "" -or-refusal functions (the refusal names the option and a value that works).
CLI::Validator plan_check(const std::string& name, std::function<std::string(const std::string&)> check) {
  return CLI::Validator([check](std::string& value) { return check(value); }, "", name);
}

void add_config_args(CLI::App* cmd, Args& args) {
  cmd->add_option("config", args.config_path, "YAML config file (see configs/)")->required();
  cmd->add_option("--set", args.overrides, "override a config value, e.g. --set model.n_layer=4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

// Before MPI_Init: whether this process is rank 0 of an mpirun launch, or was started alone.
bool first_launched_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v) == 0;
  return true;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int run_command(const std::string& command, const Args& args) {
  rt::Config config;
  // plan predicts for the configured grid without launching it, and eval fits the grid to the processes it
  // has: only train checks the world size here.
  const int checked_world = command == "train" ? world_size() : 0;
  rt::agree_on([&] { config = rt::load_config(args.config_path, args.overrides, checked_world,
                                                 rt::apply_init_from_model); }, rt::kExitUsage);
  if (command == "plan") {  // everything plan refuses is about its input (the config, an option, a file)
    int code = 0;
    rt::agree_on([&] { code = rt::plan_main(config, args.plan); }, rt::kExitUsage);
    return code;
  }
  // train, eval and generate each settle every auto in one step (framework/plan/resolve.h).
  if (command == "train") return rt::train_main(config);
  if (command == "generate") return rt::generate_main(config, args.generate, world_size());
  return rt::eval_main(config, args.checkpoint, world_size(), args.dump_logits, args.eval_task);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringtrain: long-context transformer training with ring attention (CPU ranks or CUDA GPUs)"};
  app.require_subcommand(1);
  Args args;
  CLI::App* train = app.add_subcommand("train", "train per the config; writes train.run_dir");
  add_config_args(train, args);
  CLI::App* plan = app.add_subcommand("plan", "print parameters, FLOPs and predicted peak memory per rank");
  add_config_args(plan, args);
  plan->add_flag("--json", args.plan.json, "print one JSON object (params, flops_per_step, peak_bytes_per_rank, fits, "
                                           "device_bytes) for scripts such as launch/sweep.sh");
  plan->add_flag("--max-seq-len", args.plan.max_seq_len,
                 "search the longest data.seq_len that fits (steps of 2*cp*128 under zigzag) and show what dominates");
  plan->add_option("--device-memory-gib", args.plan.device_memory_gib,
                   "memory per GPU, GPU plans only (default: the visible GPU's)")
      ->check(plan_check("--device-memory-gib", [](const std::string& v) {
        return rt::check_plan_memory_gib("--device-memory-gib", v); }));
  plan->add_option("--doc-lengths", args.plan.doc_lengths,
                   "document-length file (one length per line): attention FLOPs on visible pairs and ring imbalance "
                   "per layout for packed documents of that mix")
      ->check(plan_check("--doc-lengths", [](const std::string& v) {  // a file of lengths, read up front
        std::string problem = rt::input_file_problem("--doc-lengths", v);
        if (problem.empty()) try {
          rt::read_doc_lengths(v);
        } catch (const std::exception& e) {
          problem = rt::user_message(e.what(), rt::kExitUsage);
        }
        return problem; }));
  plan->add_option("--host-memory-gib", args.plan.host_memory_gib,
                   "host memory per node; CPU ranks share it (default: this host's)")
      ->check(plan_check("--host-memory-gib", [](const std::string& v) {
        return rt::check_plan_memory_gib("--host-memory-gib", v); }));
  plan->add_option("--ranks-per-node", args.plan.ranks_per_node,
                   "ranks sharing a node's host memory (default: CPU every rank; GPU min(world, 8))")
      ->check(plan_check("--ranks-per-node", rt::check_ranks_per_node));
  plan->add_option("--generate-context", args.plan.generate_context,
                   "also plan `ringtrain generate` with a prompt of this many tokens: its KV cache and prefill per "
                   "rank on this grid");
  plan->add_option("--max-new-tokens", args.plan.generate_new_tokens,
                   "with --generate-context: the new tokens the cache holds too (default 64, as generate)");
  plan->add_option("--prefill-chunk", args.plan.generate_prefill_chunk,
                   "with --generate-context: generate's prefill chunk in tokens (default 0 = auto: one pass when it "
                   "fits the plan's memory, else the largest chunk that fits)");
  CLI::App* eval = app.add_subcommand("eval", "mean held-out loss of a checkpoint (any grid)");
  add_config_args(eval, args);
  eval->add_option("--checkpoint", args.checkpoint,
                   "checkpoint directory (run_dir/checkpoints/<lineage>/step_<N>) or a model.safetensors file")
      ->required();
  eval->add_option("--dump-logits", args.dump_logits,
                    "write the first eval batch's logits (B,T,V) float32 to FILE (.npy) and its tokens to "
                    "FILE.tokens.npy; one rank only");
  eval->add_option("--task", args.eval_task.task,
                   "loss (default: the mean held-out loss) | loss-by-position (mean loss in log-spaced position "
                   "buckets) | needle (teacher-forced passkey cases from --cases) | ruler (RULER-style cases from "
                   "--cases, greedy generation scored by string match)");
  eval->add_option("--by", args.eval_task.by, "loss-by-position: window (default: position in the eval window) | "
                                              "document (position in the target's document, data.documents: eot)");
  eval->add_option("--cases", args.eval_task.cases, "needle, ruler: the directory launch/make_needles.py / "
                                                    "launch/make_ruler.py wrote");
  eval->add_option("--out", args.eval_task.out, "loss-by-position, needle, ruler: the results FILE.jsonl "
                                                "(loss-by-position also writes FILE.csv, ruler FILE.md and FILE.csv)");
  eval->add_flag(rt::kOverwriteFlag, args.eval_task.overwrite, "replace an existing --out / --dump-logits (without "
                                                               "it an existing file is refused)");
  CLI::App* generate = app.add_subcommand("generate", "token ids in, token ids out (JSON): prefill on the grid, "
                                                      "split-KV decode over the cp ranks");
  add_config_args(generate, args);
  rt::GenerateArgs& g = args.generate;
  generate->add_option("--checkpoint", g.checkpoint, "checkpoint directory or a model.safetensors file")->required();
  generate->add_option("--prompt-ids", g.prompt_ids_file, "file of prompt token ids: a JSON array or ids separated "
                                                          "by commas / spaces");
  generate->add_option("--prompt", g.prompt, "prompt token ids inline, e.g. \"1,2,3\"");
  generate->add_option("--max-new-tokens", g.max_new_tokens, "stop after this many new tokens (default 64)");
  generate->add_option("--temperature", g.sampling.temperature, "0 = greedy (default); > 0 samples");
  generate->add_option("--top-k", g.sampling.top_k, "sample among the k most likely ids (0 = all)");
  generate->add_option("--top-p", g.sampling.top_p, "sample among the most likely ids holding this mass (1 = all)");
  generate->add_option("--seed", g.sampling.seed, "sampling seed (default 0)");
  generate->add_option("--eos-id", g.eos_id, "stop at this id (default: the HF config's eos_token_id, else "
                                             "data.eot_token when set; negative: never)");
  generate->add_option("--device-memory-gib", g.device_memory_gib,
                       "refuse up front when the prefill and the KV cache need more than this per rank (default: "
                       "the GPU's memory; CPU ranks: the host's over the ranks)")
      ->check(plan_check("--device-memory-gib", [](const std::string& v) {
        return rt::check_plan_memory_gib("--device-memory-gib", v); }));
  generate->add_option("--prefill-chunk", g.prefill_chunk,
                       "prefill the prompt in chunks of this many tokens (every cp rank runs each chunk against its "
                       "cache shard); 0 = auto (default): one pass on the grid when it fits, else the largest chunk "
                       "that fits");
  generate->add_option("--cuda-graph", g.cuda_graph,
                       "auto (default): decode each token as one replay of a CUDA graph of the step where supported "
                       "(a CUDA device, cp = tp = 1); on: the same, a failed capture is an error; off: ungraphed");
  generate->add_flag("--profile", g.profile,
                     "time every CUDA op of the prefill and of the decode steps (CUDA events; the decode runs "
                     "ungraphed) and print the totals per op on stderr and in the JSON result");
  generate->add_flag("--warmup", g.warmup,
                     "run the prefill once untimed first (the same prompt: the GEMM plans are chosen and the kernels "
                     "loaded), then the timed prefill and the decode; the untimed one's seconds are prefill_warmup_s "
                     "in the JSON result");
  generate->add_option("--dump-logits", g.dump_logits, "write the logits each new token was chosen from here "
                                                       "(.npy, float32, new tokens x vocabulary)");
  generate->add_option("--out", g.out, "write the JSON result here (default: stdout)");
  generate->add_flag(rt::kOverwriteFlag, g.overwrite, "replace an existing --out / --dump-logits (without it an "
                                                      "existing file is refused)");
  HfArgs hf;
  CLI::App* import_hf = app.add_subcommand("import-hf", "Hugging Face Llama/Mistral directory -> ringtrain checkpoint");
  import_hf->add_option("hf_dir", hf.source, "directory with config.json and model.safetensors (or shards + index)")
      ->required();
  import_hf->add_option("--out", hf.out, "checkpoint directory to create")->required();
  import_hf->add_flag(rt::kOverwriteFlag, hf.overwrite, "replace an existing --out directory (once the new one is "
                                                       "complete; without it an existing one is refused)");
  import_hf->add_option("--device", hf.device, "device the model will train on: auto | cpu | cuda (CUDA: head dim 64 or 128)");
  CLI::App* export_hf = app.add_subcommand("export-hf", "ringtrain checkpoint -> Hugging Face LlamaForCausalLM directory");
  export_hf->add_option("checkpoint_dir", hf.source, "checkpoint directory (run_dir/checkpoints/step_<N>)")->required();
  export_hf->add_option("--out", hf.out, "directory to create")->required();
  export_hf->add_flag(rt::kOverwriteFlag, hf.overwrite, "replace an existing --out directory (once the new one is "
                                                       "complete; without it an existing one is refused)");
  export_hf->add_option("--dtype", hf.dtype, "bf16 (default) | fp32 (export then import is bitwise)");
  export_hf->add_option("--shard-bytes", hf.shard_bytes, "largest safetensors shard (default 5 GiB)");
  export_hf->add_option("--max-position-embeddings", hf.max_positions,
                        "config.json max_position_embeddings (default: the context the checkpoint was trained at)");
  CLI::App* version = app.add_subcommand("version", "print the version and the backends built in");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {  // --help is 0; every command-line error is a usage error (2)
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? rt::kExitOk : rt::kExitUsage;
    // Printed once however many ranks mpirun started (each parses the same line), as every other error.
    if (first_launched_rank())
      std::fprintf(stderr, "ringtrain: error: %s\nRun with --help for more information.\n", e.what());
    return rt::kExitUsage;
  }

  if (version->parsed()) {
    std::printf("%s\n", rt::version_string().c_str());
    return 0;
  }
  if (import_hf->parsed() || export_hf->parsed()) {  // single-process file conversions: no MPI
    try {
      if (import_hf->parsed()) return rt::import_hf_main(hf.source, hf.out, hf.device, hf.overwrite);
      const bool positions_given = export_hf->count("--max-position-embeddings") > 0;
      return rt::export_hf_main(hf.source, hf.out, hf.dtype, hf.shard_bytes,
                                positions_given ? std::optional<int64_t>(hf.max_positions) : std::nullopt,
                                hf.overwrite);
    } catch (const rt::RunError& e) {  // a refused input (exit 2)
      std::fprintf(stderr, "ringtrain: error: %s\n", rt::user_message(e.what(), e.code()).c_str());
      return e.code();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
      return rt::kExitFailure;
    }
  }
  args.generate.eos_given = generate->count("--eos-id") > 0;
  args.plan.generate = plan->count("--generate-context") > 0;
  args.plan.generate_new_given = plan->count("--max-new-tokens") > 0 || plan->count("--prefill-chunk") > 0;
  args.generate.prompt_given = generate->count("--prompt") > 0;
  const std::string command = train->parsed() ? "train" : plan->parsed() ? "plan" : generate->parsed() ? "generate"
                                                                                                      : "eval";

  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "ringtrain: error: MPI_Init_thread failed (is the MPI installation usable?)\n");
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = rt::kExitFailure;
  try {
    code = run_command(command, args);
  } catch (const rt::AgreedError& e) {
    if (rank == 0) rt::report_error_line("ringtrain: error: " + rt::user_message(e.what(), e.code()));
    code = e.code();
  } catch (const rt::RunError& e) {
    rt::abort_job_with("ringtrain: error on rank " + std::to_string(rank) + " (" + rt::this_host() + "): " +
                           rt::user_message(e.what(), e.code()), e.code());
  } catch (const std::exception& e) {
    rt::abort_job_with("ringtrain: error on rank " + std::to_string(rank) + " (" + rt::this_host() + "): " + e.what(),
                       rt::kExitFailure);
  } catch (...) {
    rt::abort_job_with("ringtrain: error on rank " + std::to_string(rank) + ": unknown exception", rt::kExitFailure);
  }
  std::fflush(stdout);
  rt::watchdog_shutdown();
  MPI_Finalize();
  return code;
}
