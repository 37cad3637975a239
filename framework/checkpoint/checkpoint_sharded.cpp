// save_checkpoint_sharded / load_checkpoint_sharded (framework/checkpoint/checkpoint_sharded.h).
#include "framework/checkpoint/checkpoint_sharded.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "framework/checkpoint/checkpoint_internal.h"
#include "framework/base/checkpoint_io.h"
#include "framework/model/model_internal.h"
#include "kernels/ops.h"

namespace fs = std::filesystem;

namespace rt {

namespace {

constexpr int64_t kStageElems = int64_t(1) << 22;  // host staging: 16 MiB of f32 at a time

// One checkpoint file: its tensors are `sources.size()` copies of the parameter list, each with a prefix and
// the local buffer it comes from (master; or m, v).
struct FileSpec {
  const char* file;
  std::vector<std::string> prefixes;
  std::vector<Tensor> sources;
  std::map<std::string, std::string> metadata;
};

SafetensorsLayout layout_of(const Model& model, const FileSpec& spec) {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const std::string& prefix : spec.prefixes)
    for (const ParamEntry& e : model.params()) names.push_back(prefix + e.name), shapes.push_back(e.full_shape);
  return make_safetensors_layout(names, shapes, spec.metadata);
}

// Calls fn(local i, count, full index) for the runs of a piece's elements [lo, hi) that are contiguous in the
// full tensor (a whole piece for row-split shards, one row segment each for column-split ones).
template <class Fn>
void for_each_full_run(const ParamEntry& e, int64_t lo, int64_t hi, Fn&& fn) {
  const int64_t lc = e.col_end - e.col_begin;
  for (int64_t i = lo; i < hi;) {
    const int64_t end = lc == e.full_shape.back() ? hi : std::min(hi, (i / lc + 1) * lc);
    fn(i, end - i, full_index(e, i));
    i = end;
  }
}

// Sums of uint64 partials over the world, exact: four 16-bit limbs per value, added as doubles.
void all_reduce_u64(Comm& world, std::vector<uint64_t>& values) {
  std::vector<double> limbs(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i)
    for (int k = 0; k < 4; ++k) limbs[4 * i + size_t(k)] = double((values[i] >> (16 * k)) & 0xffff);
  world.all_reduce_sum(limbs.data(), int(limbs.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t v = 0;
    for (int k = 0; k < 4; ++k) v += uint64_t(limbs[4 * i + size_t(k)]) << (16 * k);
    values[i] = v;
  }
}

std::string header_checksum(const std::string& header) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rt64:%016llx",
                static_cast<unsigned long long>(checksum64(reinterpret_cast<const uint8_t*>(header.data()),
                                                           header.size())));
  return buf;
}

void pwrite_all(int fd, const void* data, size_t bytes, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error("writing '" + path + "' failed: " + (n < 0 ? std::strerror(errno) : "no progress") +
                  " (is the disk full?)");
    p += n, bytes -= size_t(n), offset += uint64_t(n);
  }
}

