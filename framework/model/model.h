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
// Parameters live in ONE flat f32 buffer (gradients in another, same layout), cut into units: the embedding,
// each layer, and the head (final norm + LM head). Each unit is contiguous and padded so that it splits into
// equal shards, so a unit takes one collective. The table params() maps each checkpoint name to its slice.
// ZeRO (`parallel.zero`, DESIGN.md "Sharded training state"): at stage >= 1 every rank of the dp x cp group
// keeps only its shard of each unit of the fp32 masters, gradients and Adam moments (master(), grads() and the
// moments are then the concatenation of this rank's unit shards); stage 2 reduce-scatters each unit's gradient
// as the backward finishes it; stage 3 shards the compute weights too and all-gathers each unit before use.
//
// Every buffer comes from the Arena given to the constructor; build once on Arena::measuring to learn the
// exact bytes (and for `ringtrain plan`), then on a real arena. A step allocates nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/base/host_tensor.h"
#include "framework/config/config.h"
#include "framework/data/data.h"
#include "kernels/arena.h"
#include "kernels/fp8.h"
#include "kernels/rope_freqs.h"
#include "parallel/comm/process_grid.h"
#include "parallel/cp/context_attention.h"
#include "parallel/schedule/layout.h"

namespace rt {

class Fp8Linear;
class ZeroFp8Gather;

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
  int unit = 0;                     // 0 embedding, 1 + l layer l, L + 1 head (final norm, LM head)
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
  // ZeRO stage 0-3 over the dp x cp group (a group of one shards nothing: the model runs stage 0).
  int zero = 0;
  // Activation offload (CUDA): the block inputs of layers [0, offload_layers) live in pinned host memory
  // between their forward and backward; on the device they share two (N, C) staging buffers.
  int offload_layers = 0;
  // RoPE positions differ per sample (data.positions: document, or the balanced layout, which lays out each sample
  // by its own documents): the RoPE table holds B*n rows, not n. The model refuses balanced without it.
  bool per_sample_positions = false;
  // Packed documents (data.documents: eot): on CUDA the batch's document mask is uploaded to the device.
  bool documents = false;
  // parallel.cp_scheme gather or auto with documents on a ring of more than one rank: the ring attention holds the
  // gather scheme's buffers, so a batch may run it (Batch::cp_scheme).
  bool cp_gather = false;
  // train.precision: fp8 (framework/model/fp8_linear.h): every linear GEMM of a block with E4M3 operands scaled per
  // fp8_recipe; fp8_bf16_first_last keeps blocks 0 and L-1 in the activation dtype.
  bool fp8 = false;
  Fp8Recipe fp8_recipe = Fp8Recipe::tensorwise;
  bool fp8_bf16_first_last = false;
  // fp8.attention (with fp8): the attention backward's dV, dQ, dK on E4M3 operands (kernels/attn_fp8.h).
  bool fp8_attention = false;
  // fp8.attention_kv: e4m3 (with fp8_attention): K and V rounded to E4M3 once per layer and call, the ring's K/V hops
  // carrying the codes (RingAttention::set_kv_wire).
  bool fp8_attention_kv = false;
  // fp8.zero3_gather: fp8 (zero 3 with fp8): the FP8 blocks' units are all-gathered as E4M3 codes with one factor per
  // weight matrix instead of in the activation dtype, and dequantized into the gather slot
  // (framework/model/zero_fp8_gather.h).
  bool fp8_zero3_gather = false;
  // A model that never runs a backward (eval and generate: a session without an optimizer): the blocks share one
  // set of activation buffers, the residual stream alternates between two (N, C) buffers instead of keeping each
  // block's input, and no gradient buffer is allocated. forward_backward refuses want_grad.
  bool forward_only = false;
};

