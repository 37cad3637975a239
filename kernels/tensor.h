// Tensor, DType, Device and the error checks shared by every layer (DESIGN.md "Core types").
// A Tensor is a non-owning view {data, dtype, shape, device}; storage comes from an Arena.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>

namespace rt {

// Every user-facing failure is an rt::Error whose message says what is wrong and how to fix it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail_at(const char* file, int line, const std::string& message);

#define RT_CHECK(cond, msg)                                              \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::ostringstream rt_check_os_;                                   \
      rt_check_os_ << msg;                                               \
      ::rt::fail_at(__FILE__, __LINE__, rt_check_os_.str());             \
    }                                                                    \
  } while (0)

// e4m3: FP8 E4M3 (OCP e4m3fn, 1 byte), the FP8 operands of kernels/fp8.h; only the fp8 ops and same-dtype copies
// take it.
enum class DType : uint8_t { f32, bf16, i32, e4m3 };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;
  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  std::string str() const;
};

constexpr int kMaxDims = 5;

// Contiguous, row-major view. Shapes are int64 everywhere: at 64K+ tokens, H*N*D overflows int32.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* data, DType dtype, Device device, std::initializer_list<int64_t> dims);

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  // size(-1) is the last dimension.
  int64_t size(int dim) const;
  std::string shape_str() const;

  template <class T>
  T* ptr() const { return static_cast<T*>(data); }

  // Same storage, new contiguous shape with the same element count.
  Tensor view(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) of dimension 0.
  Tensor slice(int64_t begin, int64_t end) const;
};

// Argument checks used by ops: they name the op and the offending shape.
void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* op, const char* arg);
void check_dtype(const Tensor& t, DType dtype, const char* op, const char* arg);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);

// bf16 helpers for host code (round to nearest even).
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t x);

}  // namespace rt
