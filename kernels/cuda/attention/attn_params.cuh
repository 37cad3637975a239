// The kernel parameters of attn_fwd_block and attn_bwd_block, shared by the mma.sync kernels
// (attn_fwd_sm80.cu, attn_bwd_sm80.cu) and the Hopper kernels (attn_*_wgmma.cu, attn_*_ws.cu). Keep C++17.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_doc_mask.cuh"

namespace rt {
namespace cuda {

// Rows outside [q_begin, q_end) and keys outside [k_begin, k_end) take no part; with `causal`, key j is
// visible to query i iff j <= i + diag (diag = q_offset - k_offset of the AttnMask). With `docs.on` the
// document mask replaces causal (causal is false, kernels/cuda/attention/attn_doc_mask.cuh).
struct AttnFwdParams {
  const __nv_bfloat16* q;  // (B,Nq,H,D)
  const __nv_bfloat16* k;  // (B,Nk,Hkv,D)
  const __nv_bfloat16* v;  // (B,Nk,Hkv,D)
  float* acc;              // (B,H,Nq,D)
  float* m;                // (B,H,Nq)
  float* l;                // (B,H,Nq)
  int64_t Nq, Nk, H, Hkv, group;
  int64_t q_begin, q_end, k_begin, k_end;
  int64_t diag;
  bool causal;
  float scale2;     // log2(e) / sqrt(D)
  int num_q_tiles;  // query tiles of the launch (set by the mma.sync launcher for its tile size)
  DocMaskDev docs;  // the document mask and its tile summaries (off: no documents)
  // fwd v5 only, set by attn_fwd_whole: `fresh` = the state is not read (every row starts at m = -inf, l = 0,
  // acc = 0); `out` non-null = the rows are finalized into out (B,Nq,H,D) bf16 and lse (B,H,Nq) f32 as
  // attn_fwd_finalize would, and the state is not written.
  bool fresh = false;
  __nv_bfloat16* out = nullptr;
  float* lse = nullptr;
  // fwd v5 with documents only, set by attn_fwd_whole_two_kv: keys from two sources as one list. k2_row > 0: the
  // call's key rows [0, Nk) are k / v's (Nk = the first source's rows), rows [k2_row, k_end) are k2 / v2's rows
  // [0, k_end - k2_row) ((B, k_end - k2_row, Hkv, D)); k2_row is Nk rounded up to the 128-key tile, and the rows
  // between are read as zero and masked by their positions (docs.k_pos holds k_end rows of that list).
  int64_t k2_row = 0;
  const __nv_bfloat16* k2 = nullptr;  // (B, k_end - k2_row, Hkv, D)
  const __nv_bfloat16* v2 = nullptr;  // (B, k_end - k2_row, Hkv, D)
};

struct AttnBwdParams {
  const __nv_bfloat16* q;     // (B,Nq,H,D)
  const __nv_bfloat16* k;     // (B,Nk,Hkv,D)
  const __nv_bfloat16* v;     // (B,Nk,Hkv,D)
  const __nv_bfloat16* dout;  // (B,Nq,H,D)
  const float* lse;           // (B,H,Nq)
  const float* delta;         // (B,H,Nq)
  float* dq;                  // (B,Nq,H,D)
  float* dk;                  // (B,Nk,Hkv,D)
  float* dv;                  // (B,Nk,Hkv,D)
  int* dq_turn;               // (B,H,ceil((q_end-q_begin)/64)) deterministic mode: the key tile whose turn it
                              // is to add into each 64-row query tile's dQ; null: float atomics
  int64_t Nq, Nk, H, Hkv, group;
  int64_t q_begin, q_end, k_begin, k_end;
  int64_t diag;
  bool causal;
  float scale, scale2;  // 1/sqrt(D), log2(e)/sqrt(D)
  bool overwrite_dkv = false;  // store dK / dV rows [k_begin, k_end) instead of adding to them (bwd v5 only)
  DocMaskDev docs;             // the document mask and its tile summaries (off: no documents)
  // bwd v5 with documents and overwrite_dkv only, set by attn_bwd_fresh_two_kv: keys from two sources as one list
  // (as AttnFwdParams::k2_row). k2_row > 0: key rows [0, Nk) are k / v's with dK / dV in dk / dv, rows
  // [k2_row, k_end) are k2 / v2's rows [0, k_end - k2_row) with dK / dV in dk2 / dv2; the rows between are read as
  // zero, masked by their positions, and written nowhere.
  int64_t k2_row = 0;
  const __nv_bfloat16* k2 = nullptr;  // (B, k_end - k2_row, Hkv, D)
  const __nv_bfloat16* v2 = nullptr;  // (B, k_end - k2_row, Hkv, D)
  float* dk2 = nullptr;               // (B, k_end - k2_row, Hkv, D)
  float* dv2 = nullptr;               // (B, k_end - k2_row, Hkv, D)
};

// The source of the key tile at list row k0 of a backward call (one source unless p.k2_row > 0): its dK / dV, its
// tensor's rows, the end of the call's rows in it, and k0 as a row of it.
struct BwdKeySource {
  float* dk;      // (B, rows, Hkv, D)
  float* dv;      // (B, rows, Hkv, D)
  int64_t rows;   // the tensor's rows: Nk, or k_end - k2_row for the second source
  int64_t end;    // the call's rows end here: k_end (one source), Nk (the first of two), rows (the second)
  int64_t row;    // k0 in the source
};
__host__ __device__ inline BwdKeySource bwd_key_source(const AttnBwdParams& p, int64_t k0) {
  if (p.k2_row > 0 && k0 >= p.k2_row) {
    const int64_t n2 = p.k_end - p.k2_row;
    return {p.dk2, p.dv2, n2, n2, k0 - p.k2_row};
  }
  return {p.dk, p.dv, p.Nk, p.k2_row > 0 ? p.Nk : p.k_end, k0};
}

// The first row of the BR-row query tiles that a K/V-stationary backward CTA with keys from k0 visits:
// q_begin, or under the causal mask the tile that holds the first query seeing key k0. Tiles stay aligned to
// q_begin (the deterministic turn counters are indexed by (q0 - q_begin) / BR).
template <int BR>
__device__ __forceinline__ int64_t first_query_tile_row(const AttnBwdParams& p, int64_t k0) {
  if (p.causal && k0 - p.diag > p.q_begin) return p.q_begin + (k0 - p.diag - p.q_begin) / BR * BR;
  return p.q_begin;
}

}  // namespace cuda
}  // namespace rt
