// Placeholders for CPU ops not written yet: each names itself and refuses. Remove an entry when its
// kernels/cpu/<op>.cpp lands.
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace rt {
namespace cpu {
#define RT_PENDING(name) RT_CHECK(false, "CPU op " name " is not implemented yet")
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
}  // namespace cpu
}  // namespace rt
