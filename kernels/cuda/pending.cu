// Placeholders for CUDA ops not written yet: each names itself and refuses. Remove an entry when its
// kernels/cuda/<op>.cu lands.
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace rt {
namespace cuda {
#define RT_PENDING(name) RT_CHECK(false, "CUDA op " name " is not implemented yet; use device: cpu")
}  // namespace cuda
}  // namespace rt
