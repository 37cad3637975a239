// bwd v5's tensor maps (host side), built the same way by both of its launchers: attn_bwd_block's
// (attn_bwd_sm90ws.cu) and attn_bwd_work_list's (attn_bwd_work_list.cu). Keep C++17.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {

// The eleven maps attn_bwd_ws_kernel takes, in its argument order.
struct BwdV5Maps {
  CUtensorMap q, dout;   // (B, Nq, H, D) bf16, boxes of R rows, cut at p.q_end
  CUtensorMap k, v;      // (B, Nk, Hkv, D) bf16, boxes of kBc rows, cut at the first source's end
  CUtensorMap dq;        // (B, Nq, H, D) f32, boxes of kBr rows
  CUtensorMap dk, dv;    // (B, Nk, Hkv, D) f32, boxes of kBr rows, cut as k / v
  CUtensorMap k2, v2;    // (B, n2, Hkv, D) bf16, the second key source (k / v's maps with one source)
  CUtensorMap dk2, dv2;  // (B, n2, Hkv, D) f32 (dk / dv's maps with one source)
};

// `two`: two key sources (p.k2_row > 0 in the document form): the first source's maps end at its own Nk rows, the
// second's (n2 = p.k_end - p.k2_row rows) hold the rest. With one, the maps end at p.k_end and the second source's
// repeat the first's.
template <int D, int R>
BwdV5Maps make_bwd_v5_maps(const AttnBwdParams& p, int64_t B, bool two) {
  const int64_t k1_end = two ? p.Nk : p.k_end, n2 = p.k_end - p.k2_row;
  BwdV5Maps m;
  m.q = make_rows_heads_tma_map(p.q, B, p.Nq, p.q_end, p.H, D, R);
  m.dout = make_rows_heads_tma_map(p.dout, B, p.Nq, p.q_end, p.H, D, R);
  m.k = make_rows_heads_tma_map(p.k, B, p.Nk, k1_end, p.Hkv, D, kBc);
  m.v = make_rows_heads_tma_map(p.v, B, p.Nk, k1_end, p.Hkv, D, kBc);
  m.dq = make_rows_heads_tma_map(p.dq, B, p.Nq, p.q_end, p.H, D, kBr, 4);
  m.dk = make_rows_heads_tma_map(p.dk, B, p.Nk, k1_end, p.Hkv, D, kBr, 4);
  m.dv = make_rows_heads_tma_map(p.dv, B, p.Nk, k1_end, p.Hkv, D, kBr, 4);
  m.k2 = two ? make_rows_heads_tma_map(p.k2, B, n2, n2, p.Hkv, D, kBc) : m.k;
  m.v2 = two ? make_rows_heads_tma_map(p.v2, B, n2, n2, p.Hkv, D, kBc) : m.v;
  m.dk2 = two ? make_rows_heads_tma_map(p.dk2, B, n2, n2, p.Hkv, D, kBr, 4) : m.dk;
  m.dv2 = two ? make_rows_heads_tma_map(p.dv2, B, n2, n2, p.Hkv, D, kBr, 4) : m.dv;
  return m;
}

}  // namespace cuda
}  // namespace rt
