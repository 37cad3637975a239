// rmsnorm_linear_row and swiglu_linear_row (kernels/decode_linear.h): the fused CUDA kernel where it applies,
// otherwise the two ops.
#include "kernels/decode_linear.h"

#include "kernels/ops.h"

namespace rt {

#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {
bool rmsnorm_gemv(Tensor c, const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w);
bool swiglu_gemv(Tensor c, const Tensor& gate_up, const Tensor& w, float beta);
}  // namespace cuda
#endif

namespace {

void check_row_linear(const Tensor& c, const Tensor& in, int64_t in_cols, const Tensor& w, const char* op,
                      const char* in_name) {
  RT_CHECK(w.ndim == 2, op << ": the weight must be (N,K), got " << w.shape_str());
  RT_CHECK(in.numel() == in_cols * w.size(1) && c.numel() == w.size(0),
           op << ": " << in_name << " " << in.shape_str() << " and c " << c.shape_str() << " must be one row of "
              << in_cols * w.size(1) << " and " << w.size(0) << " elements for the weight " << w.shape_str());
  RT_CHECK(in.device == w.device && c.device == w.device, op << ": every tensor must be on " << w.device.str());
}

}  // namespace

void rmsnorm_linear_row(Tensor c, const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w, Tensor ln,
                        Tensor rstd) {
  check_row_linear(c, x, 1, w, "rmsnorm_linear_row", "x");
#ifdef RINGTRAIN_HAVE_CUDA
  if (w.device.is_cuda() && cuda::rmsnorm_gemv(c, x, norm_weight, eps, w)) return;
#endif
  rmsnorm_fwd(ln, rstd, x, norm_weight, eps);
  gemm(c, ln, w, false, true);
}

void swiglu_linear_row(Tensor c, const Tensor& gate_up, const Tensor& w, float beta, Tensor g) {
  check_row_linear(c, gate_up, 2, w, "swiglu_linear_row", "gate_up");
#ifdef RINGTRAIN_HAVE_CUDA
  if (w.device.is_cuda() && cuda::swiglu_gemv(c, gate_up, w, beta)) return;
#endif
  swiglu_fwd(g, gate_up);
  gemm(c, g, w, false, true, 1.f, beta);
}

}  // namespace rt
