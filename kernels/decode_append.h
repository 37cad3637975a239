// The decode step's K / V append at a cache row read from device memory, so that one captured launch (a CUDA
// graph of the decode step, kernels/step_graph.h) writes a different row at every replay.
//   k_cache, v_cache (capacity, W) and k_new, v_new (1, W), all of one dtype (f32 or bf16) on one device;
//   row (1) i32 on that device: cache row row[0] = the new row, K and V; nothing when row[0] < 0 or >= capacity
//   (a rank that does not hold the step's row).
#pragma once
#include "kernels/tensor.h"

namespace rt {

void append_kv_row(Tensor k_cache, Tensor v_cache, const Tensor& k_new, const Tensor& v_new, const Tensor& row);

}  // namespace rt
