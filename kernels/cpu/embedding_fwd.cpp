// embedding_fwd on the host: out (N,C) = table (V,C) [tokens (N) i32].
#include <cstring>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) {
  const char* op = "embedding_fwd";
  require_cpu_f32(out, op, "out");
  require_cpu_i32(tokens, op, "tokens");
  require_cpu_f32(table, op, "table");
  RT_CHECK(table.ndim == 2, op << ": table has shape " << table.shape_str() << ", expected (V,C)");
  const int64_t V = table.shape[0], C = table.shape[1];
  RT_CHECK(tokens.ndim == 1, op << ": tokens has shape " << tokens.shape_str() << ", expected (N)");
  const int64_t N = tokens.shape[0];
  check_shape(out, {N, C}, op, "out (N,C)");
  const int32_t* tok = tokens.ptr<int32_t>();  // (N)
  const float* tab = table.ptr<float>();       // (V,C)
  float* po = out.ptr<float>();                // (N,C)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = tok[n];
    RT_CHECK(t >= 0 && t < V, op << ": token " << t << " at row " << n << " is outside the vocabulary [0," << V
                                 << "); check model.vocab_size against the data's tokenizer");
    std::memcpy(po + n * C, tab + t * C, sizeof(float) * size_t(C));
  }
}

}  // namespace cpu
}  // namespace rt
