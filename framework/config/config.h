// The typed config schema (DESIGN.md "Config"). Sections: model, data, parallel, train, optim,
// checkpoint, log, device. Every knob lives here; the YAML keys are the field names.
#pragma once
#include <functional>
#include <cstdint>
#include <string>
#include <vector>

namespace rt {

// RoPE scaling for context extension, as Hugging Face transformers computes it (framework/config/rope_scaling.h):
//   none; linear (factor); llama3 (factor, low/high_freq_factor, original_max_position_embeddings);
//   yarn (factor, beta_fast/slow, original_max_position_embeddings, attention_factor: cos and sin are
//   multiplied by it; 0 = transformers' default 0.1 ln(factor) + 1).
struct RopeScalingConfig {
  std::string type = "none";  // none | linear | llama3 | yarn
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_position_embeddings = 8192;
  double beta_fast = 32;
  double beta_slow = 1;
  double attention_factor = 0;
};

struct ModelConfig {
  int n_layer = 2;
  int d_model = 64;
  int n_head = 4;
  int n_kv_head = 4;        // GQA when < n_head; must divide n_head
  int vocab_size = 64;
  std::string mlp = "gelu"; // gelu | swiglu
  int d_ff = 256;           // MLP hidden width
  float rope_base = 10000.f;
  float norm_eps = 1e-5f;
  bool tied_embeddings = false;
  RopeScalingConfig rope_scaling;
  int head_dim() const { return d_model / n_head; }
};

struct DataConfig {
  std::string source = "copy";  // copy (synthetic long-range copy task) | bytes (text file) | shards (llm.c)
  std::string path;             // bytes: a text file; shards: a glob or file of llm.c token shards
  std::string eval_path;        // optional held-out file/glob; empty: held-out batches of the same source
  int seq_len = 128;            // T, global context length
  int copy_span = 0;            // copy task: span length; 0 = (seq_len - 1) / 2
  std::string documents = "none";   // none | eot: samples are packed documents, each starting with eot_token
  int eot_token = -1;               // -1 = auto: shards: meta.json's eot_token beside them, else 50256 (GPT-2)
  std::string positions = "global"; // global | document: RoPE positions restart at each document's start
  uint64_t seed = 1234;
};

// parallel.cp_scheme as the config holds it, read once from its YAML spelling (ring | gather | auto): one scheme for
// every batch, or auto, which the loader settles per batch (parallel/schedule/batch_schedule.h; CpScheme in
// parallel/schedule/cp_scheme.h is what a batch runs).
enum class CpSchemeSetting { ring, gather, automatic };
const char* cp_scheme_setting_name(CpSchemeSetting setting);  // the YAML spelling: "ring" | "gather" | "auto"

struct ParallelConfig {
  int dp = 1, cp = 1, tp = 1;
  // All-to-all degree u (DESIGN.md "All-to-all and the hybrid"): cp = ring x u, the ring runs over cp / u and the
  // u consecutive cp ranks of a group exchange heads for tokens. 1 = the ring alone; cp = all-to-all alone.
  // auto (kCpA2aAuto): the least predicted time (parallel/schedule/a2a_choice.h), resolved to a u at start-up
  // (framework/plan/a2a_auto.h) before anything reads it; the saved config holds the integer.
  int cp_a2a = 1;
  static constexpr int kCpA2aAuto = 0;
  bool cp_a2a_auto() const { return cp_a2a == kCpA2aAuto; }
  int ring() const { return cp_a2a >= 1 && cp % cp_a2a == 0 ? cp / cp_a2a : cp; }
  std::string layout = "auto";  // auto (zigzag if causal) | contiguous | zigzag | striped
  std::string comm = "auto";    // auto | mpi | nccl
  std::string dkv_wire = "fp32";  // ring backward: the travelling dK/dV accumulator on the wire, fp32 | bf16
  // Packed documents (data.documents: eot) on a ring of more than one rank (parallel/schedule/cp_scheme.h): ring (K/V
  // blocks hop around the ring, skipping the hops nobody needs) | gather (each rank receives exactly the key rows its
  // queries see in one exchange) | auto (per batch, the least predicted time). Without documents: the ring.
  CpSchemeSetting cp_scheme = CpSchemeSetting::automatic;
  // ZeRO over the dp x cp group (ranks with the same tp coordinate): 0 replicated; 1 fp32 masters and Adam
  // moments sharded; 2 gradients too (reduce-scattered per layer during the backward); 3 compute weights too
  // (all-gathered per layer before use, the next layer prefetched).
  int zero = 0;
  double timeout_s = 600;        // watchdog: a rank waiting this long in a collective ends the job (exit 4)
  double save_timeout_s = 3600;  // the same while a checkpoint is written
};

constexpr int kGeneratedEvalBatches = 4;  // train.eval_batches: 0 with data.source: copy

struct TrainConfig {
  int batch_size = 8;           // sequences per step, global (split over dp)
  int steps = 300;
  int eval_every = 100;         // 0 = never
  int eval_batches = 0;         // 0 = every window of the held-out split; N = its first N x batch_size windows
                                // (the copy task's generated split has no end: kGeneratedEvalBatches when 0)
  std::string checkpointing = "none";  // activation checkpointing: none | full | selective
  int lm_head_chunk = 1024;     // tokens per chunk of the fused LM head + loss
  int mlp_chunk = -1;           // tokens per MLP chunk: -1 auto (chunk only when N x d_ff > 2^27), 0 = none
  bool deterministic_attention = false;  // ordered dQ adds in the attention backward (same bits every run)
  // Activation offload (CUDA): the checkpointed block inputs of the first offload_layers layers go to pinned
  // host memory as each layer's forward ends and come back one layer ahead in the backward.
  std::string offload = "none";          // none | activations
  std::string offload_layers = "auto";   // auto (as few layers as make the step fit the GPU) | a layer count
  uint64_t seed = 42;
  std::string run_dir = "runs/default";
  // A ringtrain checkpoint directory or a Hugging Face model directory to start from (fresh optimizer, step 0;
  // the model section comes from it, framework/hf/init_from.h). checkpoint.resume wins when it finds a checkpoint.
  std::string init_from;
  bool overwrite = false;       // a fresh run into a run_dir holding checkpoints: delete them (else refused)
  double divergence_factor = 0; // also diverged: a logged loss above factor x its running mean (0 = off)
  std::string on_divergence = "stop";  // a non-finite loss or grad norm: stop (exit 3) | skip_step
  // The linear layers' GEMMs: bf16 (the activation dtype: bf16 on CUDA, f32 on the CPU) | fp8 (E4M3 operands
  // scaled per fp8.recipe; framework/model/fp8_linear.h).
  std::string precision = "bf16";
};

// precision: fp8 (framework/model/fp8_linear.h): how the blocks' linear GEMMs are scaled, and which blocks.
struct Fp8Config {
  // tensorwise (one factor per tensor) | rowwise (per row of each K-major operand) | block (1x128 activations and
  // gradients, 128x128 weights). Every scale is current: this step's amax.
  std::string recipe = "tensorwise";
  bool bf16_first_last = false;  // the first and the last block keep bf16 GEMMs
  // The attention backward's dV, dQ and dK products on E4M3 operands (kernels/attn_fp8.h; issue 47): head dims 64
  // and 128 on CPU ranks; on a GPU the sm_90a kernel: head dim 128, seq_len / cp a multiple of 128, no packed
  // documents (fp8_attention_cuda_refusal). The forward and dP stay in the activation dtype.
  bool attention = false;
  // fp8.attention on: the dtype K and V travel in between context-parallel ranks (issue 47 "Communication"): bf16 (the
  // activation dtype, as they are) | e4m3 (every rank rounds its own K and V to E4M3 once per layer and call, a factor
  // per sample, 128-row block and K/V head, and attention computes on the rounded values on every grid: the ring's K/V
  // hops carry half the bytes; kernels/kv_fp8_wire.h). The ring scheme only: the gather scheme and the all-to-all of
  // parallel.cp_a2a move K/V in the activation dtype (config validation refuses e4m3 where nothing would use it).
  std::string attention_kv = "bf16";
  // parallel.zero 3: how the FP8 blocks' weights are all-gathered: bf16 (the activation dtype) | fp8 (E4M3 codes
  // with one factor per weight matrix, half the bytes; norms stay bf16; tensorwise recipe only).
  std::string zero3_gather = "bf16";
};

struct OptimConfig {
  float lr = 3e-3f;
  float min_lr = 3e-4f;
  int warmup_steps = 20;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;       // 0 = off
};

struct CheckpointConfig {
  int every = 0;                // steps between saves; 0 = only at the end and on SIGUSR1/SIGTERM/SIGINT
  int keep_last = 3;
  bool save_final = true;       // save at the last step (benchmarks and sweeps turn it off)
  std::string resume;           // "" | "auto" (latest in run_dir) | a checkpoint directory
};

struct LogConfig {
  int every = 1;
  std::string metrics_file = "metrics.jsonl";  // inside run_dir
  double peak_tflops = 0;       // 0 = from the GPU name table
  bool tensorboard = true;      // event files in run_dir/tensorboard (framework/run/tensorboard.h); needs protobuf
};

struct Config {
  ModelConfig model;
  DataConfig data;
  ParallelConfig parallel;
  TrainConfig train;
  Fp8Config fp8;
  OptimConfig optim;
  CheckpointConfig checkpoint;
  LogConfig log;
  std::string device = "auto";  // auto | cpu | cuda
  std::string source_path;      // where it was loaded from (not a YAML key)
  // Dotted paths set explicitly, by the file or by --set (not a YAML key). Fields not listed hold defaults, so
  // eval and train.init_from can take them from a checkpoint (framework/checkpoint/model_source.h, framework/hf/init_from.h).
  std::vector<std::string> explicit_fields;
  bool is_explicit(const std::string& path) const;
  std::vector<std::string> notes;       // lines for the start-up print (e.g. model values taken from init_from)
};

// Loads YAML, applies `--set a.b=c` overrides in order, validates every constraint (world_size: the
// number of ranks the job runs on, checked against dp*cp*tp; 0 skips that check). Throws rt::Error with
// the key's path (and line) and what to change. Creates nothing on disk.
// A directory, or a file with no settings, is an error.
// resolve_model_source: what fills the model section from train.init_from before validation (the binary passes
// apply_init_from_model, framework/hf/init_from.h; config/ sits below the folders that read checkpoints, so it
// takes it as an argument). Without one, a config that sets train.init_from is refused.
using ModelSourceResolver = std::function<void(Config&)>;
Config load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size = 0,
                   const ModelSourceResolver& resolve_model_source = nullptr);
