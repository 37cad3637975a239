// append_kv_row (kernels/decode_append.h): the checks, the CPU copy, and the CUDA kernel's dispatch.
#include "kernels/decode_append.h"

#include <cstring>

namespace rt {

#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {
void append_kv_row(Tensor k_cache, Tensor v_cache, const Tensor& k_new, const Tensor& v_new, const Tensor& row);
}  // namespace cuda
#endif

void append_kv_row(Tensor k_cache, Tensor v_cache, const Tensor& k_new, const Tensor& v_new, const Tensor& row) {
  const char* op = "append_kv_row";
  RT_CHECK(k_cache.ndim == 2 && v_cache.ndim == 2 && k_cache.shape == v_cache.shape,
           op << ": the K and V caches must be (capacity, W) alike, got " << k_cache.shape_str() << " and "
              << v_cache.shape_str());
  const int64_t W = k_cache.size(1);
  RT_CHECK(k_new.numel() == W && v_new.numel() == W,
           op << ": the new K / V rows hold " << k_new.numel() << " / " << v_new.numel() << " elements, the cache rows "
              << W);
  RT_CHECK(k_cache.dtype == v_cache.dtype && k_new.dtype == k_cache.dtype && v_new.dtype == k_cache.dtype,
           op << ": the caches and the new rows must share one dtype");
  RT_CHECK(row.dtype == DType::i32 && row.numel() == 1, op << ": the row index must be one i32, got "
                                                             << row.shape_str());
  const Device d = k_cache.device;
  RT_CHECK(v_cache.device == d && k_new.device == d && v_new.device == d && row.device == d,
           op << ": every tensor must be on " << d.str());
  if (d.is_cpu()) {
    const int64_t r = *row.ptr<int32_t>();
    if (r < 0 || r >= k_cache.size(0)) return;
    const size_t bytes = k_new.nbytes();
    std::memcpy(static_cast<char*>(k_cache.data) + size_t(r) * bytes, k_new.data, bytes);
    std::memcpy(static_cast<char*>(v_cache.data) + size_t(r) * bytes, v_new.data, bytes);
    return;
  }
#ifdef RINGTRAIN_HAVE_CUDA
  cuda::append_kv_row(k_cache, v_cache, k_new, v_new, row);
#else
  RT_CHECK(false, op << ": this ringtrain was built without CUDA");
#endif
}

}  // namespace rt
