// copy_between_host_and_device: copy_cast across devices (host <-> GPU, or GPU <-> GPU of the same
// dtype). When it returns, the host side is free to reuse and, for downloads, the data has landed (a host
// wait, rt::cuda::host_wait). Uploads from pageable host memory (std::vector: the batch, the weights at
// start-up) do not wait: the driver has copied the source into its staging memory before
// cudaMemcpyAsync returns, and the copy is ordered on the stream before any later kernel. Uploads from
// pinned memory (MpiComm staging) wait, since the DMA still reads the caller's buffer. When the dtypes
// differ the cast runs on the host side, through a temporary host buffer (set-up and tests).
#include <cstring>
#include <vector>

#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

// Host-side elementwise cast between float dtypes (f32, bf16); same-dtype is a memcpy.
void host_cast(void* out, DType out_dtype, const void* in, DType in_dtype, int64_t n) {
  if (out_dtype == in_dtype) {
    std::memcpy(out, in, size_t(n) * dtype_size(in_dtype));
    return;
  }
  if (in_dtype == DType::f32 && out_dtype == DType::bf16) {
    const float* s = static_cast<const float*>(in);  // (n)
    uint16_t* d = static_cast<uint16_t*>(out);       // (n)
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
    return;
  }
  if (in_dtype == DType::bf16 && out_dtype == DType::f32) {
    const uint16_t* s = static_cast<const uint16_t*>(in);  // (n)
    float* d = static_cast<float*>(out);                   // (n)
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
    return;
  }
  RT_CHECK(false, "copy_cast: cannot convert " << dtype_name(in_dtype) << " to " << dtype_name(out_dtype)
                                               << "; only f32 <-> bf16 and same-dtype copies are supported");
}

// Pinned (page-locked or registered) host memory: cudaMemcpyAsync from it returns before the DMA read it.
bool is_pinned_host(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // older runtimes report plain host pointers as an error: pageable
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

}  // namespace

void copy_between_host_and_device(Tensor out, const Tensor& in) {
  const char* op = "copy_cast";
  RT_CHECK(out.numel() == in.numel(), op << ": " << in.shape_str() << " into " << out.shape_str());
  const int64_t n = in.numel();
  if (n == 0) return;
  require_defined(out, op, "out");
  require_defined(in, op, "in");
  const Tensor& gpu = out.device.is_cuda() ? out : in;
  cudaStream_t stream = stream_for(gpu, op);

  if (out.device.is_cuda() && in.device.is_cuda()) {
    RT_CHECK(out.dtype == in.dtype, op << ": " << in.device.str() << " -> " << out.device.str()
                                       << " with a dtype change; cast on one device first");
    CUDA_CHECK(cudaMemcpyPeerAsync(out.data, out.device.index, in.data, in.device.index, in.nbytes(), stream));
    host_wait(stream, "copy_cast between two GPUs");
    return;
  }
  if (out.dtype == in.dtype) {
    CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, in.nbytes(), cudaMemcpyDefault, stream));
    if (out.device.is_cpu()) host_wait(stream, "copy_cast download (device to host)");
    else if (is_pinned_host(in.data)) host_wait(stream, "copy_cast upload from pinned host memory");
    return;
  }
  if (in.device.is_cpu()) {  // cast on the host, then upload
    std::vector<unsigned char> staged(out.nbytes());  // (n) in out's dtype
    host_cast(staged.data(), out.dtype, in.data, in.dtype, n);
    // `staged` is pageable: the driver has taken the bytes when cudaMemcpyAsync returns.
    CUDA_CHECK(cudaMemcpyAsync(out.data, staged.data(), staged.size(), cudaMemcpyHostToDevice, stream));
  } else {  // download, then cast on the host
    std::vector<unsigned char> staged(in.nbytes());  // (n) in in's dtype
    CUDA_CHECK(cudaMemcpyAsync(staged.data(), in.data, staged.size(), cudaMemcpyDeviceToHost, stream));
    host_wait(stream, "copy_cast download with a cast");
    host_cast(out.data, out.dtype, staged.data(), in.dtype, n);
  }
}

}  // namespace cuda
}  // namespace rt