Config parse_config_text(const std::string& yaml_text, const std::vector<std::string>& overrides,
                         int world_size = 0, const std::string& origin = "<string>",
                         const ModelSourceResolver& resolve_model_source = nullptr);
// Every constraint, with messages that say what to change.
void validate_config(const Config& config, int world_size);
// fp8.attention on a GPU runs the sm_90a FP8 backward (kernels/attn_fp8.h "On CUDA tensors"): causal sequences and
// their ring blocks, so no packed documents, head_dim 128 and data.seq_len / parallel.cp a multiple of 128. "" when
// the config is in that scope, else one refusal naming every key outside it and the fix (validate_config for device:
// cuda, the resolve step for auto that lands on a GPU).
std::string fp8_attention_cuda_refusal(const Config& config);
// Resolved config as YAML (saved to run_dir/config.yaml) and as a printable table.
std::string config_to_yaml(const Config& config);
std::string config_table(const Config& config);
// Stable hash of the resolved config's model section (stored in state.json).
std::string model_config_hash(const Config& config);
// parallel.layout with "auto" resolved: balanced when cp > 1 with data.documents: eot, else zigzag when cp > 1
// (the model is causal), else contiguous.
std::string resolved_layout(const Config& config);
// data.eot_token with -1 resolved (framework/data/data_docs.cpp): shards: "eot_token" of a meta.json in the directory
// of data.path's first file (launch/prepare_data.py writes it), else 50256 (GPT-2 / llm.c); bytes: -1 (unset).
int resolved_eot_token(const Config& config);

}  // namespace rt
