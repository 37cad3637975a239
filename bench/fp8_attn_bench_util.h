// Shared by the FP8 attention experiment benches (bench/attn_fp8_fwd_bench.cu, bench/attn_fp8_bwd_bench.cu): their
// command line, the GPU set-up and error handling around the body, the timing columns both print per N, and the
// relative RMS difference of an FP8 result from the bf16 one.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace rt::bench {

// "16384,32768" -> {16384, 32768}.
inline std::vector<int64_t> parse_int64_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

// The command line of an FP8 attention bench; the values set before parsing are the defaults its usage line shows.
struct Fp8AttnBenchArgs {
  std::vector<int64_t> ns;  // the sequence lengths N, one row each
  int64_t B = 1, H = 16, Hkv = 16;
  int warmup = 3, reps = 10;
  bool causal = true;  // --full: no mask
};

// Parses [--n LIST] [--b B] [--h H] [--hkv HKV] [--warmup W] [--reps R] [--full] into args (--b only where
// takes_batch); on any other word prints `name`'s usage line to stderr and returns false.
inline bool parse_fp8_attn_bench_args(int argc, char** argv, const char* name, bool takes_batch,
                                      Fp8AttnBenchArgs& args) {
  std::string ns_default;
  for (size_t i = 0; i < args.ns.size(); ++i) ns_default += (i ? "," : "") + std::to_string(args.ns[i]);
  const std::string usage = std::string("usage: ") + name + " [--n " + ns_default + "]" +
                            (takes_batch ? " [--b " + std::to_string(args.B) + "]" : std::string()) + " [--h " +
                            std::to_string(args.H) + "] [--hkv " + std::to_string(args.Hkv) + "] [--warmup " +
                            std::to_string(args.warmup) + "] [--reps " + std::to_string(args.reps) + "] [--full]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--n") args.ns = parse_int64_list(next());
    else if (a == "--b" && takes_batch) args.B = std::stoll(next());
    else if (a == "--h") args.H = std::stoll(next());
    else if (a == "--hkv") args.Hkv = std::stoll(next());
    else if (a == "--warmup") args.warmup = std::stoi(next());
    else if (a == "--reps") args.reps = std::stoi(next());
    else if (a == "--full") args.causal = false;
    else {
      std::fprintf(stderr, "%s", usage.c_str());
      return false;
    }
  }
  return true;
}

// main's exit code around body(properties of GPU 0): 1 without a CUDA device or when body throws (the message
// prefixed with `name` on stderr), else 0. GPU 0 is initialized first.
inline int run_on_gpu0(const char* name, const std::function<void(const cudaDeviceProp&)>& body) {
  if (!cuda_available()) {
    std::fprintf(stderr, "%s: no CUDA device\n", name);
    return 1;
  }
  try {
    cuda::init(0);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    body(prop);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
  return 0;
}

// The leading columns of a bench row (no newline): N, the bf16 ms and TFLOP/s, the quantizer's ms, the FP8 kernel's
// ms and TFLOP/s, and the bf16 time over the FP8 kernel's, alone and with the quantizer. flops: the call's count.
inline void print_fp8_attn_times(int64_t N, double flops, double bf16_ms, double quant_ms, double fp8_ms) {
  const double bf16_tf = flops / (bf16_ms * 1e-3) / 1e12, fp8_tf = flops / (fp8_ms * 1e-3) / 1e12;
  std::printf("%7ld %8.3f %10.1f %9.3f %7.3f %9.1f %9.2f %17.2f", long(N), bf16_ms, bf16_tf, quant_ms, fp8_ms, fp8_tf,
              bf16_ms / fp8_ms, bf16_ms / (fp8_ms + quant_ms));
}

// ||a - b|| / ||b|| over two device tensors of one shape (through the host, as f32); infinity on a NaN in a.
inline double rel_rms(const Tensor& a, const Tensor& b) {
  std::vector<float> ha(size_t(a.numel())), hb(size_t(b.numel()));
  copy_cast(Tensor(ha.data(), DType::f32, Device::cpu(), {a.numel()}), a);
  copy_cast(Tensor(hb.data(), DType::f32, Device::cpu(), {b.numel()}), b);
  double num = 0, den = 0;
  for (size_t i = 0; i < ha.size(); ++i) {
    if (std::isnan(ha[i])) return INFINITY;
    num += (double(ha[i]) - hb[i]) * (double(ha[i]) - hb[i]);
    den += double(hb[i]) * hb[i];
  }
  return std::sqrt(num / den);
}

}  // namespace rt::bench
