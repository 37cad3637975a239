// The graphed decode of `ringtrain generate` (DESIGN.md "Generate", issue 45): one CUDA graph per decode step.
// The step's launches (embedding, every layer's norms, GEMMs, RoPE, K / V append, split-KV attention, MLP, the
// final norm and the logits) are captured once and replayed per token; what changes per step (the token, its
// position's RoPE row, the cache length and the append row) is one (4 + D)-word buffer on the device that the
// graph's first node copies from pinned host memory (KvCache::step_inputs). The attention kernel is sized for the
// cache's capacity and reads the live length from that buffer, so one capture serves every length: no buckets, no
// re-capture.
//   --cuda-graph auto (default): graphed where supported: a CUDA device and one rank (cp = tp = 1; a grid's decode
//                communicates between the segments, through MPI on the mpi communicator, which a graph cannot hold);
//   on: the same, and a failed capture is an error instead of a note; off: the ungraphed step (Model::decode_step).
// On CPU ranks and multi-rank grids every setting decodes ungraphed; the start-up line says which and why.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "framework/model/model.h"

namespace rt {

class StepGraph;

// "" or the refusal of a --cuda-graph value (naming the three accepted ones).
std::string check_cuda_graph_setting(const std::string& value);

struct DecodeGraphChoice {
  bool graphed = false;
  std::string line;  // the start-up line: which decode and why
};
// setting: auto | on | off (checked); cuda: the ranks decode on CUDA devices with graphs built in; ranks: the grid's
// process count (cp x tp).
DecodeGraphChoice choose_decode_graph(const std::string& setting, bool cuda, int ranks);

// One rank's graphed decode over `cache`. step(): the token at global `position`, its K / V appended at row
// cache.rows (then cache.rows + 1); the first step runs eagerly and captures the graph, every later one replays
// it. When the capture fails: `required` (--cuda-graph on) throws naming --cuda-graph off; else the steps run
// eagerly from the same device inputs (as correct, ungraphed speed) and capture_error() says why.
class GraphedDecode {
 public:
  GraphedDecode(Model& model, KvCache& cache, bool required);
  ~GraphedDecode();
  void step(int32_t token, int64_t position);
  bool graphed() const;                                   // replaying a captured graph
  size_t nodes() const;                                   // the captured graph's nodes (0 when none)
  const std::string& capture_error() const { return capture_error_; }
  double capture_seconds() const { return capture_s_; }  // the capture and instantiation (host time, first step)

 private:
  Model& model_;
  KvCache& cache_;
  bool required_;
  std::unique_ptr<StepGraph> graph_;
  bool tried_ = false;
  std::string capture_error_;
  double capture_s_ = 0;
};

}  // namespace rt
