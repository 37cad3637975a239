// The GPT model with an explicit forward and backward (DESIGN.md "One training step", "Tensor parallel").
//
//   tokens -> embedding -> L x block -> final RMSNorm -> fused chunked LM head + cross-entropy
//   block: x -> RMSNorm -> wq, wk, wv (local heads) -> RoPE (global positions) -> ring attention over cp
//            -> wo (row-parallel, all-reduce over tp) -> + x
//          -> RMSNorm -> MLP (GELU: fc, proj | SwiGLU: w1 gate, w3 up, w2 down; column- then row-parallel,
//            all-reduce over tp) -> + residual
//
// The backward runs layer by layer in reverse; there is no autograd. All math goes through rt ops, so the
// same code runs on CPU (f32 activations) and CUDA (bf16 activations, f32 masters and gradients).
//
// Parameters live in ONE flat f32 buffer (gradients in another, same layout) so the gradient all-reduce
// over dp x cp is a single call. The table params() maps each checkpoint name to its slice. 2-D weights
// come first in the buffer (weight decay applies to [0, decay_numel())), norm weights last.
//
// Every buffer comes from the Arena given to the constructor; build once on Arena::measuring to learn the
// exact bytes (and for `ringtrain plan`), then on a real arena. A step allocates nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/checkpoint.h"
#include "framework/config.h"
#include "framework/data.h"
#include "kernels/arena.h"
#include "kernels/rope_freqs.h"
#include "parallel/layout.h"
#include "parallel/process_grid.h"
#include "parallel/ring_attention.h"

namespace rt {

// How a parameter is split over the tp ranks. Full shapes are (out, in) for Linear weights.
enum class ShardKind : uint8_t {
  replicated,     // every tp rank holds the whole tensor (embedding, LM head, norms)
  column,         // rows (output features) split: wq, wk, wv (when n_kv_head >= tp), fc, w1, w3
  row,            // columns (input features) split: wo, proj, w2
  kv_replicated,  // n_kv_head < tp: each rank holds the one KV head its query heads read, shared by
                  // tp / n_kv_head ranks
};
const char* shard_kind_name(ShardKind kind);

struct ParamEntry {
  std::string name;                 // checkpoint name, e.g. "layers.0.attn.wq.weight"
  std::vector<int64_t> full_shape;  // unsharded shape
  std::vector<int64_t> local_shape; // this rank's shard
  ShardKind shard = ShardKind::replicated;
  int64_t offset = 0;               // into the flat buffers, elements
  int64_t numel = 0;                // local elements
  bool decay = false;               // 2-D weight: weight decay applies
  float init_std = 0;               // 0: initialised to ones (norm weights)
  // This rank's part of the full tensor: rows [row_begin, row_end) x columns [col_begin, col_end).
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  // Whether this rank contributes the shard when full tensors are assembled (and to the grad norm):
  // false for replicated tensors off tp rank 0 and for kv_replicated copies after the first.
  bool owner = true;
};

// none: keep every activation.
// selective: keep each block's input and its attention output + LSE; the backward recomputes the norms, the
//   q/k/v projections and RoPE, the residual and the MLP hidden, but NOT the ring attention (at long context
//   the dominant cost, and a second pass of ring traffic). Two (N, C) buffers per layer.
// full: keep only each block's input and recompute the whole block (ring attention included).
enum class ActivationCheckpointing { none, selective, full };
ActivationCheckpointing parse_checkpointing(const std::string& name);

// The dimensions one rank works with.
struct ModelShape {
  int64_t L = 0, C = 0, H = 0, Hkv = 0, D = 0, F = 0, V = 0;  // global model
  int tp = 1, tp_rank = 0;
  int64_t Hl = 0, Hkvl = 0, Fl = 0;  // local query heads, KV heads, MLP width
  int64_t B = 0, n = 0;              // sequences per rank, tokens per sequence on this rank
  bool swiglu = false, tied = false;
  int64_t N() const { return B * n; }
};
// Validates divisibility (heads by tp, d_model by heads, ...) with messages that say what to change.
ModelShape make_model_shape(const ModelConfig& model, int tp, int tp_rank, int64_t batch, int64_t local_tokens);

struct ModelOptions {
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  int64_t lm_head_chunk = 1024;  // tokens per chunk of the fused LM head + loss
  DType act_dtype = DType::f32;  // activations and compute weights: f32 on CPU, bf16 on CUDA
  Layout layout = Layout::contiguous;
  DType dkv_wire = DType::f32;   // ring backward: dK/dV accumulator on the wire (f32 | bf16)
  // Tokens per MLP chunk (forward, recompute and backward): the (N, Fl) hidden buffers become (chunk, Fl).
  // 0 = all N tokens at once; -1 = auto (resolve_mlp_chunk). Exact: only the weight-gradient sums over
  // tokens are split into per-chunk partial sums (gemm beta = 1).
  int64_t mlp_chunk = -1;
};

// The MLP chunk the model uses for `requested` (train.mlp_chunk) with N tokens and local width Fl:
//   0 or >= N: N (no chunking);  > 0: that many tokens;
//   -1 (auto): N when N * Fl <= 2^27 elements (a 256 MiB bf16 hidden buffer: every small config), else the
//   largest multiple of 256 tokens with chunk * Fl <= 2^27 (16,384 tokens at Fl = 8192), at least 256.
int64_t resolve_mlp_chunk(int64_t requested, int64_t tokens, int64_t local_d_ff);

// The parameter table for one tp rank, in flat-buffer order (pure function of the config; no memory).
std::vector<ParamEntry> build_param_table(const ModelConfig& model, int tp, int tp_rank);
// Total parameters of the full model (embedding and LM head included; tied counted once).
int64_t count_parameters(const ModelConfig& model);

// The communicators the model talks through: a ProcessGrid's, or size-only stand-ins for `ringtrain plan`.
struct ModelComms {
  Comm* tp = nullptr;     // tensor-parallel group (all-reduces after row-parallel layers)
  Comm* cp = nullptr;     // the ring of ring attention
  Comm* dp_cp = nullptr;  // ranks holding the same parameters (token counts, gradients)
  int tp_rank = 0;
  static ModelComms from(ProcessGrid& grid);
};

class Model {
 public:
  // batch: sequences on this rank; local_tokens: seq_len / cp. All buffers come from `arena`.
  Model(const ModelConfig& config, const ModelOptions& options, int64_t batch, int64_t local_tokens,
        const ModelComms& comms, Arena& arena);
  ~Model();