// The MLP chunk the model uses for `requested` (train.mlp_chunk) with N tokens and local width Fl:
//   0 or >= N: N (no chunking);  > 0: that many tokens;
//   -1 (auto): N when N * Fl <= 2^27 elements (a 256 MiB bf16 hidden buffer: every small config), else the
//   largest multiple of 256 tokens with chunk * Fl <= 2^27 (16,384 tokens at Fl = 8192), at least 256.
//   Precision fp8 under selective or full checkpointing: a budget of 2^26 (mlp_chunk_budget_log2), so that the
//   halved bf16 hidden buffers pay for the FP8 workspaces (sized by the chunk too) and the arena is no larger than
//   bf16's (tests/unit/plan/test_plan_fit.cpp). Without checkpointing fp8 keeps transposed FP8 copies instead of
//   bf16 activations and is smaller already. The planner asks the same through resolved_mlp_chunk
//   (framework/plan/trainer_setup.h).
int mlp_chunk_budget_log2(bool fp8, ActivationCheckpointing checkpointing);
int64_t resolve_mlp_chunk(int64_t requested, int64_t tokens, int64_t local_d_ff, bool fp8 = false,
                          ActivationCheckpointing checkpointing = ActivationCheckpointing::none);

// A contiguous, padded range of the flat buffers holding one unit's parameters (numel % (64 * shards) == 0).
struct ParamUnit {
  std::string name;  // "embedding", "layers.<l>", "head"
  int64_t offset = 0, numel = 0;
};
struct ParamLayout {
  std::vector<ParamEntry> table;  // checkpoint order (embedding, 2-D weights, LM head, norms)
  std::vector<ParamUnit> units;   // L + 2, in flat order
  int64_t total = 0;              // flat elements (sum of the units)
  int shard_count = 1;
};
// The parameter table and units for one tp rank, units padded for `shard_count` shards (pure function of the
// config; no memory). build_param_table is its table with shard_count 1.
ParamLayout build_param_layout(const ModelConfig& model, int tp, int tp_rank, int shard_count);
std::vector<ParamEntry> build_param_table(const ModelConfig& model, int tp, int tp_rank);
int param_unit_of(const std::string& name, int n_layer);
// The index in the full row-major tensor of local element i of e's tp shard.
inline int64_t full_index(const ParamEntry& e, int64_t i) {
  const int64_t lc = e.col_end - e.col_begin, fc = e.full_shape.back();
  return (e.row_begin + i / lc) * fc + e.col_begin + i % lc;
}
// Total parameters of the full model (embedding and LM head included; tied counted once).
int64_t count_parameters(const ModelConfig& model);

// The communicators the model talks through: a ProcessGrid's, or size-only stand-ins for `ringtrain plan`.
struct ModelComms {
  Comm* tp = nullptr;     // tensor-parallel group (all-reduces after row-parallel layers)
  Comm* cp = nullptr;     // the context group (ring x a2a): the document arrays span it
  Comm* ring = nullptr;   // the ring of ring attention, cp / u ranks (null: the cp group)
  Comm* a2a = nullptr;    // the all-to-all head exchange, u ranks (null: none, u = 1)
  Comm* dp_cp = nullptr;  // ranks holding the same parameters (token counts, gradients)
  int tp_rank = 0;
  static ModelComms from(ProcessGrid& grid);
};

