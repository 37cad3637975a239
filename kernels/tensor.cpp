#include "kernels/tensor.h"

#include <cstring>

namespace rt {

void fail_at(const char* file, int line, const std::string& message) {
  // Internal location is appended for developers; the message itself must be enough for users.
  std::ostringstream os;
  os << message << " [" << file << ":" << line << "]";
  throw Error(os.str());
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::e4m3: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::e4m3: return "e4m3";
  }
  return "?";
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Tensor::Tensor(void* data_, DType dtype_, Device device_, std::initializer_list<int64_t> dims)
    : data(data_), dtype(dtype_), device(device_) {
  RT_CHECK(dims.size() <= size_t(kMaxDims), "tensor rank " << dims.size() << " exceeds " << kMaxDims);
  for (int64_t d : dims) {
    RT_CHECK(d >= 0, "negative tensor dimension " << d);
    shape[ndim++] = d;
  }
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += ndim;
  RT_CHECK(dim >= 0 && dim < ndim, "dimension " << dim << " out of range for shape " << shape_str());
  return shape[dim];
}

std::string Tensor::shape_str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, device, dims);
  RT_CHECK(t.numel() == numel(), "cannot view " << shape_str() << " as " << t.shape_str());
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  RT_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0],
           "slice [" << begin << "," << end << ") out of range for shape " << shape_str());
  Tensor t = *this;
  const int64_t row = numel() / (shape[0] ? shape[0] : 1);
  t.data = static_cast<char*>(data) + size_t(begin * row) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* op, const char* arg) {
  bool ok = t.ndim == int(dims.size());
  int i = 0;
  for (int64_t d : dims) {  // -1 = any; i advances for every dimension, wildcard or not
    ok = ok && (d < 0 || t.shape[i] == d);
    ++i;
  }
  if (!ok) {
    std::string want = "(";
    i = 0;
    for (int64_t d : dims) {
      if (i++) want += ',';
      want += d < 0 ? std::string("*") : std::to_string(d);
    }
    RT_CHECK(false, op << ": " << arg << " has shape " << t.shape_str() << ", expected " << want << ")");
  }
}

void check_dtype(const Tensor& t, DType dtype, const char* op, const char* arg) {
  RT_CHECK(t.dtype == dtype,
           op << ": " << arg << " has dtype " << dtype_name(t.dtype) << ", expected " << dtype_name(dtype));
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  RT_CHECK(a.device == b.device,
           op << ": tensors on different devices (" << a.device.str() << " and " << b.device.str() << ")");
}

uint16_t float_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float bf16_to_float(uint16_t x) {
  uint32_t u = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace rt
