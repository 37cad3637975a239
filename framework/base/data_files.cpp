// Globs, memory maps and llm.c shard headers.
#include "framework/base/data_files.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "framework/base/run_errors.h"
#include "kernels/tensor.h"

namespace rt {

std::vector<std::string> expand_data_paths(const std::string& pattern) {
  std::vector<std::string> files;
  if (pattern.empty()) return files;
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      struct stat st{};
      if (::stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) files.emplace_back(g.gl_pathv[i]);
    }
  ::globfree(&g);
  std::sort(files.begin(), files.end());
  return files;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open data file '" + path + "': " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error("cannot stat data file '" + path + "': " + std::strerror(err));
  }
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error("cannot map data file '" + path + "': " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

}  // namespace

DataFileReader::DataFileReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw RunError(kExitUsage, "cannot open data file '" + path + "': " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw RunError(kExitUsage, "cannot stat data file '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw RunError(kExitUsage, "data file '" + path + "' is not a regular file (a directory?); give a file");
  }
  size_ = uint64_t(st.st_size);
  mtime_ns_ = mtime_ns(st);
}

DataFileReader::~DataFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void DataFileReader::changed(uint64_t offset, uint64_t bytes, const std::string& what) const {
  throw RunError(kExitUsage, "data file '" + path_ + "' changed under the running job: reading " +
                                 std::to_string(bytes) + " bytes at byte offset " + std::to_string(offset) + ", " +
                                 what + "; it had " + std::to_string(size_) + " bytes when the run opened it. Put "
                                 "the file back as it was (or re-create the data and start over); the last "
                                 "checkpoint is intact: --set checkpoint.resume=auto continues from it");
}

void DataFileReader::read(uint64_t offset, uint64_t bytes, void* dst) const {
  struct stat st{};
  if (::fstat(fd_, &st) != 0) changed(offset, bytes, std::string("fstat failed: ") + std::strerror(errno));
  if (uint64_t(st.st_size) != size_)
    changed(offset, bytes, "the file now has " + std::to_string(uint64_t(st.st_size)) + " bytes");
  if (mtime_ns(st) != mtime_ns_) changed(offset, bytes, "the file was modified (its mtime differs)");
  if (offset > size_ || bytes > size_ - offset)
    throw Error("data file '" + path_ + "': a read of " + std::to_string(bytes) + " bytes at byte offset " +
                std::to_string(offset) + " is past its " + std::to_string(size_) + " bytes");
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd_, out + done, size_t(bytes - done), off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) changed(offset + done, bytes - done, std::string("the read failed: ") + std::strerror(errno));
    if (got == 0) changed(offset + done, bytes - done, "the file ends there now");
    done += uint64_t(got);
  }
}

uint64_t read_shard_header(const std::string& path, int* token_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("shard '" + path + "' cannot be opened: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const uint64_t file_bytes = uint64_t(in.tellg());
  in.seekg(0);
  if (file_bytes < kShardHeaderBytes)
    throw Error("shard '" + path + "' is truncated: " + std::to_string(file_bytes) +
                " bytes, smaller than the 1024-byte llm.c header (256 int32); re-create the shard");
  int32_t header[256];
  in.read(reinterpret_cast<char*>(header), kShardHeaderBytes);
  if (!in) throw Error("shard '" + path + "': reading the header failed");
  const std::string formats = "llm.c shards are (magic 20240520, version 1, uint16 tokens) or (magic 20240801, "
                              "version 7, uint32 tokens)";
  if (header[0] != kShardMagic && header[0] != kShardMagicU32)
    throw Error("shard '" + path + "': header field 'magic' is " + std::to_string(header[0]) + "; " + formats +
                "; is data.source right for this file?");
  const bool u32 = header[0] == kShardMagicU32;
  const int32_t want_version = u32 ? kShardVersionU32 : kShardVersion;
  if (header[1] != want_version)
    throw Error("shard '" + path + "': header field 'version' is " + std::to_string(header[1]) + " with magic " +
                std::to_string(header[0]) + ", expected " + std::to_string(want_version) + "; " + formats);
  if (header[2] < 0)
    throw Error("shard '" + path + "': header field 'token count' is negative (" + std::to_string(header[2]) +
                "); the header is corrupted");
  const uint64_t bytes_per_token = u32 ? 4 : 2;
  if (token_bytes) *token_bytes = int(bytes_per_token);
  const uint64_t count = uint64_t(uint32_t(header[2]));
  const uint64_t expected = kShardHeaderBytes + count * bytes_per_token;
  if (file_bytes < expected)
    throw Error("shard '" + path + "' is truncated: header field 'token count' says " + std::to_string(count) +
                " tokens (" + std::to_string(expected) + " bytes with the header) but the file has " +
                std::to_string(file_bytes) + " bytes; re-create or re-download it");
  if (file_bytes > expected)
    throw Error("shard '" + path + "': file has " + std::to_string(file_bytes - expected) +
                " bytes after the " + std::to_string(count) + " tokens its header field 'token count' declares; "
                "the header or the file is corrupted");
  if (count == 0) throw Error("shard '" + path + "' holds no tokens (header field 'token count' is 0)");
  return count;
}

int copy_span_resolved(int seq_len, int copy_span) { return copy_span > 0 ? copy_span : (seq_len - 1) / 2; }

}  // namespace rt
