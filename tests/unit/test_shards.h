// llm.c token shards for tests: the uint16 format (a 256-int32 header: magic 20240520, version 1, token count; then
// the tokens), and a packed-documents stream shared by the grid tests.
#pragma once
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace rt::test {

// Writes `tokens` (N) as one uint16 llm.c shard at `path`; returns the path.
inline std::string write_llmc_shard_u16(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);  // (256) magic, version, token count, zeros
  header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  if (!out) throw std::runtime_error("test shard '" + path + "' could not be written");
  return path;
}

// Packed documents of 1..23 tokens (after the EOT 0 that starts each), tokens 1..23, at least `min_tokens` long.
inline std::vector<uint16_t> packed_document_tokens(size_t min_tokens) {
  std::vector<uint16_t> tokens;  // (>= min_tokens)
  for (int d = 0; tokens.size() < min_tokens; ++d) {
    tokens.push_back(0);
    for (int t = 0; t < 1 + (d * 7) % 23; ++t) tokens.push_back(uint16_t(1 + (d * 5 + t * 3) % 23));
  }
  return tokens;
}

}  // namespace rt::test
