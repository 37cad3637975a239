// Checks and scratch shared by the FP8 attention experiment's entry points (kernels/attn_fwd_fp8.cpp,
// kernels/attn_bwd_fp8.cpp, issue 47): the bf16 inputs' shape, dtype, device and alignment checks, one operand's
// check, the refusal of builds without CUDA, and the one scratch allocation of the one-call forms. Each op names
// itself in its refusals through an AttnFp8OpText.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>

#include "kernels/attention_shapes.h"
#include "kernels/tensor.h"

namespace rt {

// How an FP8 attention op words its refusals.
struct AttnFp8OpText {
  const char* kernel;           // "the FP8 attention forward": subject of "is an H100 / H200 kernel only"
  const char* on_cpu;           // after "kernel only" when given CPU tensors, e.g. " (no CPU backend)"
  const char* without_cuda;     // after "RINGTRAIN_CUDA=ON" in a build without CUDA, e.g. "" or "; on CPU ranks ..."
  const char* other_head_dims;  // after "D = 128 only", e.g. "" or " (use attn_bwd_block ...)"
};

// The dims of q (B,N,H,D), k and v (B,N,Hkv,D) and, when given, dout (B,N,H,D): bf16, 16-byte aligned, on one CUDA
// device; self-attention (Nq == Nk), D == 128 and N a positive multiple of `block` (the kernels have no partial
// tiles). Anything else is refused with the reason, worded by `text`.
AttnDims attn_fp8_input_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* dout, int64_t block,
                             const char* op, const AttnFp8OpText& text);

// t is defined, on dev, of dtype and dims, 16-byte aligned; `arg` names it (with its shape) in the refusal.
void attn_fp8_check_operand(const Tensor& t, DType dtype, std::initializer_list<int64_t> dims, const Device& dev,
                            const char* op, const char* arg);

// Fails: this build has no CUDA backend (worded by `text`).
[[noreturn]] void attn_fp8_refuse_no_cuda(const char* op, const AttnFp8OpText& text);

// CUDA builds: selects like's device, allocates one scratch buffer cut into parts of the given byte counts (each
// part 256-byte aligned), runs body(parts), waits for the current stream (a counted host wait, `why`) and frees the
// scratch; it is freed also when body throws. Other builds: attn_fp8_refuse_no_cuda.
void attn_fp8_with_scratch(const Tensor& like, std::initializer_list<int64_t> part_bytes, const char* op,
                           const char* why, const AttnFp8OpText& text,
                           const std::function<void(char* const* parts)>& body);

}  // namespace rt
