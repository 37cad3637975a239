// Overrides of the attention kernel choice (kernels/cuda/attention/attn_fwd_dispatch.cu, attn_bwd_dispatch.cu). C++17.
//
// Read once per process, at the first attention call (or the first attn_variant_override()), from:
//   RT_ATTN_FWD_VARIANT  forward:  2, 3 (mma.sync v2, v3), 4, 5 (wgmma v4, warp-specialized v5; sm_90a)
//   RT_ATTN_BWD_VARIANT  backward: 1 (mma.sync v1), 4, 5 (wgmma v4, warp-specialized v5; sm_90a)
//   RT_ATTN_FWD_ROWS     fwd v5's query rows per CTA without documents: 64 or 128 (any head dim), 192 (D = 64, where
//                        the call has at least 192 query rows)
//   RT_ATTN_FWD_DOC_L2_KB  fwd v5 with documents: the L2 budget (KiB) of the K/V of one window of its grid's order
//                        (attn_fwd_sm90ws.cu fwd_doc_head_window); 0: head by head. Default 16384 (16 MiB).
// Unset or empty: the default choice (DESIGN.md "Kernels"). "v5" is accepted for "5". A value that names no built
// variant is an error listing the valid names. A wgmma variant on a device or build that cannot run it falls back
// to the mma.sync default, and v5 to v4 for blocks too small for its TMA boxes, so the same override works on
// every machine. Tests switch variants with set_attn_variant_override() (or ScopedAttnVariant in
// tests/gpu/attention_test_util.h), never through the environment.
#pragma once
#include <string>

namespace rt {
namespace cuda {

struct AttnVariantOverride {
  int fwd = 0;  // 0: the default choice; else one of attn_fwd_variant_names()
  int bwd = 0;  // 0: the default choice; else one of attn_bwd_variant_names()
  int fwd_rows = 0;  // 0: the default choice (attn_fwd_sm90ws.cu fwd_ws_rows_for); else 64, 128 or 192
  // bwd v5 with documents: a list of at most half the SMs split into pieces of each item's iterations (true, the
  // default), or every item whole (false: dK / dV added in bwd v4's order, bit for bit; tests only).
  bool bwd_doc_pieces = true;
  // fwd v5 with documents: KiB of K/V per window of (batch, head) pairs in the grid's order; 0: one pair per window.
  int fwd_doc_l2_kb = 16384;
};

// The current overrides (the environment's, until set_attn_variant_override() replaces them).
AttnVariantOverride attn_variant_override();
// Replaces the overrides for the whole process. Throws, naming the valid variants, if one names no built variant.
void set_attn_variant_override(const AttnVariantOverride& o);

// "2, 3, 4, 5" and "1, 4, 5": the variants built into this binary.
std::string attn_fwd_variant_names();
std::string attn_bwd_variant_names();

}  // namespace cuda
}  // namespace rt
