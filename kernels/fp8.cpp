// The FP8 checks shared by both backends (kernels/fp8.h).
#include "kernels/fp8.h"

namespace rt {

const char* fp8_scaling_name(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::tensor: return "tensor";
    case Fp8Scaling::row: return "row";
    case Fp8Scaling::block_1x128: return "block_1x128";
    case Fp8Scaling::block_128x128: return "block_128x128";
  }
  return "?";
}

const char* fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::tensorwise: return "tensorwise";
    case Fp8Recipe::rowwise: return "rowwise";
    case Fp8Recipe::block: return "block";
  }
  return "?";
}

void check_fp8_operand(const Fp8Operand& o, int64_t R, int64_t K, const Device& device, const char* op,
                       const char* arg) {
  RT_CHECK(o.data.defined() || R * K == 0, op << ": " << arg << ".data is not defined (null data)");
  RT_CHECK(o.data.ndim == 2 && o.data.shape[0] == R && o.data.shape[1] == K,
           op << ": " << arg << ".data is " << o.data.shape_str() << ", expected (" << R << "," << K << ")");
  check_dtype(o.data, DType::e4m3, op, arg);
  RT_CHECK(o.data.device == device, op << ": " << arg << ".data is on " << o.data.device.str()
                                       << " but the op runs on " << device.str() << "; copy it there first");
  const Fp8ScaleShape s = fp8_scale_shape(o.scaling, R, K);
  RT_CHECK(o.scale.defined(), op << ": " << arg << ".scale is not defined; it takes " << s.numel()
                                 << " f32 factors (" << fp8_scaling_name(o.scaling) << " scaling)");
  const bool shape_ok = s.ndim == 1 ? (o.scale.ndim == 1 && o.scale.shape[0] == s.d0)
                                    : (o.scale.ndim == 2 && o.scale.shape[0] == s.d0 && o.scale.shape[1] == s.d1);
  RT_CHECK(shape_ok, op << ": " << arg << ".scale is " << o.scale.shape_str() << "; " << fp8_scaling_name(o.scaling)
                        << " scaling of a (" << R << "," << K << ") operand takes ("
                        << (s.ndim == 1 ? std::to_string(s.d0) : std::to_string(s.d0) + "," + std::to_string(s.d1))
                        << ") (kernels/fp8.h fp8_scale_shape)");
  check_dtype(o.scale, DType::f32, op, arg);
  RT_CHECK(o.scale.device == device, op << ": " << arg << ".scale is on " << o.scale.device.str()
                                        << " but the op runs on " << device.str());
}

namespace {
bool is_block(Fp8Scaling s) { return s == Fp8Scaling::block_1x128 || s == Fp8Scaling::block_128x128; }
}  // namespace

void check_fp8_gemm_tiling(Fp8Scaling a_scaling, Fp8Scaling b_scaling, int64_t M, int64_t N, int64_t K,
                           const char* what) {
  const bool a_block = is_block(a_scaling), b_block = is_block(b_scaling);
  RT_CHECK(a_block == b_block && (a_block || a_scaling == b_scaling),
           what << ": FP8 operands scaled " << fp8_scaling_name(a_scaling) << " x " << fp8_scaling_name(b_scaling)
                << "; supported pairs: tensor x tensor, row x row, and block x block (1x128 or 128x128 each, "
                   "not both 128x128)");
  RT_CHECK(!(a_scaling == Fp8Scaling::block_128x128 && b_scaling == Fp8Scaling::block_128x128),
           what << ": both operands 128x128-block scaled; Hopper's block-scaled GEMMs take at most one 128x128 "
                   "operand: quantize the activation or gradient side in 1x128 blocks");
  const int64_t unit = a_block ? 128 : 16;
  const char* why = a_block ? "the block recipe tiles by 128" : "cuBLASLt's FP8 GEMMs need 16-byte rows";
  const struct { const char* name; int64_t v; const char* hint; } dims[] = {
      {"M", M, "the rows of the output (tokens, or the weight's rows in a weight gradient)"},
      {"N", N, "the columns of the output"},
      {"K", K, "the contraction dimension (tokens in a weight gradient)"}};
  for (const auto& d : dims)
    RT_CHECK(d.v % unit == 0, what << ": " << d.name << " = " << d.v << " (" << d.hint << ") is not a multiple of "
                                   << unit << " (" << why << "); pad the model dimension or the tokens per rank to "
                                   << "a multiple of " << unit
                                   << (a_block ? ", use fp8.recipe: tensorwise or rowwise (multiples of 16)," : ",")
                                   << " or keep this layer in bf16");
}

}  // namespace rt
