// FP8 linear layers (train.precision: fp8, issue 44): the quantization of a block's GEMM operands, their
// workspaces, the amax reductions and the record the divergence guard reads. The model (model_forward.cpp,
// model_backward.cpp) calls it around every linear GEMM of a block: QKV, the attention output projection, the MLP's
// input and output projections, in the forward (y = x W^T), the data gradient (dx = dy W) and the weight gradient
// (dW += dy^T x). Embedding, LM head, norms, softmax and attention stay in the activation dtype.
//
// Scaling (kernels/fp8.h): E4M3 everywhere, current scaling (this step's amax; there is no scaling state to save or
// resume). fp8.recipe tensorwise: one factor per operand; rowwise: one per row of each K-major operand; block: 1x128
// for activations and gradients, 128x128 for weights. Hopper takes both GEMM operands K-major, so each GEMM's
// operands are quantized in the layout it reads: x (N,K) for the forward, dy (N,Cout) and W^T (Cin,Cout) for the
// data gradient, dy^T (Cout,N) and x^T (Cin,N) for the weight gradient (q and its transpose from one read of the
// source where both are needed).
//
// Which ranks an amax is reduced over: exactly those that hold parts of the same operand of the unsharded step, so
// that every grid quantizes what one rank would (tests/mpi/test_fp8_grids.cpp):
//   - tp: an operand sharded over tp (a column-parallel weight's rows, a row-parallel weight's columns, the
//     head- or hidden-sharded activations att, g and their gradients) reduces over the tp group; replicated ones
//     (the norm outputs ln1, ln2 and the gradient of the residual stream) are the same on every tp rank and need none.
//   - dp x cp: tokens are split over the dp x cp group, so an amax that runs over tokens (tensorwise activations and
//     gradients; rowwise x^T and dy^T of the weight gradient, whose rows are features) reduces over it.
//   - rowwise forward rows (one token) and block groups (1x128, 128x128 within a shard) need no reduction.
// A reduction is an all-gather of the amaxes and their maximum on the device (NaN propagating), so a rank's NaN
// reaches every rank. The MLP's tensors are quantized per MLP chunk (train.mlp_chunk): a chunk is the tensor.
// The attention side's GEMMs (QKV, wo; forward, data and weight gradient) also run in token chunks of that size,
// but their scaling groups are the whole (N, .) tensors' as without chunks: whole_amax takes the tensorwise amax,
// or rowwise x^T's / dy^T's per-feature amaxes, over all N tokens (reduced as above) first, then quantize_rows
// quantizes one chunk of rows with them (rowwise q rows are per token, a chunk's own; block chunks start on
// multiples of 128, the tiling check's rule, so the blocks are the same). Weight gradients accumulate over the
// chunks (beta 1); forward outputs and data gradients are the chunks' rows. RT_FP8_ATTENTION_CHUNKS=0 runs them
// over all N tokens at once (an A/B of speed; the numerics are the same up to the weight gradients' f32 sums).
// With model.n_kv_head < tp the K/V gradients are per-rank partial sums (reduced later, reduce_shared_kv_grads) and
// are quantized as such.
//
// Memory: the workspaces are shared by all layers and sized by the chunk (m rows), not by N; no FP8 copy of a weight
// outlives the GEMM pass that needs it
// (the forward's W and the backward's W^T are quantized into the same two buffers, layer by layer). Under
// train.checkpointing: none, what the backward reads only as a weight gradient's operand (ln1, ln2 and the MLP
// activation g) is kept as its transposed FP8 copy, made in the forward's quantization pass, instead of in bf16
// (BlockActs::ln1_t, ln2_t, g_t, one per chunk; the bf16 ones become one set shared by the layers).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/arena.h"
#include "kernels/fp8.h"
#include "parallel/comm/comm.h"

