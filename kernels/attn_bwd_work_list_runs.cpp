// attn_bwd_work_list_runs (kernels/attn_bwd_work_list_runs.h): the host's answer, or the CUDA kernel's checks.
#include "kernels/attn_bwd_work_list_runs.h"

namespace rt {

#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {
// kernels/cuda/attention/attn_bwd_work_list.cu.
bool attn_bwd_work_list_fits(int device, int64_t B, int64_t H, int64_t Hkv, int64_t D, int64_t Nq, int64_t Nk,
                             int64_t Nk2, int64_t list_rows);
}  // namespace cuda
#endif

bool attn_bwd_work_list_runs(const Device& device, DType dtype, int64_t B, int64_t H, int64_t Hkv, int64_t D,
                             int64_t Nq, int64_t Nk, int64_t Nk2, int64_t list_rows) {
  if (!device.is_cuda()) return true;
#ifdef RINGTRAIN_HAVE_CUDA
  return dtype == DType::bf16 && Hkv >= 1 && H % Hkv == 0 &&
         cuda::attn_bwd_work_list_fits(device.index, B, H, Hkv, D, Nq, Nk, Nk2, list_rows);
#else
  (void)dtype, (void)B, (void)H, (void)Hkv, (void)D, (void)Nq, (void)Nk, (void)Nk2, (void)list_rows;
  return false;
#endif
}

}  // namespace rt
