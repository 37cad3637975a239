// attn_fwd_work_list_runs (kernels/attn_fwd_work_list_runs.h) on CUDA: the device and shape checks that
// attn_fwd_work_list (attn_fwd_work_list.cu) makes before its launch, as a query, from the same constants (the dtype,
// bf16, is the caller's check). A call it says yes to passes those checks; one it says no to is refused there.
#include <climits>
#include <cstdint>

#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list.cuh"

namespace rt {
namespace cuda {

bool attn_fwd_work_list_fits(int device, int64_t B, int64_t H, int64_t D, int64_t Nq, int64_t Nk, int64_t Nk2,
                             int64_t list_rows) {
  using wgfwd::kWgKeysPerTile;
  using wgfwd::kWgRowsPerCta;
  const int64_t key_rows = Nk2 > 0 ? list_rows : Nk;  // one source: k's rows only
  const int64_t slots = B * ((Nq + kWgRowsPerCta - 1) / kWgRowsPerCta);  // (sample, query tile): the most tasks
  return Nq >= kWgRowsPerCta && Nk >= kWgKeysPerTile && (Nk2 == 0 || Nk2 >= kWgKeysPerTile) &&  // TMA boxes
         (key_rows + kWgKeysPerTile - 1) / kWgKeysPerTile <= kWorkListTilesMax && Nq <= INT_MAX &&
         key_rows <= INT_MAX && (H + 1) * slots <= INT_MAX &&  // H x T unit CTAs and the fill CTAs in one grid
         attn_fwd_ws_supported(device, D);                    // sm_90a, D 64 or 128
}

}  // namespace cuda
}  // namespace rt