namespace rt {

// The comms that split a source tensor x (R,K) of a quantization: its rows and its columns (null: not split).
struct Fp8Split {
  Comm* rows = nullptr;
  Comm* cols = nullptr;
};

// The quantizations whose factors the guard checks, per layer (Fp8Linear::record). The MLP's are per chunk.
// In the order a step quantizes them (forward by layer, then the backward from the last layer down), which is the
// order the guard reports them in: the first bad one is where a NaN or an overflow started.
enum class Fp8Site : uint8_t {
  attn_norm_out, wq, wk, wv, attn_out, wo, mlp_norm_out, fc, mlp_act, proj,  // forward
  grad_mlp_out, grad_mlp_hidden, grad_attn_proj_out, grad_q, grad_k, grad_v,  // backward
  count
};
const char* fp8_site_name(Fp8Site site, bool swiglu);

// The linear GEMMs of one rank's block, for the tiling check: tokens N, MLP chunk m, widths per rank.
struct Fp8BlockDims {
  int64_t tokens = 0, mlp_chunk = 0;        // N, m (the last chunk may be shorter: N % m)
  int64_t d_model = 0, q_width = 0, kv_width = 0, mlp_width = 0;  // C, Hl*D, Hkvl*D, Fl
  bool swiglu = false;                      // the MLP's input projection is [w1; w3] (2Fl, C)
  int64_t attention_chunk = 0;              // the QKV / wo GEMMs' token chunk (0: the MLP chunk m)
};
// Every forward, data-gradient and weight-gradient GEMM of an FP8 block under `recipe` against the tiling rule of
// gemm_fp8 (kernels/fp8.h check_fp8_gemm_tiling). Returns "" or the first problem: the layer, the GEMM, the dimension
// and the fix.
std::string fp8_tiling_problem(Fp8Recipe recipe, const Fp8BlockDims& dims, int first_fp8_layer);
Fp8Recipe parse_fp8_recipe(const std::string& name);

class Fp8Linear {
 public:
  // The workspaces: act holds the q of a GEMM's left operand (x or dy), act_t the transposed dy of a weight
  // gradient, other_t the transposed x of a weight gradient, weight0 / weight1 a weight or its transpose (the
  // column-parallel QKV and MLP input in 0, the row-parallel output projections in 1); weight_k / weight_v wk and
  // wv, so that the three QKV weights stay quantized over the attention side's token chunks.
  enum Buffer { act = 0, act_t, other_t, weight0, weight1, weight_k, weight_v, kBuffers };

  Fp8Linear(Fp8Recipe recipe, const Fp8BlockDims& dims, int layers, Comm& tp, Comm& dp_cp, Arena& arena);
  int64_t attention_chunk() const { return attention_chunk_; }  // rows per attention-side chunk (<= N)

  Fp8Recipe recipe() const { return recipe_; }
  Comm* tp() { return tp_->size() > 1 ? tp_ : nullptr; }
  Comm* tokens() { return dp_cp_->size() > 1 ? dp_cp_ : nullptr; }  // the group the tokens are split over

  // x (R,K) -> q (R,K) into buffer q_buf and / or qt (K,R) into t_buf (-1: not wanted), with this recipe's scaling
  // (is_weight: 128x128 blocks under the block recipe), amaxes reduced over `split` as the header says.
  void quantize(const Tensor& x, Fp8Split split, bool is_weight, int q_buf, int t_buf, Fp8Operand* q, Fp8Operand* qt);
  // A view of workspace `buffer` as an (R,K) operand with this recipe's scaling (for quantize_into).
  Fp8Operand view_of(int buffer, bool is_weight, int64_t R, int64_t K) const {
    return view(buffer, fp8_scaling_for(recipe_, is_weight), R, K);
  }
  // The same into given operands (either may be undefined; both of one scaling): a kept copy (alloc_operand).
  void quantize_into(const Tensor& x, Fp8Split split, const Fp8Operand& q, const Fp8Operand& qt);
  // Chunked quantization of x (R,K) with the scaling groups of all of x (the header's attention side): the amaxes
  // that span x's rows (tensorwise: the one amax; rowwise: the per-column ones of x^T, when `transposed` is
  // wanted), reduced over `split` as quantize does, into slot 0..kWholeSlots-1 (held until that slot is taken
  // again). Then quantize_rows: rows [r0, r1) of x into q (r1-r0, K) and / or qt (K, r1-r0) with them.
  struct Whole {
    Tensor amax;  // tensorwise (1) / rowwise (K) f32, or undefined (block; rowwise without qt)
    Fp8Split split;
    bool transposed = false;
  };
  static constexpr int kWholeSlots = 4;
  Whole whole_amax(int slot, const Tensor& x, Fp8Split split, bool transposed);
  // whole_amax for a tensor a step quantizes twice (under checkpointing none the attention output att, in the forward
  // and again for wo's weight gradient): tensorwise, the amax is remembered per (layer, site) (remembered_amax);
  // other recipes take whole_amax's.
  Whole whole_amax_remembered(int slot, int layer, Fp8Site site, const Tensor& x, Fp8Split split, bool transposed,
                              bool refresh);
  // x's tensorwise amax (1), reduced over split, remembered per (layer, site): with refresh it is taken (the
  // forward's pass); without, the one taken this step from the same data (pointer and size) is reused, else taken.
  // The weights' (the forward quantizes W, the backward W^T) and att's: one amax pass each a step instead of two.
  Tensor remembered_amax(int layer, Fp8Site site, const Tensor& x, Fp8Split split, bool refresh);
  void quantize_rows(const Whole& w, const Tensor& x, int64_t r0, int64_t r1, const Fp8Operand& q,
                     const Fp8Operand& qt);
  // An (R,K) operand of its own (data and factors) from `arena`, scaled as this recipe scales an activation
  // (is_weight false) or a weight.
  Fp8Operand alloc_operand(Arena& arena, bool is_weight, int64_t R, int64_t K, const char* what) const;
  // A weight w (R,K) quantized into `buffer` as q (transposed = false) or its transpose, once per step and use:
  // the buffer keeps what it holds while (step, layer, which, transposed) stays the same.
  const Fp8Operand& weight(int buffer, const Tensor& w, Fp8Split split, bool transposed, int layer, Fp8Site which);
  // Marks a new step (the weights may have changed since the last one).
  void begin_step() {
    ++epoch_;
    given_for_ = nullptr;
  }

