// The shape of one rank's attention call as the cp layer runs it: this rank's tokens and its local heads. The
// schedulers (parallel/schedule/) size plans and buffers from it; the exchange (parallel/cp/) runs on it.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

struct RingAttentionShape {
  int64_t batch = 1;        // B
  int64_t local_tokens = 0; // n = seq_len / cp
  int64_t heads = 0;        // H local (after tp split)
  int64_t kv_heads = 0;     // Hkv local
  int64_t head_dim = 0;     // D
  DType dtype = DType::f32; // of q, k, v, out (bf16 on CUDA)
  bool forward_only = false; // no backward will run (eval, generate): its buffers are not allocated
};

}  // namespace rt