// Generation (framework/model/model_decode.cpp, DESIGN.md "Generate"): this rank's shard of the KV cache, and the
// buffers of one decode step (one new token, batch 1). Rows are this rank's cached tokens in the order they came
// (the prefill's rows in the layout's local order, then the decoded tokens appended here); decode attention has no
// mask, so the order of the rows does not matter.
struct KvCache {
  int64_t capacity = 0;         // rows per layer on this rank
  int64_t rows = 0;             // rows filled
  std::vector<Tensor> k, v;     // L x (capacity, Hkvl*D) act dtype; K after RoPE (the training forward's a.k, a.v)
  std::vector<int64_t> capture; // prefill: the local rows of the forward to keep (sorted; the prompt, not the pad)
  Tensor step_inputs;           // (4 + D) 4-byte words: token | kv_len | append_row (i32) | 0 | rope (D/2, 2) f32,
                                // every per-step value in one buffer (one copy sets them: the graphed decode)
  Tensor token;                 // (1) i32 view of step_inputs: the token being decoded
  Tensor kv_len;                // (1) i32 view of step_inputs: rows this rank attends over in this step
  Tensor append_row;            // (1) i32 view of step_inputs: the row the step's K / V go to (graphed; < 0: none)
  Tensor rope;                  // (1, D/2, 2) f32 view of step_inputs: the token's RoPE row (its global position)
  Tensor x, out, x_mid;         // (1, C) act: residual stream in / block output / after attention
  Tensor ln, ln2;               // (1, C) act
  Tensor rstd;                  // (1) f32
  Tensor qkv;                   // (1, (Hl + 2 Hkvl)*D) act: q | k_new | v_new, adjacent (one GEMM, one RoPE)
  Tensor q, att;                // (1, Hl*D) act; q views qkv
  Tensor k_new, v_new;          // (1, Hkvl*D) act, views of qkv
  Tensor h;                     // (1, Fl | 2Fl) act
  Tensor g;                     // (1, Fl) act
  Tensor state;                 // (Hl*(D+2)) f32: acc (1,Hl,1,D) | m (1,Hl,1) | l (1,Hl,1) of this rank's shard
  Tensor gathered;              // (cp, Hl*(D+2)) f32: every cp rank's state, merged into row 0
  Tensor lse;                   // (1, Hl, 1) f32
  Tensor work;                  // (attn_decode_work_elems(1, Hl, Hkvl, D, capacity)) f32, zeroed once
  Tensor logits;                // (1, V) act: the next token's logits after decode_step
  // Chunked prefill only (make_kv_cache with chunked_prefill; n = the model's tokens per rank, a chunk's rows here):
  Tensor chunk_state;           // cp = 1: (Hl*n*(D+2)) f32, attn_fwd_whole's scratch;
                                // cp > 1: (cp, Hl*n*(D+2)) f32, row s = the state of cp rank s's queries over this
                                // rank's rows, each acc (1,Hl,n,D) | m (1,Hl,n) | l (1,Hl,n) (sent to rank s)
  Tensor chunk_states;          // cp > 1: (cp, Hl*n*(D+2)) f32, row s = rank s's state of this rank's queries
  Tensor chunk_q;               // cp > 1: (cp*n, Hl*D) act, the chunk's queries gathered over cp (rank s's at s*n)
};

