// TensorBoard event files (framework/run/tensorboard.h).
#include "framework/run/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/run/crc32c.h"
#include "kernels/tensor.h"

#if RINGTRAIN_HAVE_PROTOBUF
#include "framework/run/tensorboard_events.pb.h"
#endif

namespace fs = std::filesystem;

namespace rt {
namespace {

constexpr const char* kPrefix = "events.out.tfevents.";

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A name events.out.tfevents.<seconds>.<host>.<pid> that sorts after every event file already in `dir`: the
// seconds field is now, or one past the latest file's when that is not earlier (a restart within the second).
[[maybe_unused]] std::string new_event_file_name(const fs::path& dir) {
  long long seconds = (long long)now_seconds();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!starts_with(name, kPrefix)) continue;
    const long long at = std::atoll(name.c_str() + std::strlen(kPrefix));
    if (at >= seconds) seconds = at + 1;
  }
  char host[256] = "host";
  if (gethostname(host, sizeof host) != 0) std::snprintf(host, sizeof host, "host");
  host[sizeof host - 1] = 0;
  return std::string(kPrefix) + std::to_string(seconds) + "." + host + "." + std::to_string(getpid());
}

}  // namespace

std::string tensorboard_tag(const std::string& key) {
  if (key == "step" || key == "total_steps") return "";
  std::string group = "other";
  if (starts_with(key, "eval_")) group = "eval";
  else if (key == "loss" || starts_with(key, "loss_")) group = "train";
  else if (key == "lr" || key == "grad_norm" || key == "skipped_steps") group = "optim";
  else if (starts_with(key, "tok_per_s") || starts_with(key, "mfu") || key == "ms_per_step" || key == "eta_s" ||
           key.find("tflops") != std::string::npos)
    group = "perf";
  else if (starts_with(key, "ring_") || starts_with(key, "zero_") || starts_with(key, "a2a_") ||
           starts_with(key, "comm_") || starts_with(key, "cp_scheme") || key == "attn_ms")
    group = "comm";
  else if (key.find("mem") != std::string::npos || key == "arena_bytes") group = "memory";
  else if (key == "targets" || key == "boundary_targets_dropped" || key == "visible_pairs_per_step") group = "data";
  return group + "/" + key;
}

std::string tensorboard_dir(const std::string& run_dir) { return (fs::path(run_dir) / "tensorboard").string(); }

std::string move_tensorboard_aside(const std::string& run_dir) {
  const fs::path dir = tensorboard_dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || fs::is_empty(dir, ec)) return "";
  std::string side = dir.string() + ".previous";
  for (int k = 2; fs::exists(side, ec); ++k) side = dir.string() + ".previous." + std::to_string(k);
  fs::rename(dir, side, ec);
  if (ec) throw Error("cannot move " + dir.string() + " aside to " + side + ": " + ec.message());
  return side;
}

struct TensorBoardWriter::File {
  std::FILE* f = nullptr;
};

#if RINGTRAIN_HAVE_PROTOBUF

bool tensorboard_built() { return true; }

namespace {
std::string serialize(const ringtrain::tensorboard::Event& e) {
  std::string bytes;
  if (!e.SerializeToString(&bytes)) throw Error("tensorboard: serializing an event failed");
  return bytes;
}
}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t first_step) : file_(std::make_unique<File>()) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("tensorboard: cannot create '" + dir + "': " + ec.message() + " (check train.run_dir)");
  path_ = (fs::path(dir) / new_event_file_name(dir)).string();
  file_->f = std::fopen(path_.c_str(), "ab");
  if (!file_->f)
    throw Error("tensorboard: cannot open '" + path_ + "': " + std::strerror(errno) + " (check train.run_dir, or "
                "set log.tensorboard=false)");
  ringtrain::tensorboard::Event version;
  version.set_wall_time(now_seconds());
  version.set_file_version("brain.Event:2");
  write_record(serialize(version));
  if (first_step > 1) {
    ringtrain::tensorboard::Event start;
    start.set_wall_time(now_seconds());
    start.set_step(first_step);
    start.mutable_session_log()->set_status(ringtrain::tensorboard::SessionLog::START);
    start.mutable_session_log()->set_msg("resumed: steps from here replace any logged earlier");
    write_record(serialize(start));
  }
  if (std::fflush(file_->f) != 0)
    throw Error("tensorboard: writing '" + path_ + "' failed: " + std::strerror(errno) + " (is the disk full?)");
}

void TensorBoardWriter::write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& tagged) {
  ringtrain::tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  ringtrain::tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, value] : tagged) {
    if (!std::isfinite(value)) continue;
    ringtrain::tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
  }
  if (summary->value_size() == 0) return;
  write_record(serialize(e));
  if (std::fflush(file_->f) != 0)
    throw Error("tensorboard: writing '" + path_ + "' failed: " + std::strerror(errno) + " (is the disk full?)");
}

#else  // built without protobuf: no writer can be made (the trainer checks tensorboard_built() first)

bool tensorboard_built() { return false; }

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t) : file_(std::make_unique<File>()) {
  throw Error("tensorboard: this build has no protobuf, so no event file can be written in '" + dir + "'. " +
              tensorboard_off_line());
}

void TensorBoardWriter::write_scalars(int64_t, const std::vector<std::pair<std::string, double>>&) {}

#endif

std::string tensorboard_off_line() {
  return "log.tensorboard: event files are off: this ringtrain was built without protobuf; to get them, install "
         "libprotobuf-dev protobuf-compiler (launch/install-deps.sh does) and rebuild (launch/build.sh), or set "
         "log.tensorboard=false to silence this line";
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ && file_->f) std::fclose(file_->f);
}

void TensorBoardWriter::write_json_scalars(const std::string& json_object) {
  const nlohmann::json j = nlohmann::json::parse(json_object);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return;
  std::vector<std::pair<std::string, double>> tagged;
  for (const auto& [key, value] : j.items()) {
    const std::string tag = tensorboard_tag(key);
    if (!tag.empty() && value.is_number()) tagged.emplace_back(tag, value.get<double>());
  }
  write_scalars(j["step"].get<int64_t>(), tagged);
}

// TFRecord: length (u64 LE), masked CRC-32C of the length's 8 bytes, the data, masked CRC-32C of the data.
void TensorBoardWriter::write_record(const std::string& bytes) {
  unsigned char header[12];
  const uint64_t n = bytes.size();
  for (int i = 0; i < 8; ++i) header[i] = (unsigned char)(n >> (8 * i));
  const uint32_t len_crc = mask_crc32c(crc32c(header, 8));
  const uint32_t data_crc = mask_crc32c(crc32c(bytes.data(), bytes.size()));
  unsigned char footer[4];
  for (int i = 0; i < 4; ++i) header[8 + i] = (unsigned char)(len_crc >> (8 * i));
  for (int i = 0; i < 4; ++i) footer[i] = (unsigned char)(data_crc >> (8 * i));
  if (std::fwrite(header, 1, 12, file_->f) != 12 || std::fwrite(bytes.data(), 1, bytes.size(), file_->f) != n ||
      std::fwrite(footer, 1, 4, file_->f) != 4)
    throw Error("tensorboard: writing '" + path_ + "' failed: " + std::strerror(errno) + " (is the disk full?)");
}

}  // namespace rt
