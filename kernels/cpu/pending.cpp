// Placeholders for CPU ops not written yet: each names itself and refuses. Remove an entry when its
// kernels/cpu/<op>.cpp lands.
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace rt {
namespace cpu {
#define RT_PENDING(name) RT_CHECK(false, "CPU op " name " is not implemented yet")
}  // namespace cpu
}  // namespace rt
