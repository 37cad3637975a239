// Dispatch of every op on its tensors' device. One op per file lives in kernels/cpu/ and kernels/cuda/.
#include "kernels/ops.h"

#include <atomic>
#include <cstdlib>

#include "kernels/attention.h"
#ifdef RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/op_profile_scope.h"
#endif

namespace rt {
namespace cpu {
#include "kernels/backend_ops.h"
}
#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {
#include "kernels/backend_ops.h"
void copy_between_host_and_device(Tensor out, const Tensor& in);  // kernels/cuda/copy.cu
}  // namespace cuda
#endif

namespace {
[[noreturn, maybe_unused]] void no_cuda(const char* op) {
  RT_CHECK(false, op << ": CUDA tensor given, but this ringtrain was built without CUDA. Set device: cpu, or "
                        "rebuild with nvcc available (-DRINGTRAIN_CUDA=ON)");
}
}  // namespace

#ifdef RINGTRAIN_HAVE_CUDA
#define RT_DISPATCH(first, op, ...)                     \
  do {                                                  \
    if ((first).device.is_cuda()) {                     \
      const cuda::OpProfileScope rt_op_timer_(#op);     \
      return cuda::op(__VA_ARGS__);                     \
    }                                                   \
    return cpu::op(__VA_ARGS__);                        \
  } while (0)
#else
#define RT_DISPATCH(first, op, ...)                     \
  do {                                                  \
    if ((first).device.is_cuda()) no_cuda(#op);         \
    return cpu::op(__VA_ARGS__);                        \
  } while (0)
#endif

// The dispatch of every op marked auto in kernels/op_list.inc; RT_DEFINE_custom leaves the op to the code below.
#define RT_DEFINE_auto(ret, name, params, args, first) \
  ret name params { RT_DISPATCH(first, name, RT_UNPAREN args); }
#define RT_DEFINE_custom(ret, name, params, args, first)
#define RT_UNPAREN(...) __VA_ARGS__
#define RT_OP(ret, name, params, args, first, dispatch) RT_DEFINE_##dispatch(ret, name, params, args, first)
#define RT_ATTN_OP RT_OP
#include "kernels/op_list.inc"
#undef RT_DEFINE_auto
#undef RT_DEFINE_custom

void copy_cast(Tensor out, const Tensor& in) {
  RT_CHECK(out.numel() == in.numel(), "copy_cast: " << in.shape_str() << " into " << out.shape_str());
  if (out.device == in.device) RT_DISPATCH(out, copy_cast, out, in);
#ifdef RINGTRAIN_HAVE_CUDA
  return cuda::copy_between_host_and_device(out, in);
#else
  no_cuda("copy_cast");
#endif
}

namespace {
std::atomic<int> g_deterministic_attention{-1};  // -1: not set; read RT_ATTN_DETERMINISTIC
}  // namespace

void set_deterministic_attention(bool on) { g_deterministic_attention.store(on ? 1 : 0); }

bool deterministic_attention() {
  static const bool from_env = [] {
    const char* env = std::getenv("RT_ATTN_DETERMINISTIC");
    return env != nullptr && env[0] == '1';
  }();
  const int set = g_deterministic_attention.load();
  return set < 0 ? from_env : set == 1;
}

}  // namespace rt
