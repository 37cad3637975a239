// Placeholders for CUDA ops not written yet: each names itself and refuses. Remove an entry when its
// kernels/cuda/<op>.cu lands.
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace rt {
namespace cuda {
#define RT_PENDING(name) RT_CHECK(false, "CUDA op " name " is not implemented yet; use device: cpu")
void gemm(Tensor, const Tensor&, const Tensor&, bool, bool, float, float) { RT_PENDING("gemm"); }
void rmsnorm_fwd(Tensor, Tensor, const Tensor&, const Tensor&, float) { RT_PENDING("rmsnorm_fwd"); }
void rmsnorm_bwd(Tensor, Tensor, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { RT_PENDING("rmsnorm_bwd"); }
void rope(Tensor, const Tensor&, float, bool) { RT_PENDING("rope"); }
void gelu_fwd(Tensor, const Tensor&) { RT_PENDING("gelu_fwd"); }
void gelu_bwd(Tensor, const Tensor&, const Tensor&) { RT_PENDING("gelu_bwd"); }
void swiglu_fwd(Tensor, const Tensor&, const Tensor&) { RT_PENDING("swiglu_fwd"); }
void swiglu_bwd(Tensor, Tensor, const Tensor&, const Tensor&, const Tensor&) { RT_PENDING("swiglu_bwd"); }
void embedding_fwd(Tensor, const Tensor&, const Tensor&) { RT_PENDING("embedding_fwd"); }
void embedding_bwd(Tensor, const Tensor&, const Tensor&) { RT_PENDING("embedding_bwd"); }
void cross_entropy(Tensor, const Tensor&, Tensor, float, bool) { RT_PENDING("cross_entropy"); }
void adamw(Tensor, const Tensor&, Tensor, Tensor, const AdamWArgs&, Tensor) { RT_PENDING("adamw"); }
void add_inplace(Tensor, const Tensor&) { RT_PENDING("add_inplace"); }
void scale_inplace(Tensor, float) { RT_PENDING("scale_inplace"); }
void fill(Tensor, float) { RT_PENDING("fill"); }
void copy_cast(Tensor, const Tensor&) { RT_PENDING("copy_cast"); }
void copy_between_host_and_device(Tensor, const Tensor&) { RT_PENDING("copy_between_host_and_device"); }
double sum_squares(const Tensor&) { RT_PENDING("sum_squares"); }
void attn_state_reset(AttnState&) { RT_PENDING("attn_state_reset"); }
void attn_fwd_block(const Tensor&, const Tensor&, const Tensor&, AttnState&, const AttnMask&) { RT_PENDING("attn_fwd_block"); }
void attn_fwd_finalize(const AttnState&, Tensor, Tensor) { RT_PENDING("attn_fwd_finalize"); }
void attn_bwd_delta(const Tensor&, const Tensor&, Tensor) { RT_PENDING("attn_bwd_delta"); }
void attn_bwd_block(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor,
                    Tensor, Tensor, const AttnMask&) { RT_PENDING("attn_bwd_block"); }
}  // namespace cuda
}  // namespace rt
