// TensorBoard event files (log.tensorboard; DESIGN.md "Metrics and output"). One writer per process start, on one
// rank only (rank 0, the one that writes metrics.jsonl): a new file run_dir/tensorboard/events.out.tfevents.<time>.
// <host>.<pid> whose name sorts after any file already there, so TensorBoard reads a run's files in order.
//   - every numeric field of every metrics.jsonl line becomes a scalar at the line's step (MetricsWriter calls
//     write_json_scalars with the line it wrote; null fields are left out), tagged by tensorboard_tag;
//   - a resumed run appends: its file starts with SessionLog START at the first step it runs, and TensorBoard's
//     reader then drops the steps an earlier file logged past the resumed checkpoint (as metrics.jsonl moves
//     those lines to a side file);
//   - `ringtrain eval --task loss-by-position | needle` writes its results into run_dir/tensorboard/eval/... .
// The format: TFRecord (little-endian u64 length, masked CRC-32C of the length, the serialized Event, masked
// CRC-32C of it) of Event messages (framework/run/tensorboard_events.proto, serialized by protobuf). Built only when
// CMake finds protobuf (RINGTRAIN_TENSORBOARD AUTO); otherwise tensorboard_built() is false and the trainer says so.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rt {

// Whether this binary was built with protobuf, i.e. can write event files.
bool tensorboard_built();
// The line printed at start-up when log.tensorboard is on and tensorboard_built() is false.
std::string tensorboard_off_line();
// The TensorBoard tag of a metrics.jsonl key: "<group>/<key>", the group by what the key measures (loss, optim,
// perf, memory, comm, eval, data). Keys "step" and "total_steps" are not scalars ("" for them).
std::string tensorboard_tag(const std::string& jsonl_key);
// run_dir/tensorboard
std::string tensorboard_dir(const std::string& run_dir);
// A fresh run over a used run_dir: moves run_dir/tensorboard (when it holds anything) to a free name
// run_dir/tensorboard.previous[.k], beside metrics.jsonl.previous, and returns it ("" when nothing moved).
std::string move_tensorboard_aside(const std::string& run_dir);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it, starting with the file_version event; a resumed run
  // (first_step > 1) adds SessionLog START at first_step. Throws rt::Error naming the file and the reason.
  TensorBoardWriter(const std::string& dir, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  // One event holding these scalars at `step` (non-finite values left out), flushed.
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& tagged);
  // A metrics.jsonl line (a JSON object with an integer "step"): its numeric fields, tagged by tensorboard_tag.
  void write_json_scalars(const std::string& json_object);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  struct File;
  std::unique_ptr<File> file_;
};

}  // namespace rt
