// Helpers for the GPU tests: device buffers, seeded random inputs, host <-> device transfer through
// rt::copy_cast, poisoning, relative errors, and calling the CPU reference op (skipping the test when the
// CPU op is still a placeholder).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"

namespace rt::test {

#define RT_REQUIRE_CUDA()                                         \
  do {                                                            \
    if (!::rt::cuda_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// Owns one allocation on a device and hands out a Tensor view of it.
class Buffer {
 public:
  Buffer(Device device, DType dtype, std::initializer_list<int64_t> dims) : device_(device) {
    Tensor probe(nullptr, dtype, device, dims);
    bytes_ = probe.nbytes();
    data_ = device_alloc(device, bytes_ ? bytes_ : 16);
    tensor_ = Tensor(data_, dtype, device, dims);
  }
  ~Buffer() { device_free(device_, data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  const Tensor& t() const { return tensor_; }
  operator Tensor() const { return tensor_; }

 private:
  Device device_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Tensor tensor_;
};

inline Device gpu() { return Device::cuda(0); }

// Fresh normal(0, stddev) values from `seed`.
inline std::vector<float> random_vector(int64_t n, uint64_t seed, float stddev = 1.f, float mean = 0.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Rounds every value to bf16 so host references see exactly what the GPU sees.
inline std::vector<float> bf16_rounded(std::vector<float> v) {
  for (auto& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

// Host f32 view of a vector (no copy).
inline Tensor host_view(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::f32, Device::cpu(), dims);
}
inline Tensor host_view_i32(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::i32, Device::cpu(), dims);
}

// Host values (f32) into a device tensor of any float dtype.
inline void upload(const Tensor& dst, std::vector<float> values) {
  EXPECT_EQ(int64_t(values.size()), dst.numel());
  Tensor src(values.data(), DType::f32, Device::cpu(), {int64_t(values.size())});
  copy_cast(dst, src);
}
inline void upload_i32(const Tensor& dst, std::vector<int32_t> values) {
  Tensor src(values.data(), DType::i32, Device::cpu(), {int64_t(values.size())});
  copy_cast(dst, src);
}

// Device tensor (f32 or bf16) back to host f32 values.
inline std::vector<float> download(const Tensor& src) {
  std::vector<float> out(static_cast<size_t>(src.numel()));
  Tensor dst(out.data(), DType::f32, Device::cpu(), {src.numel()});
  copy_cast(dst, src);
  return out;
}

inline void poison(const Tensor& t) { fill(t, std::nanf("")); }

// ||out - ref|| / ||ref||; infinity if any NaN in out (or a size mismatch).
inline double rel_error(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return INFINITY;
    const double d = double(out[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Index and values of the largest mismatch, for failure messages.
inline std::string worst_mismatch(const std::vector<float>& out, const std::vector<float>& ref) {
  size_t worst = 0;
  double wd = -1;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    const double d = std::isnan(out[i]) ? INFINITY : std::fabs(double(out[i]) - double(ref[i]));
    if (d > wd) { wd = d; worst = i; }
  }
  if (out.empty() || ref.empty()) return "empty";
  return "worst at [" + std::to_string(worst) + "]: got " + std::to_string(out[worst]) + ", want " +
         std::to_string(ref[worst]);
}

#define EXPECT_CLOSE(out, ref, tol)                                                   \
  do {                                                                               \
    const double rt_err_ = ::rt::test::rel_error(out, ref);                         \
    EXPECT_LE(rt_err_, tol) << #out " vs " #ref ": " << ::rt::test::worst_mismatch(out, ref); \
  } while (0)

// Runs a CPU reference op; skips the test when the CPU op is still a placeholder.
#define RT_CPU_REFERENCE(...)                                                                          \
  do {                                                                                                 \
    try {                                                                                              \
      __VA_ARGS__;                                                                                     \
    } catch (const ::rt::Error& e) {                                                                   \
      if (std::string(e.what()).find("not implemented") != std::string::npos)                         \
        GTEST_SKIP() << "CPU reference not implemented yet: " << e.what();                             \
      throw;                                                                                           \
    }                                                                                                  \
  } while (0)

}  // namespace rt::test
