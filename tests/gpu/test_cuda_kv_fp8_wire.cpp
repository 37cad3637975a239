// kv_fp8_quantize / kv_fp8_dequantize on CUDA (kernels/cuda/kv_fp8_wire.cu) bit for bit against the CPU code
// (kernels/kv_fp8_wire.cpp, which tests/unit/kernels/test_kv_fp8_wire_cpu.cpp holds to an fp64 reference): the codes
// and factors from bf16 and f32 inputs, full and partial 128-row blocks, head dims 64 and 128, a NaN group and a zero
// group; the dequantized values in bf16 and f32. Outputs are poisoned before each call. Skipped without a device.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kv_fp8_wire.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

struct Case {
  int64_t B, n, Hkv, D;
  DType dtype;  // of x and of the dequantized output
};

std::vector<uint8_t> codes_of(const Tensor& t) {
  std::vector<uint8_t> c(size_t(t.numel()));
  copy_cast(Tensor(c.data(), DType::e4m3, Device::cpu(), {t.numel()}), t);
  return c;
}

// Equal bit for bit (any NaN equals any NaN).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b, size_t* at) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], 4) != 0) return *at = i, false;
  return a.size() == b.size();
}

TEST(CudaKvFp8Wire, CodesFactorsAndValuesMatchTheCpuBitForBit) {
  RT_REQUIRE_CUDA();
  for (const Case c : {Case{2, 384, 2, 128, DType::bf16}, Case{1, 200, 3, 64, DType::bf16},
                       Case{2, 256, 1, 128, DType::f32}}) {
    SCOPED_TRACE(std::to_string(c.B) + "x" + std::to_string(c.n) + "x" + std::to_string(c.Hkv) + "x" +
                 std::to_string(c.D) + " " + dtype_name(c.dtype));
    const int64_t nb = kv_fp8_row_blocks(c.n), numel = c.B * c.n * c.Hkv * c.D;
    std::vector<float> x = random_vector(numel, 31 + uint64_t(c.n), 0.7f);
    x[size_t(((0 * c.n + 5) * c.Hkv + 0) * c.D + 3)] = std::nanf("");  // group (0, 0, block 0): NaN
    for (int64_t t = 128; t < std::min<int64_t>(c.n, 256); ++t)          // group (B-1, Hkv-1, block 1): zeros
      for (int64_t e = 0; e < c.D; ++e) x[size_t((((c.B - 1) * c.n + t) * c.Hkv + c.Hkv - 1) * c.D + e)] = 0.f;
    x[8] = -2.5e-7f;  // below E4M3's subnormals after scaling: rounds to -0
    if (c.dtype == DType::bf16) x = bf16_rounded(x);

    Buffer gx(gpu(), c.dtype, {c.B, c.n, c.Hkv, c.D}), gq(gpu(), DType::e4m3, {c.B, c.n, c.Hkv, c.D});
    Buffer gf(gpu(), DType::f32, {c.B, c.Hkv, nb}), gout(gpu(), c.dtype, {c.B, c.n, c.Hkv, c.D});
    Buffer hx(Device::cpu(), c.dtype, {c.B, c.n, c.Hkv, c.D}), hq(Device::cpu(), DType::e4m3, {c.B, c.n, c.Hkv, c.D});
    Buffer hf(Device::cpu(), DType::f32, {c.B, c.Hkv, nb}), hout(Device::cpu(), c.dtype, {c.B, c.n, c.Hkv, c.D});
    upload(gx.t(), x);
    upload(hx.t(), x);
    std::vector<uint8_t> poison_codes(size_t(numel), 0xEE);
    copy_cast(gq.t(), Tensor(poison_codes.data(), DType::e4m3, Device::cpu(), {c.B, c.n, c.Hkv, c.D}));
    poison(gf.t());
    poison(gout.t());

    kv_fp8_quantize(gq.t(), gf.t(), gx.t());
    kv_fp8_quantize(hq.t(), hf.t(), hx.t());
    const std::vector<uint8_t> got_codes = codes_of(gq.t()), want_codes = codes_of(hq.t());
    size_t at = 0;
    for (at = 0; at < got_codes.size() && got_codes[at] == want_codes[at]; ++at) {
    }
    EXPECT_EQ(at, got_codes.size()) << "first code mismatch at " << at << ": got " << int(got_codes[at])
                                    << ", want " << int(want_codes[at]);
    const std::vector<float> got_f = download(gf.t()), want_f = download(hf.t());
    EXPECT_TRUE(same_bits(got_f, want_f, &at)) << "factor " << at << ": got " << got_f[at] << ", want " << want_f[at];
    EXPECT_TRUE(std::isnan(got_f[0])) << "the NaN group's factor";

    kv_fp8_dequantize(gout.t(), gq.t(), gf.t());
    kv_fp8_dequantize(hout.t(), hq.t(), hf.t());
    const std::vector<float> got = download(gout.t()), want = download(hout.t());
    EXPECT_TRUE(same_bits(got, want, &at)) << "value " << at << ": got " << got[at] << ", want " << want[at];
    double diff2 = 0, ref2 = 0;  // the round trip outside the NaN group: E4M3's rounding
    for (size_t i = 0; i < x.size(); ++i)
      if (std::isfinite(got[i]) && std::isfinite(x[i]))
        diff2 += double(got[i] - x[i]) * (got[i] - x[i]), ref2 += double(x[i]) * x[i];
    EXPECT_LT(std::sqrt(diff2 / ref2), 4e-2);
    EXPECT_GT(std::sqrt(diff2 / ref2), 1e-2);
  }
}

}  // namespace
}  // namespace rt::test
