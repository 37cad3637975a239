// Per-tensor sums of checkpoint files written range by range (framework/checkpoint/checkpoint_internal.h).
#include <cstdio>
#include <cstring>

#include "framework/checkpoint/checkpoint_internal.h"
#include "framework/base/checkpoint_io.h"
#include "kernels/tensor.h"

namespace rt {

namespace {
inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t tensor_sum_terms(const float* values, int64_t count, int64_t first_index) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    sum += mix64((uint64_t(first_index + i) << 32 | bits) + 0x9e3779b97f4a7c15ull);
  }
  return sum;
}

std::string tensor_sum_text(uint64_t sum) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rts64:%016llx", static_cast<unsigned long long>(sum));
  return buf;
}

void verify_tensor_sums(const std::string& path, const nlohmann::json& record) {
  MappedFile file(path);
  const std::vector<SafetensorsEntry> index = read_safetensors_index(file, nullptr);
  const nlohmann::json& sums = record["tensor_sums"];
  if (record.contains("header_checksum")) {
    const uint64_t header_bytes = index.empty() ? file.size() : index.front().begin;
    char buf[32];
    std::snprintf(buf, sizeof buf, "rt64:%016llx",
                  static_cast<unsigned long long>(checksum64(file.data(), size_t(header_bytes))));
    if (record["header_checksum"].get<std::string>() != buf)
      throw Error("checkpoint file '" + path + "': its header is corrupted (checksum " + buf + ", state.json records " +
                  record["header_checksum"].get<std::string>() + "); use an earlier checkpoint");
  }
  if (sums.size() != index.size())
    throw Error("checkpoint file '" + path + "' holds " + std::to_string(index.size()) + " tensors but state.json "
                "records sums for " + std::to_string(sums.size()) + "; use an earlier checkpoint");
  for (const SafetensorsEntry& e : index) {
    if (!sums.contains(e.name))
      throw Error("checkpoint file '" + path + "': state.json records no sum for tensor '" + e.name + "'");
    const float* values = reinterpret_cast<const float*>(file.data() + e.begin);
    const std::string got = tensor_sum_text(tensor_sum_terms(values, int64_t((e.end - e.begin) / 4), 0));
    if (got != sums[e.name].get<std::string>())
      throw Error("checkpoint file '" + path + "': tensor '" + e.name + "' is corrupted (sum " + got +
                  ", state.json records " + sums[e.name].get<std::string>() + "); use an earlier checkpoint");
  }
}

}  // namespace rt
