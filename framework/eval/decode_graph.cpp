// The graphed decode (framework/eval/decode_graph.h): the --cuda-graph choice and the capture / replay loop.
#include "framework/eval/decode_graph.h"

#include <chrono>
#include <cstdio>

#include "kernels/step_graph.h"

namespace rt {

std::string check_cuda_graph_setting(const std::string& value) {
  if (value == "auto" || value == "on" || value == "off") return "";
  return "--cuda-graph '" + value + "' is not a setting; give --cuda-graph auto (one CUDA graph per decode step "
         "where supported: a CUDA device, one rank), on (the same, a failed capture is an error) or off (the "
         "ungraphed step)";
}

DecodeGraphChoice choose_decode_graph(const std::string& setting, bool cuda, int ranks) {
  DecodeGraphChoice c;
  const std::string asked = "--cuda-graph " + setting;
  if (setting == "off") {
    c.line = "generate: decode ungraphed, one launch per op (" + asked + ")";
  } else if (!cuda) {
    c.line = "generate: decode ungraphed (" + asked + "): CUDA graphs need a CUDA device; these ranks run on the CPU";
  } else if (ranks > 1) {
    c.line = "generate: decode ungraphed (" + asked + "): the grid's " + std::to_string(ranks) + " ranks exchange "
             "attention states (cp) and sums (tp) inside every step through the communicator, which one graph "
             "cannot hold; the graphed step runs on one rank (cp = tp = 1)";
  } else {
    c.graphed = true;
    c.line = "generate: decode as one CUDA graph per step (" + asked + "): captured at the first step, replayed "
             "for every token; the cache length is read on the device, so one capture serves every length";
  }
  return c;
}

GraphedDecode::GraphedDecode(Model& model, KvCache& cache, bool required)
    : model_(model), cache_(cache), required_(required),
      graph_(std::make_unique<StepGraph>(cache.step_inputs.device, cache.step_inputs)) {}

GraphedDecode::~GraphedDecode() = default;

void GraphedDecode::step(int32_t token, int64_t position) {
  RT_CHECK(cache_.rows < cache_.capacity, "generate: this rank's KV cache is full (" << cache_.capacity << " rows)");
  const int32_t row = int32_t(cache_.rows);
  model_.decode_step_inputs(graph_->staging(), cache_, token, position, /*kv_len=*/row + 1, /*append_row=*/row);
  const auto launches = [this] { model_.decode_step_from_inputs(cache_); };
  if (graph_->captured()) {
    graph_->replay();
  } else {
    graph_->run_eager(launches);  // this step's work (and every kernel's first launch outside a capture)
    if (!tried_) {
      tried_ = true;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        graph_->capture(launches);
        capture_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } catch (const Error& e) {
        capture_error_ = e.what();
        RT_CHECK(!required_, "generate --cuda-graph on: the decode step could not be captured as a CUDA graph ("
                                 << capture_error_ << "); run with --cuda-graph off (or auto, which falls back)");
        std::fprintf(stderr, "warning: generate: the decode step could not be captured as a CUDA graph (%s); "
                     "decoding ungraphed\n", capture_error_.c_str());
      }
    }
  }
  ++cache_.rows;
}

bool GraphedDecode::graphed() const { return graph_->captured(); }
size_t GraphedDecode::nodes() const { return graph_->nodes(); }

}  // namespace rt