// Writes this rank's ranges of one file (already created and sized by rank 0) and returns its partial sums,
// one per tensor of the layout.
std::vector<uint64_t> write_ranges(const std::string& path, const Model& model, const FileSpec& spec,
                                   const SafetensorsLayout& layout) {
  const size_t n_params = model.params().size();
  std::map<const ParamEntry*, size_t> index;
  for (size_t i = 0; i < n_params; ++i) index[&model.params()[i]] = i;
  std::vector<uint64_t> sums(layout.tensors.size(), 0);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + path + "' to write this rank's ranges: " + std::strerror(errno));
  std::vector<float> stage;
  try {
    const std::vector<Model::Piece> pieces = model.writer_pieces();
    for (size_t s = 0; s < spec.sources.size(); ++s)
      for (const Model::Piece& p : pieces) {
        const size_t t = s * n_params + index[p.entry];
        const uint64_t base = layout.data_start + layout.tensors[t].begin;
        for (int64_t lo = p.first; lo < p.last; lo += kStageElems) {  // bounded host staging
          const int64_t hi = std::min(p.last, lo + kStageElems);
          stage.resize(size_t(hi - lo));  // (hi - lo) f32
          copy_tensor_to_host(stage.data(), spec.sources[s].slice(p.at + (lo - p.first), p.at + (hi - p.first)));
          for_each_full_run(*p.entry, lo, hi, [&](int64_t i, int64_t count, int64_t full) {
            const float* v = stage.data() + (i - lo);
            pwrite_all(fd, v, size_t(count) * sizeof(float), base + uint64_t(full) * sizeof(float), path);
            sums[t] += tensor_sum_terms(v, count, full);
          });
        }
      }
    if (::fsync(fd) != 0) throw Error("fsync of '" + path + "' failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw Error("closing '" + path + "' failed: " + std::strerror(errno));
  return sums;
}

void create_sized(const std::string& path, const SafetensorsLayout& layout) {
  DurableFileWriter w(path);
  w.write(layout.header.data(), layout.header.size());
  w.commit();
  if (::truncate(path.c_str(), off_t(layout.file_bytes)) != 0)
    throw Error("cannot size '" + path + "' to " + std::to_string(layout.file_bytes) + " bytes: " +
                std::strerror(errno) + " (is the disk full?)");
}

}  // namespace

std::string save_checkpoint_sharded(const std::string& lineage_dir, Model& model, AdamW& optimizer,
                                    const TrainState& state, int keep_last, Comm& world,
                                    const std::map<std::string, std::string>& extra_metadata,
                                    const std::vector<std::string>& keep_always) {
  const bool writer0 = world.rank() == 0;
  if (writer0) begin_checkpoint_save(lineage_dir, state.step);
  world.barrier();
  const fs::path tmp = checkpoint_temp_dir(lineage_dir, state.step);
  const FileSpec specs[2] = {
      {kModelFile, {""}, {model.master()}, model_file_metadata(model.config(), extra_metadata)},
      {kOptimizerFile, {"exp_avg.", "exp_avg_sq."}, {optimizer.m(), optimizer.v()}, optimizer_file_metadata(state.step)}};
  nlohmann::json files = nlohmann::json::object();
  for (const FileSpec& spec : specs) {
    const std::string path = (tmp / spec.file).string();
    const SafetensorsLayout layout = layout_of(model, spec);
    if (writer0) create_sized(path, layout);
    world.barrier();
    std::vector<uint64_t> sums = write_ranges(path, model, spec, layout);
    all_reduce_u64(world, sums);  // also: every rank's ranges are written and fsynced
    nlohmann::json tensor_sums = nlohmann::json::object();
    for (size_t t = 0; t < sums.size(); ++t) tensor_sums[layout.tensors[t].name] = tensor_sum_text(sums[t]);
    files[spec.file] = {{"bytes", layout.file_bytes},
                        {"header_checksum", header_checksum(layout.header)},
                        {"tensor_sums", tensor_sums}};
    if (spec.file == std::string(kModelFile)) crash_in_save_hook(path);
  }
  std::string dir = (fs::path(lineage_dir) / ("step_" + std::to_string(state.step))).string();
  if (writer0) dir = finish_checkpoint_save(lineage_dir, state, files, keep_last, keep_always);
  world.barrier();
  return dir;
}

