#include "framework/plan/mfu.h"

#include <cstdio>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "framework/model/model.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rt {

double FlopsModel::per_token() const {
  return 6.0 * double(params_matmul) + 6.0 * double(n_layer) * double(d_model) * double(seq_len);
}

std::string FlopsModel::formula() const {
  std::ostringstream os;
  os << "6*P_matmul + 6*L*d*T = 6*" << params_matmul << " + 6*" << n_layer << "*" << d_model << "*" << seq_len
     << " = " << per_token() << " FLOP/token (causal attention at half; P_matmul excludes the embedding lookup)";
  return os.str();
}

std::string FlopsModel::documents_formula() const {
  std::ostringstream os;
  os << "6*P_matmul*tokens + 12*L*d*pairs = 6*" << params_matmul << "*tokens + 12*" << n_layer << "*" << d_model
     << "*pairs FLOP/step (pairs: the step's visible (query, key) pairs under the document mask)";
  return os.str();
}

FlopsModel flops_model(const Config& config) {
  const ModelConfig& m = config.model;
  FlopsModel f;
  const int64_t embedding = int64_t(m.vocab_size) * m.d_model;
  f.params_matmul = count_parameters(m) - embedding + (m.tied_embeddings ? embedding : 0);
  f.n_layer = m.n_layer, f.d_model = m.d_model, f.seq_len = config.data.seq_len;
  return f;
}

double peak_tflops_for_gpu(const std::string& gpu_name) {
  std::string name = gpu_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  struct Row { const char* key; double tflops; };
  // Dense bf16 tensor-core peaks (SXM parts; PCIe parts are lower, override with log.peak_tflops).
  static const Row table[] = {{"H200", 989}, {"H100", 989}, {"GH200", 989}, {"B200", 2250}, {"B100", 1750},
                              {"A100", 312}, {"A800", 312},  {"L40S", 362},  {"A10", 125},   {"L4", 121}};
  for (const Row& r : table)
    if (name.find(r.key) != std::string::npos) return r.tflops;
  return 0;
}

double fp8_peak_tflops_for_gpu(const std::string& gpu_name) {
  std::string name = gpu_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  struct Row { const char* key; double tflops; };
  // Dense FP8 tensor-core peaks (SXM parts): twice the bf16 peak on Hopper, Ada and Blackwell; none before Ada.
  static const Row table[] = {{"H200", 1979}, {"H100", 1979}, {"GH200", 1979}, {"B200", 4500},
                              {"B100", 3500}, {"L40S", 733},  {"L4", 242}};
  for (const Row& r : table)
    if (name.find(r.key) != std::string::npos) return r.tflops;
  return 0;
}

int compute_capability(Device device) {
  if (device.is_cpu()) return 0;
#ifdef RINGTRAIN_HAVE_CUDA
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device.index) == cudaSuccess) return props.major * 10 + props.minor;
#endif
  return 0;
}

std::string fp8_device_problem(const Config& config, Device device) {
  if (config.train.precision != "fp8" || device.is_cpu()) return "";
  const int cc = compute_capability(device);
  if (cc == 0) return "";  // not readable here (plan without a GPU): the run itself checks
  const bool block = config.fp8.recipe == "block";
  const int need = block ? 90 : 89;
  if (cc >= need) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "train.precision=fp8%s needs FP8 tensor cores (compute capability %d.%d or newer), but %s is %d.%d; "
                "use train.precision: bf16%s",
                block ? " with fp8.recipe=block" : "", need / 10, need % 10, device_name(device).c_str(), cc / 10,
                cc % 10, block && cc >= 89 ? ", or fp8.recipe: tensorwise or rowwise (sm_89 has those)" : "");
  return buf;
}

std::string device_name(Device device) {
  if (device.is_cpu()) return "cpu";
#ifdef RINGTRAIN_HAVE_CUDA
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device.index) == cudaSuccess) return props.name;
#endif
  return "cuda";
}

double peak_tflops(const Config& config, Device device) {
  if (config.log.peak_tflops > 0) return config.log.peak_tflops;
  if (device.is_cpu()) return 0;
  return peak_tflops_for_gpu(device_name(device));
}

double mfu(const FlopsModel& flops, double tokens_per_s, double peak, int devices) {
  if (peak <= 0 || devices <= 0) return 0;
  return flops.per_token() * tokens_per_s / (peak * 1e12 * devices);
}

double mfu_of_rate(double flops_per_s, double peak, int devices) {
  if (peak <= 0 || devices <= 0) return 0;
  return flops_per_s / (peak * 1e12 * devices);
}

}  // namespace rt
