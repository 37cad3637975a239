// append_kv_row on CUDA (kernels/decode_append.h): one launch copies the new K and V rows into cache row row[0],
// read on the device, in 16-byte words (a row of Hkv*D bf16 is a multiple of 8 elements for D 64 / 128; other
// widths fall back to 4-byte words).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace {

template <class Word>
__global__ void append_kv_row_kernel(Word* k_cache, Word* v_cache, const Word* k_new, const Word* v_new,
                                     const int32_t* row, int64_t capacity, int64_t words) {
  const int64_t r = row[0];
  if (r < 0 || r >= capacity) return;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < 2 * words; i += stride) {
    if (i < words) k_cache[r * words + i] = k_new[i];
    else v_cache[r * words + (i - words)] = v_new[i - words];
  }
}

template <class Word>
void launch(Tensor k_cache, Tensor v_cache, const Tensor& k_new, const Tensor& v_new, const Tensor& row,
            cudaStream_t stream) {
  const int64_t words = int64_t(k_new.nbytes() / sizeof(Word));
  const int threads = 128;
  const int blocks = int(std::min<int64_t>((2 * words + threads - 1) / threads, 64));
  append_kv_row_kernel<Word><<<blocks, threads, 0, stream>>>(
      k_cache.ptr<Word>(), v_cache.ptr<Word>(), k_new.ptr<const Word>(), v_new.ptr<const Word>(),
      row.ptr<const int32_t>(), k_cache.size(0), words);
  CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void append_kv_row(Tensor k_cache, Tensor v_cache, const Tensor& k_new, const Tensor& v_new, const Tensor& row) {
  const cudaStream_t stream = stream_for(k_cache, "append_kv_row");
  const size_t bytes = k_new.nbytes();
  if (bytes % 16 == 0 && aligned16(k_cache.data) && aligned16(v_cache.data) && aligned16(k_new.data) &&
      aligned16(v_new.data))
    launch<uint4>(k_cache, v_cache, k_new, v_new, row, stream);
  else if (bytes % 4 == 0)
    launch<uint32_t>(k_cache, v_cache, k_new, v_new, row, stream);
  else
    launch<uint16_t>(k_cache, v_cache, k_new, v_new, row, stream);
}

}  // namespace cuda
}  // namespace rt