TrainState load_checkpoint_sharded(const std::string& dir, Model& model, AdamW* optimizer, Comm& world,
                                   std::map<std::string, std::string>* model_metadata) {
  TrainState state;
  const nlohmann::json files = read_checkpoint_state(dir, &state);
  std::vector<FileSpec> specs = {{kModelFile, {""}, {model.master()}, {}}};
  const bool weights_only = !files.contains(kOptimizerFile);  // ringtrain import-hf writes no optimizer state
  if (optimizer && weights_only) optimizer->zero_state();
  if (optimizer && !weights_only)
    specs.push_back({kOptimizerFile, {"exp_avg.", "exp_avg_sq."}, {optimizer->m(), optimizer->v()}, {}});
  const size_t n_params = model.params().size();
  for (const FileSpec& spec : specs) {
    const std::string path = (fs::path(dir) / spec.file).string();
    const nlohmann::json& record = files[spec.file];
    MappedFile file(path);
    std::map<std::string, SafetensorsEntry> by_name;
    std::map<std::string, std::string>* meta = spec.file == std::string(kModelFile) ? model_metadata : nullptr;
    for (const SafetensorsEntry& e : read_safetensors_index(file, meta)) by_name[e.name] = e;
    std::vector<const SafetensorsEntry*> entries;  // per (source, parameter)
    for (const std::string& prefix : spec.prefixes)
      for (const ParamEntry& e : model.params()) {
        auto it = by_name.find(prefix + e.name);
        RT_CHECK(it != by_name.end(), "checkpoint " << path << " has no tensor '" << prefix + e.name
                                                    << "'; it was written for a different model config");
        RT_CHECK(it->second.shape == e.full_shape,
                 "checkpoint tensor '" << prefix + e.name << "' in " << path << " has a different shape than the model "
                                       << "expects; check model.* in the config against the checkpoint's metadata");
        entries.push_back(&it->second);
      }
    auto value_at = [&](size_t t) { return reinterpret_cast<const float*>(file.data() + entries[t]->begin); };
    // Integrity: per-tensor sums, each rank adding its writer pieces (every element once over the world); or,
    // for a file written whole, its recorded checksum (every rank reads the whole file then).
    if (record.contains("tensor_sums")) {
      std::map<const ParamEntry*, size_t> index;
      for (size_t i = 0; i < n_params; ++i) index[&model.params()[i]] = i;
      std::vector<uint64_t> sums(entries.size(), 0);
      for (size_t s = 0; s < spec.sources.size(); ++s)
        for (const Model::Piece& p : model.writer_pieces()) {
          const size_t t = s * n_params + index[p.entry];
          for_each_full_run(*p.entry, p.first, p.last, [&](int64_t, int64_t count, int64_t full) {
            sums[t] += tensor_sum_terms(value_at(t) + full, count, full);
          });
        }
      all_reduce_u64(world, sums);
      std::string bad;
      for (size_t t = 0; t < sums.size() && bad.empty(); ++t) {
        const std::string& name = entries[t]->name;
        if (!record["tensor_sums"].contains(name) || record["tensor_sums"][name].get<std::string>() != tensor_sum_text(sums[t]))
          bad = name;
      }
      RT_CHECK(bad.empty(), "checkpoint '" << dir << "': tensor '" << bad << "' of " << spec.file
                                           << " is corrupted (its sum differs from state.json's); use an earlier "
                                              "checkpoint");
    } else {
      uint64_t bytes = 0;
      const std::string sum = file_checksum(path, &bytes);
      RT_CHECK(sum == record["checksum"].get<std::string>(),
               "checkpoint '" << dir << "': " << spec.file << " is corrupted (checksum " << sum
                              << ", state.json records " << record["checksum"].get<std::string>()
                              << "); use an earlier checkpoint");
    }
    // This rank's ranges into its local buffers, through a bounded host buffer.
    std::map<const ParamEntry*, size_t> index;
    for (size_t i = 0; i < n_params; ++i) index[&model.params()[i]] = i;
    std::vector<float> stage;
    for (size_t s = 0; s < spec.sources.size(); ++s) {
      fill(spec.sources[s], 0.f);  // the alignment gaps stay zero
      for (const Model::Piece& p : model.owned_pieces()) {
        const size_t t = s * n_params + index[p.entry];
        for (int64_t lo = p.first; lo < p.last; lo += kStageElems) {
          const int64_t hi = std::min(p.last, lo + kStageElems);
          stage.resize(size_t(hi - lo));  // (hi - lo) f32
          for_each_full_run(*p.entry, lo, hi, [&](int64_t i, int64_t count, int64_t full) {
            std::memcpy(stage.data() + (i - lo), value_at(t) + full, size_t(count) * sizeof(float));
          });
          copy_host_to_tensor(spec.sources[s].slice(p.at + (lo - p.first), p.at + (hi - p.first)), stage.data());
        }
      }
    }
  }
  model.sync_compute_weights();
  return state;
}

}  // namespace rt
