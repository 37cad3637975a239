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

void gemm(Tensor c, const Tensor& a, const Tensor& b, bool ta, bool tb, float alpha, float beta) {
  RT_DISPATCH(c, gemm, c, a, b, ta, tb, alpha, beta);
}
void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) {
  RT_DISPATCH(x, rmsnorm_fwd, out, rstd, x, w, eps);
}
void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  RT_DISPATCH(x, rmsnorm_bwd, dx, dw, dout, x, w, rstd);
}
void rope(Tensor x, const Tensor& positions, const RopeFreqs& freqs, bool inverse) {
  RT_DISPATCH(x, rope, x, positions, freqs, inverse);
}
void gelu_fwd(Tensor out, const Tensor& x) { RT_DISPATCH(x, gelu_fwd, out, x); }
void gelu_bwd(Tensor dx, const Tensor& dout, const Tensor& x) { RT_DISPATCH(x, gelu_bwd, dx, dout, x); }
void swiglu_fwd(Tensor out, const Tensor& gate, const Tensor& up) { RT_DISPATCH(gate, swiglu_fwd, out, gate, up); }
void swiglu_bwd(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  RT_DISPATCH(gate, swiglu_bwd, dgate, dup, dout, gate, up);
}
void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) {
  RT_DISPATCH(table, embedding_fwd, out, tokens, table);
}
void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& tokens) {
  RT_DISPATCH(dtable, embedding_bwd, dtable, dout, tokens);
}
void cross_entropy(Tensor logits, const Tensor& targets, Tensor losses, float grad_scale, bool want_grad) {
  RT_DISPATCH(logits, cross_entropy, logits, targets, losses, grad_scale, want_grad);
}
void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWArgs& args, Tensor p_lowp,
           const Tensor& grad_scale) {
  RT_DISPATCH(p, adamw, p, g, m, v, args, p_lowp, grad_scale);
}
void grad_clip_scale(const Tensor& sumsq, Tensor scale, float max_norm) {
  RT_DISPATCH(sumsq, grad_clip_scale, sumsq, scale, max_norm);
}
void add_inplace(Tensor y, const Tensor& x) { RT_DISPATCH(y, add_inplace, y, x); }
void scale_inplace(Tensor y, float s) { RT_DISPATCH(y, scale_inplace, y, s); }
void fill(Tensor y, float value) { RT_DISPATCH(y, fill, y, value); }
void copy_cast(Tensor out, const Tensor& in) {
  RT_CHECK(out.numel() == in.numel(), "copy_cast: " << in.shape_str() << " into " << out.shape_str());
  if (out.device == in.device) RT_DISPATCH(out, copy_cast, out, in);
#ifdef RINGTRAIN_HAVE_CUDA
  return cuda::copy_between_host_and_device(out, in);
#else
  no_cuda("copy_cast");
#endif
}
double sum_squares(const Tensor& x) { RT_DISPATCH(x, sum_squares, x); }
void sum_squares_accumulate(const Tensor& x, Tensor acc) { RT_DISPATCH(x, sum_squares_accumulate, x, acc); }

void attn_state_reset(AttnState& s) { RT_DISPATCH(s.acc, attn_state_reset, s); }
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& s, const AttnMask& mask) {
  RT_DISPATCH(q, attn_fwd_block, q, k, v, s, mask);
}
void attn_fwd_finalize(const AttnState& s, Tensor out, Tensor lse) { RT_DISPATCH(out, attn_fwd_finalize, s, out, lse); }
void attn_fwd_whole(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& scratch, const AttnMask& mask,
                    Tensor out, Tensor lse) {
  RT_DISPATCH(q, attn_fwd_whole, q, k, v, scratch, mask, out, lse);
}
void attn_bwd_delta(const Tensor& out, const Tensor& dout, Tensor delta) {
  RT_DISPATCH(out, attn_bwd_delta, out, dout, delta);
}
void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq, Tensor dk, Tensor dv, const AttnMask& mask) {
  RT_DISPATCH(q, attn_bwd_block, q, k, v, dout, lse, delta, dq, dk, dv, mask);
}
void attn_bwd_block_fresh(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                          const Tensor& delta, Tensor dq, Tensor dk, Tensor dv, const AttnMask& mask) {
  RT_DISPATCH(q, attn_bwd_block_fresh, q, k, v, dout, lse, delta, dq, dk, dv, mask);
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
