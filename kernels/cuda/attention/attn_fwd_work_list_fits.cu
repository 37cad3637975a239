// attn_fwd_work_list_fits (attn_fwd_work_list_fits.h): the device and shape rules of fwd v5's list mode, in one
// place: attn_fwd_work_list_runs (kernels/attn_fwd_work_list_runs.h) asks them as a query and attn_fwd_work_list
// (attn_fwd_work_list.cu) checks them before its launch, with the reason. The dtype, bf16, is the caller's check; the
// list's own checks (its words, tasks, split scratch, alignment) and the exact grid of its task count stay with the
// launcher.
#include "kernels/cuda/attention/attn_fwd_work_list_fits.h"

#include <climits>
#include <cstdint>
#include <sstream>
#include <string>

#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list.cuh"

namespace rt {
namespace cuda {

bool attn_fwd_work_list_fits(int device, int64_t B, int64_t H, int64_t D, int64_t Nq, int64_t Nk, int64_t Nk2,
                             int64_t list_rows, std::string* why) {
  using wgfwd::kWgKeysPerTile;
  using wgfwd::kWgRowsPerCta;
  // The first rule the call breaks: where why is asked for, the reason with the call's numbers; false either way.
  auto refuse = [why](const std::ostringstream& reason) {
    if (why != nullptr) *why = reason.str();
    return false;
  };
  const std::string instead = "; ask attn_fwd_work_list_runs (kernels/attn_fwd_work_list_runs.h) first and run "
                              "attn_fwd_whole_two_kv where it says no";
  if (!attn_fwd_ws_supported(device, D)) {  // sm_90a, D 64 or 128
    std::ostringstream s;
    s << "the CUDA work-list kernel is fwd v5's (compute capability 9.0 with an sm_90a build, D 64 or 128; D = " << D
      << "); this device cannot run it: use attn_fwd_whole_two_kv, or the CPU op";
    return refuse(s);
  }
  if (!(Nq >= kWgRowsPerCta && Nk >= kWgKeysPerTile && (Nk2 == 0 || Nk2 >= kWgKeysPerTile))) {  // TMA boxes
    std::ostringstream s;
    s << "the CUDA kernel needs at least " << kWgRowsPerCta << " query rows and " << kWgKeysPerTile
      << " rows in each key source (Nq = " << Nq << ", Nk = " << Nk << ", Nk2 = " << Nk2
      << "); run attn_fwd_whole_two_kv for such small calls";
    return refuse(s);
  }
  const int64_t key_rows = Nk2 > 0 ? list_rows : Nk;  // one source: k's rows only (a 0-row k2 adds none)
  if ((key_rows + kWgKeysPerTile - 1) / kWgKeysPerTile > kWorkListTilesMax) {
    std::ostringstream s;
    s << "the key list's " << key_rows << " rows exceed the kernel's " << kWorkListTilesMax
      << " tiles of 128 (kWorkListTilesMax, attn_fwd_work_list.cuh)" << instead;
    return refuse(s);
  }
  if (Nq > INT_MAX || key_rows > INT_MAX) {
    std::ostringstream s;
    s << "TMA coordinates are 32-bit; Nq = " << Nq << ", key rows = " << key_rows << instead;
    return refuse(s);
  }
  const int64_t slots = B * ((Nq + kWgRowsPerCta - 1) / kWgRowsPerCta);  // (sample, query tile): the most tasks
  if ((H + 1) * slots > INT_MAX) {  // H x T unit CTAs and the fill CTAs in one grid
    std::ostringstream s;
    s << "H x (B x query tiles) = " << H << " x " << slots << " units and their fill CTAs do not fit one grid "
      << "(2^31 - 1 CTAs)" << instead;
    return refuse(s);
  }
  return true;
}

bool attn_fwd_work_list_fits(int device, int64_t B, int64_t H, int64_t D, int64_t Nq, int64_t Nk, int64_t Nk2,
                             int64_t list_rows) {
  return attn_fwd_work_list_fits(device, B, H, D, Nq, Nk, Nk2, list_rows, nullptr);
}

}  // namespace cuda
}  // namespace rt