  // The tensorwise amax a producer took of its output (gemm_fp8_gelu, gemm_fp8_dgelu write it into amax_slot()):
  // after given_amax(x), the next tensorwise quantization of x (same data and size) uses it instead of reading x
  // for it (then reduces it over the sharing ranks as usual). Other recipes ignore it.
  Tensor amax_slot() const { return given_amax_; }  // (1) f32
  bool wants_given_amax() const { return recipe_ == Fp8Recipe::tensorwise; }
  void given_amax(const Tensor& x) {
    given_for_ = x.data;
    given_numel_ = x.numel();
  }

  // The guard's record: max |factor| of operand o (q or qt of one quantization) into this step's entry of
  // (layer, site, MLP chunk). end_step folds the step's entries into the running record.
  void record(int layer, Fp8Site site, int64_t chunk, const Fp8Operand& o);
  void end_step();
  // Reads the running record on the host (a device wait) and clears it; collective over `world`: an entry is bad
  // when it is on any rank. "" when every factor was finite, else the bad entries ("layer 3 mlp.fc.weight: FP8
  // factor inf (its amax overflowed)"), at most `limit` of them, and how many ranks saw them.
  std::string take_bad_factors(bool swiglu, Comm& world, int limit = 8);

 private:
  Fp8Operand view(int buffer, Fp8Scaling scaling, int64_t R, int64_t K) const;
  void reduce_max(Tensor v, Comm* comm);  // v (k) f32 <- max over comm's ranks
  // x's tensorwise amax (1), reduced over split: the given one (given_amax) or taken into scratch; returns which.
  Tensor tensor_amax(const Tensor& x, Fp8Split split, Tensor scratch);

  Fp8Recipe recipe_;
  Comm* tp_;
  Comm* dp_cp_;
  int layers_;
  int64_t chunks_ = 1;
  int64_t attention_chunk_ = 1;
  Tensor data_[kBuffers];   // (elements) e4m3, viewed (R,K) per use
  Tensor scale_[kBuffers];  // (factors) f32, viewed fp8_scale_shape per use
  Tensor amax_rows_, amax_cols_;  // (max dim) f32: per-row and per-column amaxes (tensorwise: element 0)
  Tensor given_amax_;             // (1) f32: a producer's amax of its output (given_amax)
  Tensor whole_[kWholeSlots];     // (max dim) f32 each: whole_amax's slots
  Tensor remembered_;             // (layers * sites) f32: remembered_amax's amaxes
  struct Remembered {
    int64_t epoch = -1;
    const void* data = nullptr;
    int64_t numel = 0;
  };
  std::vector<Remembered> remembered_meta_;  // (layers * sites): where and when each was taken
  const void* given_for_ = nullptr;
  int64_t given_numel_ = 0;
  Tensor gathered_;               // (max group size * max dim) f32: all-gathered amaxes
  // (3, layers * sites * chunks) f32: row 0 this step's max |factor| per entry, row 1 the running max since the
  // last take_bad_factors, row 2 scratch for the fold.
  Tensor health_;
  bool health_ready_ = false;
  struct Held {
    int64_t epoch = -1;
    int layer = -1;
    Fp8Site which = Fp8Site::count;
    bool transposed = false;
    Fp8Operand op;
  };
  Held held_[kBuffers];
  int64_t epoch_ = 0;
};

}  // namespace rt