  const ModelShape& shape() const { return shape_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<ParamEntry>& params() const { return params_; }
  const ParamEntry& param(const std::string& name) const;
  Tensor master() const { return master_; }    // (P) f32
  Tensor grads() const { return grads_; }      // (P) f32
  Tensor compute() const { return compute_; }  // (P) act dtype; the same storage as master() on CPU
  int64_t decay_numel() const { return decay_numel_; }
  Comm& tp_comm() { return *comms_.tp; }
  Comm& dp_cp_comm() { return *comms_.dp_cp; }
  // The ring attention every layer uses; its timings() cover all layers' forward and backward calls.
  RingAttention& attention() { return *attention_; }

  // normal(0, 0.02), residual projections (wo, proj, w2) scaled by 1/sqrt(2L), norms 1. The full tensors
  // are generated from `seed` and sliced, so every grid gets the same model.
  void init_weights(uint64_t seed);
  // After the masters change outside the optimizer (init, load): refresh the compute copy (CUDA).
  void sync_compute_weights();

  // Target tokens of this batch summed over dp x cp (all ranks call it).
  double global_target_count(const Batch& batch);

  // Forward and fused loss on this rank's batch; when want_grad, the backward too, writing grads()
  // (overwritten) = d(global mean loss)/d(params) for this rank's tokens: the caller all-reduces over
  // dp x cp. Returns the per-token losses (B*n, 0 where the target is ignored) of this rank.
  std::vector<float> step(const Batch& batch, double global_count, bool want_grad);
  // step() without the download: the per-token losses stay in losses() (on CUDA the host does not wait).
  void forward_backward(const Batch& batch, double global_count, bool want_grad);
  // (B*n) f32 per-token losses of the latest step / forward_backward, on the model's device.
  Tensor losses() const { return losses_; }
  // (B*n, C) act dtype: the final RMSNorm's output of the latest forward; valid after a step without
  // gradients (a backward reuses its storage). Read by `ringtrain eval --dump-logits`.
  Tensor final_hidden() const { return final_out_; }

  // Gradients of kv_replicated weights summed over the tp ranks that share each KV head (after step()).
  void reduce_shared_kv_grads();

  // Full (unsharded) host tensors from a flat buffer laid out like master(): collective over tp.
  // Names are prefix + parameter name.
  std::vector<HostTensor> gather_full(const Tensor& flat, const std::string& prefix);
  // Fills this rank's shards of `flat` from full tensors (checks names and shapes).
  void scatter_full(Tensor flat, const std::vector<HostTensor>& tensors, const std::string& prefix);

 private:
  struct BlockActs;
  struct LayerWeights;
  LayerWeights layer_weights(const Tensor& flat, int layer) const;
  void upload_batch(const Batch& batch);
  // What block_forward computes: the training forward, or a recompute for the backward (which stops at the
  // MLP norm: the backward recomputes the MLP hidden chunk by chunk; under selective checkpointing it also
  // skips the attention itself).
  enum class BlockPass { forward, recompute, recompute_keep_attention };
  void block_forward(int layer, BlockActs& acts, BlockPass pass);  // model_forward.cpp
  // One chunk of rows: ln2 (m, C) -> h (, u) (m, Fl) -> g (m, Fl).
  void mlp_hidden_forward(const LayerWeights& w, const Tensor& ln2, Tensor h, Tensor u, Tensor g);
  // The MLP hidden of rows [begin, end): views of the kept (N, Fl) buffers under no checkpointing (computed
  // on the forward pass, read in the backward), else the shared (chunk, Fl) buffers computed from ln2.
  void mlp_chunk_hidden(int layer, BlockActs& acts, int64_t begin, int64_t end, bool for_backward, Tensor& h,
                        Tensor& u, Tensor& g);
  void backward();  // from d_final_ (written by the fused head) down to the embedding; model_backward.cpp
  void block_backward(int layer, BlockActs& acts);
  BlockActs& acts_for(int layer);
  Tensor param_view(const Tensor& flat, const std::string& name) const;

  ModelConfig config_;
  RopeFreqs rope_freqs_;             // computed once from config_ on the host in fp64 (framework/rope_scaling.h)
  ModelOptions options_;
  ModelShape shape_;
  ModelComms comms_;
  std::vector<ParamEntry> params_;
  int64_t decay_numel_ = 0;

  Tensor master_, grads_, compute_;  // (P)
  Tensor tokens_, targets_;          // (N) i32
  Tensor positions_;                 // (n) i32 global positions
  Tensor rope_table_;                // (n, D/2, 2) f32 (s cos, s sin) of this rank's positions (kernels/rope_table.h)
  std::vector<int32_t> rope_table_positions_;  // (n) the positions rope_table_ holds; rebuilt when a batch differs
  std::vector<float> rope_table_host_;         // (n, D/2, 2) its host copy (fp64 math, fp32 storage)
  Tensor losses_;                    // (N) f32
  std::vector<Tensor> residual_;     // L+1 x (N, C): block inputs, then the final hidden state
  std::vector<std::unique_ptr<BlockActs>> acts_;  // L; under checkpointing, recomputed buffers are shared
  Tensor final_rstd_;                // (N) f32
  Tensor final_out_;                 // (N, C) same storage as d_res_ (dead before the backward starts)
  Tensor head_scratch_;              // (chunk, V)
  // Backward scratch, shared by all layers.
  Tensor d_res_;                     // (N, C) residual-stream gradient
  Tensor d_ln_;                      // (N, C)
  Tensor d_final_;                   // (N, C) same storage as d_ln_ (read once, before any block backward)
  Tensor d_att_;                     // (N, Hl*D)
  Tensor d_q_;                       // (N, Hl*D)
  Tensor d_k_, d_v_;                 // (N, Hkvl*D)
  Tensor d_h_, d_u_, d_g_;           // (mlp_chunk_, Fl)
  int64_t mlp_chunk_ = 0;            // tokens per MLP chunk (resolve_mlp_chunk)
  bool keep_mlp_hidden_ = false;     // no checkpointing: h, u, g are kept per layer as (N, Fl)
  Tensor gather_scratch_;            // (chunk) f32, tp > 1 only: full tensors are summed through it
  std::unique_ptr<RingAttention> attention_;
};

}  // namespace rt