// Which n rows of a prefill chunk cp rank `rank` holds: [slot n, (slot + 1) n) for slot = (rank + chunk) % cp. The
// slots go round the ranks from chunk to chunk, so that short chunks do not put every row on the first ranks.
inline int64_t prefill_chunk_slot(int64_t rank, int64_t chunk, int64_t cp) { return (rank + chunk) % cp; }

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
  // The local buffers: (P) at zero 0, this rank's shards (P / shards) at zero >= 1 (see owned()).
  Tensor master() const { return master_; }    // (local) f32; undefined in a forward-only model at zero 0 on a GPU
  // The weights as loaded and read (scatter_full, gather_full, init_weights): master(), or the compute copy where a
  // forward-only model keeps no master. (local) f32 | (P) act.
  Tensor weights() const { return master_.defined() ? master_ : compute_; }
  Tensor grads() const { return grads_; }      // (local) f32: summed over dp x cp after reduce_gradients()
  // (P) act dtype (the same storage as master() on CPU at zero 0); (P / shards) at zero 3.
  Tensor compute() const { return compute_; }
  int zero() const { return zero_; }            // the stage in effect (0 when the dp x cp group is one rank)
  bool fp8_zero3_gather() const { return fp8_gather_ != nullptr; }  // the E4M3 weight gather is in effect
  int offload_layers() const { return offload_layers_; }
  // Pinned host memory the offloaded block inputs take on this rank (allocated only on a real arena).
  size_t host_offload_bytes() const { return host_offload_bytes_; }
  int shard_count() const { return shards_; }   // 1 at zero 0
  const std::vector<ParamUnit>& units() const { return layout_.units; }
  // Unit u's part owned by this rank: flat [flat_begin, flat_end), at local_begin of the local buffers.
  struct OwnedRange {
    int64_t flat_begin = 0, flat_end = 0, local_begin = 0;
  };
  OwnedRange owned(int unit) const;
  // The local buffers as runs of elements that share weight decay and ownership (each alignment gap belongs to
  // the parameter before it); AdamW and the gradient norm walk these.
  struct LocalRun {
    int64_t begin = 0, end = 0;
    bool decay = false, owner = true;
  };
  const std::vector<LocalRun>& local_runs() const { return runs_; }
  // Parts of parameters in this rank's local buffers: local elements [first, last) of `entry`'s tp shard,
  // stored at `at` of master() (and of grads() and the moments).
  struct Piece {
    const ParamEntry* entry = nullptr;
    int64_t at = 0, first = 0, last = 0;
  };
  std::vector<Piece> owned_pieces() const;  // all of them: what a load fills
  // A partition of the whole model over the world: every element of every full tensor lies in exactly one
  // rank's writer pieces (tp: the owner's copy; dp x cp: the shards, or at zero 0 an even split). Checkpoints
  // write and check these.
  std::vector<Piece> writer_pieces() const;
  // ZeRO traffic since reset_zero_stats(): host seconds inside the ZeRO collectives' start and wait calls (with
  // the mpi communicator that is their whole cost: host staging and MPI; with NCCL only the enqueue), and bytes.
  // Under fp8.zero3_gather: fp8, gathered_bytes includes fp8_code_bytes (the E4M3 codes, one byte per element the
  // activation dtype would send) and fp8_side_bytes (the 1-D parameters in the activation dtype and the amaxes).
  struct ZeroStats {
    double host_s = 0, gathered_bytes = 0, scattered_bytes = 0;
    double fp8_code_bytes = 0, fp8_side_bytes = 0;
    int64_t gathers = 0, reduce_scatters = 0;
  };
  const ZeroStats& zero_stats() const { return zero_stats_; }
  void reset_zero_stats() { zero_stats_ = {}; }
  // After forward_backward(want_grad): grads() summed over dp x cp. zero 0: one all-reduce; zero 1: one
  // reduce-scatter per unit; zero 2/3: waits for the per-unit reduce-scatters the backward posted.
  void reduce_gradients();
  Comm& tp_comm() { return *comms_.tp; }
  Comm& dp_cp_comm() { return *comms_.dp_cp; }
  // The ring attention every layer uses; its timings() cover all layers' forward and backward calls.
  ContextAttention& attention() { return *attention_; }

  // normal(0, 0.02), residual projections (wo, proj, w2) scaled by 1/sqrt(2L), norms 1. The full tensors
  // are generated from `seed` and sliced, so every grid gets the same model.
  void init_weights(uint64_t seed);
  // After the masters change (init, load; and after every update at zero >= 1): refresh the compute weights
  // (zero 1/2: this rank's shard copied into the full copy, then all-gathered per unit; zero 3: the shard).
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
  // precision fp8: whether block `layer` runs its linear GEMMs in FP8 (false under bf16).
  bool fp8_layer(int layer) const;
  // precision fp8: the FP8 factors that were not finite (an amax that overflowed, or a NaN in the tensor) since the
  // last call, naming the layer and the tensor; "" when none (or under bf16). Reads the device (a wait); the
  // divergence guard asks at its checks (framework/run/trainer.cpp).
  // Collective over `world` (every rank's record is summed, so all decide alike); under bf16 it returns "" at once.
  std::string take_fp8_bad_factors(Comm& world);

  // (B*n, C) act dtype: the final RMSNorm's output of the latest forward; valid after a step without
  // gradients (a backward reuses its storage). Read by `ringtrain eval --dump-logits`.
  Tensor final_hidden() const { return final_out_; }

  // Generation (model_decode.cpp). make_kv_cache: the cache and step buffers for `capacity` rows from `arena`
  // (measure on Arena::measuring first), with chunked_prefill also prefill_chunk's states. set_kv_capture: the
  // following forwards copy rows cache->capture of every layer's K (after RoPE) and V into the cache (null: stop).
  // decode_step: cache->token at global `position`; when append_here, its K / V become this rank's row cache.rows
  // (the caller then counts it); attention over this rank's rows, the fp32 states merged over the cp group; writes
  // cache.logits. Collective over cp and tp.
  KvCache make_kv_cache(Arena& arena, int64_t capacity, bool chunked_prefill = false) const;
  void set_kv_capture(KvCache* cache) { kv_capture_ = cache; }
  void decode_step(KvCache& cache, int64_t position, bool append_here);
  // The graphed decode step (DESIGN.md "Generate", framework/eval/decode_graph.h). decode_step_inputs writes into
  // `host` (cache.step_inputs.nbytes() bytes, laid out as cache.step_inputs) the token, kv_len, append row and the
  // RoPE row of global `position`; decode_step_from_inputs is decode_step's launches with every per-step value read
  // from cache.step_inputs on the device (K / V appended at append_row by append_kv_row), so that a StepGraph
  // captures it once. One rank only: no cp / tp communication inside. Neither touches cache.rows.
  void decode_step_inputs(void* host, const KvCache& cache, int32_t token, int64_t position, int32_t kv_len,
                          int32_t append_row) const;
  void decode_step_from_inputs(KvCache& cache);
  // Chunked prefill (model_prefill.cpp, DESIGN.md "Generate"): chunk number `chunk` of the prompt, at global
  // positions [start, start + valid), sharded over the cp group: `tokens` (n, this model's tokens per rank) are the
  // chunk's rows [slot n, (slot + 1) n) with slot = prefill_chunk_slot(cp rank, chunk, cp) (those at or past `valid`:
  // padding, not cached). Each layer appends this rank's prompt rows' K / V to its shard (at cache.rows); every
  // rank's queries attend over every rank's shard (the queries all-gathered over cp, the fp32 states sent back
  // all-to-all and merged in cp-rank order). Adds the rows to cache.rows. Needs make_kv_cache(.., chunked_prefill =
  // true); the model's own ring attention is not used (build it on a ring of one: generate_model_comms). Collective
  // over cp and tp.
  void prefill_chunk(KvCache& cache, const std::vector<int32_t>& tokens, int64_t chunk, int64_t start, int64_t valid);
  // Generation's prefill forward (model_prefill.cpp): the training forward's blocks on `batch` (every rank's rows
  // as in training; the K / V captured by set_kv_capture, or a chunk's attention against the cache), then nothing
  // more: no LM head and no loss over the rows (a token is chosen only after the prompt's last token, whose logits
  // the first decode step computes), no backward. Returns when the device has finished. Collective over cp and tp.
  void prefill_forward(const Batch& batch);

  // Gradients of kv_replicated weights summed over the tp ranks that share each KV head (after step()).
  void reduce_shared_kv_grads();

  // Full (unsharded) host tensors from a local buffer laid out like master(): collective over tp (and dp x cp
  // at zero >= 1).
  // Names are prefix + parameter name.
  std::vector<HostTensor> gather_full(const Tensor& flat, const std::string& prefix);
  // Fills this rank's shards of `flat` from full tensors (checks names and shapes).
  void scatter_full(Tensor flat, const std::vector<HostTensor>& tensors, const std::string& prefix);

 private:
  struct BlockActs;
  struct LayerWeights;
  // Views of one unit's buffer (as returned by unit_weights / unit_grads).
  LayerWeights layer_weights(const Tensor& unit_buffer, int layer) const;
  // The full compute weights of unit u (zero 3: waits for its gather, posting it when not prefetched).
  Tensor unit_weights(int unit);
  void prefetch_weights(int unit);  // zero 3: posts unit u's all-gather into its slot (no-op otherwise)
  // The full gradient of unit u: a view of the full buffer (zero 0/1) or its slot (zero 2/3), which
  // begin_unit_grads zeroes (after the slot's previous reduce-scatter) and end_unit_grads reduce-scatters.
  Tensor unit_grads(int unit);
  void begin_unit_grads(int unit);
  void end_unit_grads(int unit);
  int slot_of(int unit) const;
  void build_local_runs();
  // Calls fn(entry, local offset, first, last) for the part [first, last) of each parameter's local elements
  // that this rank owns, at `local offset` of the local buffers.
  template <class Fn> void for_each_owned_piece(Fn&& fn) const;
  void sum_over(Comm& comm, std::vector<float>& values);  // through gather_scratch_
  void upload_batch(const Batch& batch);
  // What block_forward computes: the training forward, or a recompute for the backward (which stops at the
  // MLP norm: the backward recomputes the MLP hidden chunk by chunk; under selective checkpointing it also
  // skips the attention itself).
  enum class BlockPass { forward, recompute, recompute_keep_attention };
  void block_forward(int layer, BlockActs& acts, BlockPass pass);  // model_forward.cpp
  // One chunk of rows (chunk index `chunk` of layer `layer`): ln2 (m, C) -> h (m, Fl | 2Fl for SwiGLU's gate|up)
  // -> g (m, Fl).
  void mlp_hidden_forward(int layer, int64_t chunk, const LayerWeights& w, const Tensor& ln2, Tensor h, Tensor g);
  // precision fp8 (model_fp8.cpp): the FP8 versions of a block's GEMMs. Forward of the QKV projections and wo, and
  // of one MLP chunk's input (h, before the activation) and output projections; the backward of the MLP chunk and of the attention's linear layers.
  void fp8_qkv_forward(int layer, const LayerWeights& w, BlockActs& a);
  void fp8_attn_out_forward(int layer, const LayerWeights& w, BlockActs& a);
  void fp8_mlp_in_forward(int layer, int64_t chunk, const LayerWeights& w, const Tensor& ln2, Tensor h, Tensor g);
  void fp8_mlp_out_forward(int layer, int64_t chunk, const LayerWeights& w, const Tensor& g, Tensor out);
  void fp8_mlp_backward(int layer, int64_t chunk, const LayerWeights& w, const LayerWeights& dw, const Tensor& ln2,
                        const Tensor& h, const Tensor& g, const Tensor& d_out, Tensor d_ln2);
  void fp8_attn_out_backward(int layer, const LayerWeights& w, const LayerWeights& dw, BlockActs& a);
  void fp8_qkv_backward(int layer, const LayerWeights& w, const LayerWeights& dw, BlockActs& a);
  std::unique_ptr<Fp8Linear> fp8_;  // precision fp8 only
  // The MLP hidden of rows [begin, end): views of the kept (N, .) buffers under no checkpointing (computed
  // on the forward pass, read in the backward), else the shared (chunk, .) buffers computed from ln2.
  void mlp_chunk_hidden(int layer, BlockActs& acts, int64_t begin, int64_t end, bool for_backward, Tensor& h,
                        Tensor& g);
  void backward();  // from d_final_ (written by the fused head) down to the embedding; model_backward.cpp
  void block_backward(int layer, BlockActs& acts);
  BlockActs& acts_for(int layer);
  Tensor param_view(const Tensor& unit_buffer, const std::string& name) const;
  // Two adjacent 2-D parameters of one unit with the same columns as one (rows1 + rows2, cols) view.
  Tensor param_pair_view(const Tensor& unit_buffer, const std::string& first, const std::string& second) const;

  ModelConfig config_;
  RopeFreqs rope_freqs_;             // computed once from config_ on the host in fp64 (framework/config/rope_scaling.h)
  ModelOptions options_;
  ModelShape shape_;
  ModelComms comms_;
  std::vector<ParamEntry> params_;
  ParamLayout layout_;
  int zero_ = 0, shards_ = 1, shard_rank_ = 0;
  std::vector<LocalRun> runs_;

  Tensor master_, grads_, compute_;  // (local) f32, (local) f32, (P | local at zero 3) act
  Tensor full_grads_;                // (P) f32 at zero 0 (= grads_) and 1; absent at zero 2/3
  // zero 2/3: gradient slots, zero 3: weight slots, by slot_of(unit): [0] embedding, [1] head, [2, 3] layers
  // by parity. Each is (largest unit it serves) f32 / act dtype.
  Tensor grad_slot_[4], weight_slot_[4];
  int weight_slot_unit_[4] = {-1, -1, -1, -1};  // which unit a weight slot holds (or is being gathered into)
  int weight_pending_[4] = {-1, -1, -1, -1};    // handle of a gather not yet waited for
  int grad_pending_[4] = {-1, -1, -1, -1};      // handle of a reduce-scatter not yet waited for
  ZeroStats zero_stats_;
  // zero 3 with fp8.zero3_gather: fp8: the E4M3 gather of the FP8 blocks' units (its codes and 1-D parameter buffers,
  // its amaxes); null otherwise. model_shards.cpp posts and finishes its gathers.
  std::unique_ptr<ZeroFp8Gather> fp8_gather_;
  int fp8_plain_pending_[4] = {-1, -1, -1, -1};  // handle of the 1-D parameters' gather of a slot not yet waited for
  // The ZeRO collectives, timed into zero_stats_.
  int zero_gather(const Tensor& send, Tensor recv);
  int zero_reduce_scatter(const Tensor& send, Tensor recv);
  void zero_wait(int handle);
  Tensor tokens_, targets_;          // (N) i32
  // The RoPE table (kernels/rope_table.h): (rope_table_rows_, D/2, 2) f32 (s cos, s sin) of this rank's positions;
  // rope_table_rows_ = n (positions shared by the samples) or B*n (options.per_sample_positions: sample b's rows
  // are [b*n, (b+1)*n)).
  Tensor rope_table_;
  int64_t rope_table_rows_ = 0;
  std::vector<int32_t> rope_table_positions_;  // (rope_table_rows_) the positions rope_table_ holds
  std::vector<float> rope_table_host_;         // (rope_table_rows_, D/2, 2) its host copy (fp64 math, fp32 storage)
  std::vector<float> rope_rows_by_position_;   // (max position + 1, D/2, 2) per-sample mode: each value's row
  std::vector<int64_t> doc_pos_, doc_start_;   // (B, cp*n) the batch's document mask (Batch::doc_pos / doc_start)
  // CUDA with options.documents: (2, B, cp*n, 2) i32 = doc_pos_ then doc_start_ as int64 (two i32 words each: the
  // tensor types have no int64), what the CUDA attention kernels read; empty otherwise.
  Tensor doc_mask_dev_;
  void upload_rope_table(const std::vector<int32_t>& positions);  // positions (B, n): rebuilt when they change
  void rope_rows(const Tensor& x4, bool inverse);  // RoPE of x4 (B, n, heads, D) from rope_table_
  Tensor losses_;                    // (N) f32
  std::vector<Tensor> residual_;     // L+1 x (N, C): block inputs, then the final hidden state
  // Offload: layers [0, offload_layers_) keep their inputs in host_inputs_[l] (pinned, (N, C) act); on the
  // device residual_[l] is offload_stage_[l % 2]. offload_.. state: model_offload.cpp.
  int offload_layers_ = 0;
  size_t host_offload_bytes_ = 0;
  Tensor offload_stage_[2];          // (N, C) act
  std::vector<void*> host_inputs_;   // offload_layers_ x pinned (N * C) act
  struct Offload;
  std::unique_ptr<Offload> offload_;
  void offload_after_forward(int layer);    // posts host_inputs_[layer] <- residual_[layer]
  void offload_before_output(int layer);    // before block `layer` writes residual_[layer + 1]
  void offload_prefetch(int layer);         // posts residual_[layer] <- host (the backward, one layer ahead)
  void offload_wait_input(int layer);       // the compute stream waits for residual_[layer]
  void init_offload();                      // pinned host buffers and the copy stream
  void offload_begin_step(bool want_grad);  // settles the previous step's copies
  bool offload_active_ = false;
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
  Tensor d_h_;                       // (mlp_chunk_, Fl) GELU | (mlp_chunk_, 2Fl) SwiGLU: d gate | d up per row
  Tensor d_g_;                       // (mlp_chunk_, Fl) SwiGLU only: d(activated hidden)
  int64_t mlp_chunk_ = 0;            // tokens per MLP chunk (resolve_mlp_chunk)
  bool keep_mlp_hidden_ = false;     // no checkpointing: h and g are kept per layer as (N, .)
  Tensor gather_scratch_;            // (chunk) f32, tp > 1 or shards > 1: full tensors are summed through it
  KvCache* kv_capture_ = nullptr;  // set_kv_capture
  void capture_kv(int layer, const Tensor& k, const Tensor& v);  // (N, Hkvl*D) each
  // decode_step's launches after its inputs are set: the K / V appended at host row cache.rows (append_here), or at
  // the device's cache.append_row (append_on_device), or nowhere.
  void decode_launches(KvCache& cache, bool append_here, bool append_on_device);
  struct PrefillChunk {             // the chunk prefill_chunk is running (cache null: none)
    KvCache* cache = nullptr;
    int64_t index = 0, start = 0, valid = 0;
  };
  PrefillChunk chunk_;
  // The chunk's attention against the cache shards (model_prefill.cpp): q4 (1, n, Hl, D), k and v (n, Hkvl*D) after
  // RoPE, out4 (1, n, Hl, D) and lse (1, Hl, n) written.
  void chunk_attention(int layer, const Tensor& q4, const Tensor& k, const Tensor& v, Tensor out4, Tensor lse);
  LocalComm no_a2a_;  // the a2a group when comms.a2a is null
  std::unique_ptr<ContextAttention> attention_;
};

}  // namespace rt
