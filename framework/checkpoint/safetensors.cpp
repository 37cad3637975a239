// safetensors files: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ..., "__metadata__": {...}},
// padded with spaces to a multiple of 8, then the tensor bytes (little-endian, row-major) back to back.
// Checkpoints are F32; Hugging Face files may also be BF16 or F16 (read_safetensors with accept_half widens
// them to fp32 exactly), and export writes F32 or BF16 (round to nearest even).
#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/checkpoint_internal.h"
#include "framework/checkpoint/model_source.h"
#include "framework/base/checkpoint_io.h"
#include "framework/base/data_files.h"
#include "kernels/tensor.h"

namespace rt {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the Python package's limit as well

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw Error("safetensors file '" + path + "' is corrupted: " + what);
}

}  // namespace

namespace {
uint16_t bf16_round(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return uint16_t((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
float bf16_widen(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}
float f16_widen(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, tensors, metadata, /*bf16=*/false);
}

SafetensorsLayout make_safetensors_layout(const std::vector<std::string>& names,
                                          const std::vector<std::vector<int64_t>>& shapes,
                                          const std::map<std::string, std::string>& metadata, bool bf16) {
  RT_CHECK(names.size() == shapes.size(), "make_safetensors_layout: " << names.size() << " names but " << shapes.size()
                                                                     << " shapes");
  const uint64_t elem = bf16 ? 2 : 4;
  SafetensorsLayout layout;
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    RT_CHECK(!name.empty() && name != "__metadata__", "write_safetensors: invalid tensor name '" << name << "'");
    RT_CHECK(!header.contains(name), "write_safetensors: tensor name '" << name << "' appears twice");
    for (int64_t d : shapes[i]) RT_CHECK(d >= 0, "write_safetensors: tensor '" << name << "' has a negative dim");
    const uint64_t bytes = uint64_t(numel_of(shapes[i])) * elem;
    header[name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", shapes[i]}, {"data_offsets", {offset, offset + bytes}}};
    layout.tensors.push_back({name, shapes[i], offset, offset + bytes, bf16 ? "BF16" : "F32"});
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();
  layout.header.assign(reinterpret_cast<const char*>(&header_len), sizeof header_len);
  layout.header += text;
  layout.data_start = layout.header.size();
  layout.file_bytes = layout.data_start + offset;
  return layout;
}

void write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, bool bf16) {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const HostTensor& t : tensors) {
    RT_CHECK(numel_of(t.shape) == int64_t(t.values.size()),
             "write_safetensors: tensor '" << t.name << "' has " << t.values.size() << " values but its shape holds "
                                           << numel_of(t.shape));
    names.push_back(t.name);
    shapes.push_back(t.shape);
  }
  const SafetensorsLayout layout = make_safetensors_layout(names, shapes, metadata, bf16);
  DurableFileWriter w(path);
  w.write(layout.header.data(), layout.header.size());
  std::vector<uint16_t> half;
  for (const HostTensor& t : tensors) {
    if (!bf16) {
      w.write(t.values.data(), t.values.size() * sizeof(float));
      continue;
    }
    half.resize(t.values.size());
    for (size_t i = 0; i < half.size(); ++i) half[i] = bf16_round(t.values[i]);
    w.write(half.data(), half.size() * sizeof(uint16_t));
  }
  w.commit();
}

std::vector<SafetensorsEntry> read_safetensors_index(const MappedFile& file, std::map<std::string, std::string>* metadata,
                                                     bool accept_half) {
  const std::string& path = file.path();
  const uint64_t size = file.size();
  if (size < 8)
    corrupt(path, "it has " + std::to_string(size) + " bytes, fewer than the 8-byte header length (truncated?)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    corrupt(path, "the header length field says " + std::to_string(header_len) + " bytes but the file has " +
                      std::to_string(size) + " bytes (truncated, or not a safetensors file)");
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_len);
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, std::string("the JSON header does not parse (") + e.what() + ")");
  }
  if (!header.is_object()) corrupt(path, "the JSON header is not an object");
  const uint64_t data_bytes = size - 8 - header_len;

  struct Entry {
    uint64_t begin, end;
    HostTensor tensor;
    uint64_t elem = 4;
    std::string dtype;
  };
  std::vector<Entry> entries;
  if (metadata) metadata->clear();
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) corrupt(path, "__metadata__ is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) corrupt(path, "__metadata__ entry '" + m.key() + "' is not a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      corrupt(path, what + " lacks dtype, shape or data_offsets");
    const std::string dtype = v["dtype"].is_string() ? v["dtype"].get<std::string>() : v["dtype"].dump();
    const bool ok = dtype == "F32" || (accept_half && (dtype == "BF16" || dtype == "F16"));
    if (!ok) {
      if (accept_half)
        throw Error("safetensors file '" + path + "': " + what + " has dtype " + dtype +
                    "; ringtrain reads BF16, F16 and F32 weights (convert the model to one of them)");
      corrupt(path, what + " has dtype " + v["dtype"].dump() + "; ringtrain reads F32 tensors only");
    }
    Entry e;
    e.elem = dtype == "F32" ? 4 : 2;
    e.dtype = dtype;
    e.tensor.name = name;
    if (!v["shape"].is_array()) corrupt(path, what + ": shape is not a list");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) corrupt(path, what + ": shape has a bad dimension");
      e.tensor.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      corrupt(path, what + ": data_offsets is not [begin, end]");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end) corrupt(path, what + ": data_offsets begin > end");
    if (e.end > data_bytes)
      corrupt(path, what + " ends at byte " + std::to_string(e.end) + " of the data but the file holds only " +
                        std::to_string(data_bytes) + " data bytes (truncated)");
    const uint64_t numel = uint64_t(numel_of(e.tensor.shape));
    if (e.end - e.begin != numel * e.elem)
      corrupt(path, what + ": data_offsets span " + std::to_string(e.end - e.begin) + " bytes but shape needs " +
                        std::to_string(numel * e.elem));
    entries.push_back(std::move(e));
  }
  // The tensors must tile the data region exactly, as the Python package also requires.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected)
      corrupt(path, "tensor '" + e.tensor.name + "' starts at byte " + std::to_string(e.begin) + ", expected " +
                        std::to_string(expected) + " (overlapping or gapped data_offsets)");
    expected = e.end;
  }
  if (expected != data_bytes)
    corrupt(path, "the data region has " + std::to_string(data_bytes) + " bytes but the tensors cover " +
                      std::to_string(expected) + " (trailing bytes)");

  std::vector<SafetensorsEntry> out;
  out.reserve(entries.size());
  for (Entry& e : entries)
    out.push_back({e.tensor.name, e.tensor.shape, 8 + header_len + e.begin, 8 + header_len + e.end, e.dtype});
  return out;
}

std::vector<HostTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  return read_safetensors(path, metadata, /*accept_half=*/false, /*header_only=*/false);
}

std::vector<HostTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata,
                                         bool accept_half, bool header_only) {
  MappedFile file(path);
  std::vector<HostTensor> tensors;
  for (const SafetensorsEntry& e : read_safetensors_index(file, metadata, accept_half)) {
    HostTensor t{e.name, e.shape, {}};
    if (header_only) {  // names and shapes only
      tensors.push_back(std::move(t));
      continue;
    }
    const uint64_t elem = e.dtype == "F32" ? 4 : 2;
    const size_t n = size_t((e.end - e.begin) / elem);
    t.values.resize(n);
    const uint8_t* data = file.data() + e.begin;
    if (elem == 4) {
      if (n > 0) std::memcpy(t.values.data(), data, e.end - e.begin);
    } else {
      const bool bf16 = e.dtype == "BF16";
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        t.values[i] = bf16 ? bf16_widen(h) : f16_widen(h);
      }
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

std::map<std::string, std::string> model_metadata(const ModelConfig& m) {
  Config config;  // every model field of the schema, in its canonical text (framework/checkpoint/model_source.h)
  config.model = m;
  return model_fields_as_metadata(config);
}

}  // namespace rt
