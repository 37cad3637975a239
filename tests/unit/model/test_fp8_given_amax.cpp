// Fp8Linear's given amax (framework/model/fp8_linear.h): a producer that took the amax of its output (gemm_fp8_gelu,
// gemm_fp8_dgelu) writes it into amax_slot() and names the tensor with given_amax(x); the next tensorwise
// quantization of that same tensor uses it instead of reading x again, once. Another tensor, a second quantization
// of the same one, a new step, and the other recipes take their own amax. Checked through the factor each call
// writes: 1 / (448 / amax), so a planted amax shows.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "framework/model/fp8_linear.h"
#include "kernels/ops.h"

namespace rt {
namespace {

constexpr int64_t R = 32, K = 48;

struct Fixture {
  LocalComm one;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Fp8Linear> f;
  explicit Fixture(Fp8Recipe recipe) {
    const Fp8BlockDims dims{R, R, K, K, K, K, false};
    size_t bytes = 0;
    {
      Arena m = Arena::measuring(Device::cpu());
      Fp8Linear probe(recipe, dims, 1, one, one, m);
      bytes = m.peak();
    }
    arena = std::make_unique<Arena>(Device::cpu(), bytes);
    f = std::make_unique<Fp8Linear>(recipe, dims, 1, one, one, *arena);
  }
  // x's tensorwise factor after one quantization of it (the q operand's factor 0).
  float factor_of(std::vector<float>& x) {
    Fp8Operand q;
    f->quantize(Tensor(x.data(), DType::f32, Device::cpu(), {R, K}), {}, false, Fp8Linear::act, -1, &q, nullptr);
    return q.scale.ptr<float>()[0];
  }
  void plant(std::vector<float>& x, float amax) {
    fill(f->amax_slot(), amax);
    f->given_amax(Tensor(x.data(), DType::f32, Device::cpu(), {R, K}));
  }
};

std::vector<float> values(float top) {
  std::vector<float> x(size_t(R * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i));  // |x| < 1
  x[7] = top;
  return x;
}

float factor_for(float amax) { return 1.f / (448.f / amax); }

TEST(Fp8GivenAmax, TheNextTensorwiseQuantizationOfThatTensorUsesItOnce) {
  Fixture fx(Fp8Recipe::tensorwise);
  std::vector<float> x = values(3.f), other = values(5.f);
  EXPECT_FLOAT_EQ(fx.factor_of(x), factor_for(3.f));  // its own amax

  fx.plant(x, 12.f);
  EXPECT_FLOAT_EQ(fx.factor_of(other), factor_for(5.f));  // another tensor: not given to it
  EXPECT_FLOAT_EQ(fx.factor_of(x), factor_for(12.f));     // the given one
  EXPECT_FLOAT_EQ(fx.factor_of(x), factor_for(3.f));      // used once: read again after

  fx.plant(x, 12.f);
  fx.f->begin_step();  // a new step forgets it
  EXPECT_FLOAT_EQ(fx.factor_of(x), factor_for(3.f));

  fx.plant(x, 12.f);  // a view of the same data with another size is another tensor
  Fp8Operand q;
  fx.f->quantize(Tensor(x.data(), DType::f32, Device::cpu(), {R / 2, K}), {}, false, Fp8Linear::act, -1, &q, nullptr);
  EXPECT_FLOAT_EQ(q.scale.ptr<float>()[0], factor_for(3.f));
}

TEST(Fp8GivenAmax, OtherRecipesDoNotWantIt) {
  EXPECT_TRUE(Fixture(Fp8Recipe::tensorwise).f->wants_given_amax());
  EXPECT_FALSE(Fixture(Fp8Recipe::rowwise).f->wants_given_amax());
  EXPECT_FALSE(Fixture(Fp8Recipe::block).f->wants_given_amax());
}

}  // namespace
}  // namespace rt

namespace rt {
namespace {

// remembered_amax (framework/model/fp8_linear.h): a tensor the step quantizes twice (a weight: W in the forward, W^T in
// the backward; att under checkpointing none) takes one amax pass. Shown by changing the data in place between the two
// quantizations, which a real step never does: the second quantization keeps the first one's factor, and the things
// that must take a new amax (a new step, refresh, other data, another recipe) do.
TEST(Fp8RememberedAmax, AWeightsTransposeReusesTheForwardsAmaxWithinAStep) {
  Fixture fx(Fp8Recipe::tensorwise);
  std::vector<float> w(size_t(K * K));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * std::cos(0.11f * float(i));  // |w| <= 0.5
  w[3] = 3.f;
  const Tensor wt(w.data(), DType::f32, Device::cpu(), {K, K});
  Fp8Linear& f = *fx.f;
  EXPECT_FLOAT_EQ(f.weight(Fp8Linear::weight0, wt, {}, false, 0, Fp8Site::wq).scale.ptr<float>()[0], factor_for(3.f));
  w[3] = 9.f;  // not what a step does: makes a second amax pass visible
  EXPECT_FLOAT_EQ(f.weight(Fp8Linear::weight0, wt, {}, true, 0, Fp8Site::wq).scale.ptr<float>()[0], factor_for(3.f));
  // Another site of the same layer has its own.
  EXPECT_FLOAT_EQ(f.weight(Fp8Linear::weight1, wt, {}, false, 0, Fp8Site::wo).scale.ptr<float>()[0], factor_for(9.f));
  f.begin_step();  // a new step takes it again
  EXPECT_FLOAT_EQ(f.weight(Fp8Linear::weight0, wt, {}, true, 0, Fp8Site::wq).scale.ptr<float>()[0], factor_for(9.f));
}

TEST(Fp8RememberedAmax, RefreshOtherDataAndOtherRecipesTakeTheirOwn) {
  Fixture fx(Fp8Recipe::tensorwise);
  Fp8Linear& f = *fx.f;
  std::vector<float> x = values(3.f), y = values(5.f);
  const Tensor xt(x.data(), DType::f32, Device::cpu(), {R, K}), yt(y.data(), DType::f32, Device::cpu(), {R, K});
  float got = 0.f;
  auto amax_of = [&](const Fp8Linear::Whole& w) {
    copy_cast(Tensor(&got, DType::f32, Device::cpu(), {1}), w.amax);
    return got;
  };
  EXPECT_FLOAT_EQ(amax_of(f.whole_amax_remembered(0, 0, Fp8Site::attn_out, xt, {}, false, true)), 3.f);
  x[7] = 4.f;
  EXPECT_FLOAT_EQ(amax_of(f.whole_amax_remembered(1, 0, Fp8Site::attn_out, xt, {}, true, false)), 3.f);  // reused
  EXPECT_FLOAT_EQ(amax_of(f.whole_amax_remembered(1, 0, Fp8Site::attn_out, xt, {}, true, true)), 4.f);   // refresh
  EXPECT_FLOAT_EQ(amax_of(f.whole_amax_remembered(1, 0, Fp8Site::attn_out, yt, {}, true, false)), 5.f);  // other data

  Fixture rows(Fp8Recipe::rowwise);  // rowwise: per-column amaxes of x^T, taken every time
  const Fp8Linear::Whole w = rows.f->whole_amax_remembered(0, 0, Fp8Site::attn_out, xt, {}, true, true);
  ASSERT_EQ(w.amax.numel(), K);
  x[7 + K] = 11.f;  // row 1, column 7
  const Fp8Linear::Whole again = rows.f->whole_amax_remembered(0, 0, Fp8Site::attn_out, xt, {}, true, false);
  EXPECT_FLOAT_EQ(again.amax.ptr<float>()[7], 11.f);
}

}  // namespace
}  // namespace rt
