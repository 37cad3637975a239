// eval --dump-logits (framework/eval/dump_logits.h).
#include "framework/eval/dump_logits.h"

#include <cstdio>
#include <exception>
#include <filesystem>

#include "framework/base/checkpoint_io.h"
#include "framework/base/run_errors.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
               size_t bytes) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t prefix = 10;  // magic (6) + version (2) + header length (2)
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string head = "\x93NUMPY";
  head += char(1);
  head += char(0);
  head += char(header.size() & 0xff);
  head += char((header.size() >> 8) & 0xff);
  DurableFileWriter w(path);
  w.write(head.data(), head.size());
  w.write(header.data(), header.size());
  w.write(data, bytes);
  w.commit();
}

std::string dump_logits_tokens_path(const std::string& file) { return file + ".tokens.npy"; }

void dump_logits(Model& model, const Batch& batch, int world_size, const std::string& file, OutputFiles& outputs) {
  RT_CHECK(world_size == 1, "eval --dump-logits runs on one rank (dp = cp = tp = 1), so that the logits are in "
                            "sequence order; this job has " << world_size << " ranks");
  const ModelShape& s = model.shape();
  const double count = model.global_target_count(batch);
  const std::vector<float> losses = model.step(batch, count, /*want_grad=*/false);  // (B*n)
  double loss_sum = 0;
  int64_t targets = 0;
  for (size_t i = 0; i < losses.size(); ++i)
    if (batch.targets[i] >= 0) loss_sum += double(losses[i]), ++targets;
  const int64_t N = s.N(), C = s.C, V = s.V;
  std::vector<float> hidden(size_t(N * C));  // (N, C)
  Tensor host(hidden.data(), DType::f32, Device::cpu(), {N, C});
  copy_cast(host, model.final_hidden());
  const std::vector<HostTensor> weights = model.gather_full(model.weights(), "");
  const char* head = s.tied ? "tok_embeddings.weight" : "lm_head.weight";
  const HostTensor* w = nullptr;  // (V, C)
  for (const HostTensor& t : weights)
    if (t.name == head) w = &t;
  RT_CHECK(w, "dump_logits: no " << head << " tensor");
  std::vector<float> logits(size_t(N * V));  // (N, V)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = hidden.data() + i * C;
    for (int64_t v = 0; v < V; ++v) {
      const float* wr = w->values.data() + v * C;
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += double(x[c]) * double(wr[c]);
      logits[size_t(i * V + v)] = float(acc);
    }
  }
  try {  // to temporaries; the command renames them with its other outputs at the end
    write_npy(outputs.temporary("--dump-logits", file), "<f4", {s.B, s.n, V}, logits.data(),
              logits.size() * sizeof(float));
    write_npy(outputs.temporary("--dump-logits", dump_logits_tokens_path(file)), "<i4", {s.B, s.n},
              batch.tokens.data(), batch.tokens.size() * sizeof(int32_t));
  } catch (const std::exception& e) {
    throw RunError(kExitUsage, std::string("eval --dump-logits: ") + e.what() +
                                   "; none of this command's outputs was written");
  }
  std::fprintf(stderr, "dump-logits: %s (%lld x %lld x %lld float32) and %s.tokens.npy; this batch's mean loss "
              "%.9g over %lld targets\n",
              file.c_str(), (long long)s.B, (long long)s.n, (long long)V, file.c_str(),
              targets > 0 ? loss_sum / double(targets) : 0.0, (long long)targets);
}

}  // namespace rt
