// embedding_bwd on the host: dtable (V,C) f32 accumulates dout (N,C) rows at tokens (N) i32.
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& tokens) {
  const char* op = "embedding_bwd";
  require_cpu_f32(dtable, op, "dtable");
  require_cpu_f32(dout, op, "dout");
  require_cpu_i32(tokens, op, "tokens");
  RT_CHECK(dtable.ndim == 2, op << ": dtable has shape " << dtable.shape_str() << ", expected (V,C)");
  const int64_t V = dtable.shape[0], C = dtable.shape[1];
  RT_CHECK(tokens.ndim == 1, op << ": tokens has shape " << tokens.shape_str() << ", expected (N)");
  const int64_t N = tokens.shape[0];
  check_shape(dout, {N, C}, op, "dout (N,C)");
  const int32_t* tok = tokens.ptr<int32_t>();  // (N)
  const float* pg = dout.ptr<float>();         // (N,C)
  float* pd = dtable.ptr<float>();             // (V,C)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = tok[n];
    RT_CHECK(t >= 0 && t < V, op << ": token " << t << " at row " << n << " is outside the vocabulary [0," << V
                                 << "); check model.vocab_size against the data's tokenizer");
    float* row = pd + t * C;
    const float* g = pg + n * C;
    for (int64_t c = 0; c < C; ++c) row[c] += g[c];
  }
}

}  // namespace cpu
}  // namespace rt
