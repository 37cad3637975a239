// Pieces shared by framework/model*.cpp: the per-block activation buffers, the per-layer weight views,
// and host <-> device copies of raw arrays.
#pragma once
#include <algorithm>

#include "framework/model/fp8_linear.h"
#include "framework/model/model.h"
#include "framework/model/zero_fp8_gather.h"
#include "kernels/attention.h"
#include "kernels/host_copy.h"

namespace rt {

// What one block's forward keeps for its backward. Shapes: N = B*n tokens on this rank.
struct Model::BlockActs {
  Tensor rstd1;    // (N) f32     attention RMSNorm
  Tensor ln1;      // (N, C)      attention RMSNorm output
  Tensor q;        // (N, Hl*D)   after RoPE
  Tensor k, v;     // (N, Hkvl*D) k after RoPE
  Tensor att;      // (N, Hl*D)   attention output (before wo)
  Tensor lse;      // (B, Hl, n) f32
  Tensor x_mid;    // (N, C)      residual after attention
  Tensor rstd2;    // (N) f32     MLP RMSNorm
  Tensor ln2;      // (N, C)
  // MLP hidden: (N, Fl) per layer under no checkpointing; otherwise one shared (mlp_chunk, Fl) set that
  // holds one chunk of rows at a time (forward, and recomputed chunk by chunk in the backward).
  Tensor h;        // GELU: (N | chunk, Fl) fc output; SwiGLU: (N | chunk, 2Fl) the fused [w1; w3] output, per
                   // row the gate columns [0, Fl) then the up columns [Fl, 2Fl)
  Tensor g;        // (N | chunk, Fl)  activated hidden (input of proj / w2)
  // precision fp8 under checkpointing none (framework/model/fp8_linear.h): the weight gradients' operands kept as
  // transposed FP8 copies, made in the forward's quantization; ln1, ln2 and g are then one set shared by the layers.
  std::vector<Fp8Operand> ln1_t;  // per attention-side chunk (Fp8Linear::attention_chunk): (C, m) e4m3, factors
  std::vector<Fp8Operand> ln2_t;  // per MLP chunk: (C, m) e4m3 and its factors
  std::vector<Fp8Operand> g_t;    // per MLP chunk: (Fl, m) e4m3 and its factors
  bool fp8_keep = false;          // whether this layer keeps them
};

// The activation offload's copy stream and tickets (framework/model/model_offload.cpp).
struct Model::Offload {
  explicit Offload(Device d) : copier(d) {}
  AsyncHostCopier copier;
  std::vector<int> out_ticket, in_ticket;  // per offloaded layer: pending copy out / back (-1: none)
  int stage_holds[2] = {-1, -1};           // which layer's input a staging buffer holds
};

// One layer's weights (or gradients) as views of a flat buffer. Linear weights are (out, in) local shards.
struct Model::LayerWeights {
  Tensor attn_norm;      // (C)
  Tensor wq;             // (Hl*D, C)
  Tensor wk, wv;         // (Hkvl*D, C)
  Tensor wo;             // (C, Hl*D)
  Tensor mlp_norm;       // (C)
  Tensor fc_or_w13;      // GELU fc (Fl, C) | SwiGLU (2Fl, C): w1 (gate) rows then w3 (up) rows, one span of the
                         // flat buffer (the two parameters are adjacent: build_param_layout), one gemm
  Tensor proj_or_w2;     // (C, Fl)  GELU proj | SwiGLU w2 (down)
};

// Elements of a parameter's full (unsharded) tensor.
int64_t full_numel(const ParamEntry& e);
// A parameter's local (tp shard) elements [first, last) <-> their places in the full row-major tensor:
// piece (last - first) <- full, and full += piece.
void extract_piece(const ParamEntry& e, int64_t first, int64_t last, const float* full, float* piece);
void add_piece(const ParamEntry& e, int64_t first, int64_t last, const float* piece, float* full);

template <class Fn>
void Model::for_each_owned_piece(Fn&& fn) const {
  for (const ParamEntry& e : params_) {
    const OwnedRange r = owned(e.unit);
    const int64_t lo = std::max(e.offset, r.flat_begin), hi = std::min(e.offset + e.numel, r.flat_end);
    if (lo < hi) fn(e, r.local_begin + (lo - r.flat_begin), lo - e.offset, hi - e.offset);
  }
}

// Views of a packed (H*rows*(D+2)) f32 attention state: acc (1,H,rows,D) | m (1,H,rows) | l (1,H,rows)
// (model_decode.cpp; the decode step's and the prefill chunk's states, all-gathered over cp as one tensor).
AttnState packed_state_views(const Tensor& packed, int64_t H, int64_t rows, int64_t D);

// Copies nbytes of host memory into dst (any device) and back. dst/src give dtype and size.
void copy_host_to_tensor(Tensor dst, const void* host);
// A host f32 vector as a 1-D tensor (for copy_cast into or out of any dtype and device).
inline Tensor host_f32(std::vector<float>& v) {
  return Tensor(v.data(), DType::f32, Device::cpu(), {int64_t(v.size())});
}
void copy_tensor_to_host(void* host, const Tensor& src);

}  // namespace rt
