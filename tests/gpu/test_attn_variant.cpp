// The attention variant override (kernels/cuda/attention/attn_variant.h): a variant that this build does not have is an
// error that lists the ones it has, and a refused override leaves the current one in place. Needs no device.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/attention/attn_variant.h"
#include "kernels/tensor.h"

namespace rt::test {
namespace {

std::string refusal(const cuda::AttnVariantOverride& o) {
  try {
    cuda::set_attn_variant_override(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AttnVariantOverride, AnUnbuiltVariantIsRefusedWithTheValidNames) {
  const cuda::AttnVariantOverride before = cuda::attn_variant_override();
  const std::string fwd = refusal({1, 0});  // fwd v1 lives in dev/attention
  EXPECT_NE(fwd.find("valid: " + cuda::attn_fwd_variant_names()), std::string::npos) << fwd;
  EXPECT_EQ(cuda::attn_fwd_variant_names(), "2, 3, 4, 5");
  const std::string bwd = refusal({0, 2});  // bwd v2 too
  EXPECT_NE(bwd.find("valid: " + cuda::attn_bwd_variant_names()), std::string::npos) << bwd;
  EXPECT_EQ(cuda::attn_bwd_variant_names(), "1, 4, 5");
  const cuda::AttnVariantOverride after = cuda::attn_variant_override();
  EXPECT_EQ(after.fwd, before.fwd);
  EXPECT_EQ(after.bwd, before.bwd);

  cuda::set_attn_variant_override({3, 1});  // built ones are taken
  EXPECT_EQ(cuda::attn_variant_override().fwd, 3);
  EXPECT_EQ(cuda::attn_variant_override().bwd, 1);
  cuda::set_attn_variant_override(before);
}

TEST(AttnVariantOverride, ForwardRowsOtherThan64_128Or192AreRefused) {
  const cuda::AttnVariantOverride before = cuda::attn_variant_override();
  cuda::AttnVariantOverride o = before;
  o.fwd_rows = 100;
  const std::string why = refusal(o);
  EXPECT_NE(why.find("is not 64, 128 or 192"), std::string::npos) << why;
  EXPECT_EQ(cuda::attn_variant_override().fwd_rows, before.fwd_rows);
  for (const int rows : {64, 192}) {  // taken
    o.fwd_rows = rows;
    cuda::set_attn_variant_override(o);
    EXPECT_EQ(cuda::attn_variant_override().fwd_rows, rows);
  }
  cuda::set_attn_variant_override(before);
}

}  // namespace
}  // namespace rt::test
