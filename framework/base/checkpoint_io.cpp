// Durable writes (write + fsync), directory fsync, and the checkpoint checksum.
#include "framework/base/checkpoint_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>

#include "framework/base/data_files.h"
#include "framework/base/run_errors.h"
#include "kernels/tensor.h"

namespace rt {

DurableFileWriter::DurableFileWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create '" + path + "': " + std::strerror(errno));
}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t chunk = bytes < (size_t(1) << 30) ? bytes : (size_t(1) << 30);
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error("writing '" + path_ + "' failed: " + (n < 0 ? std::strerror(errno) : "no progress") +
                  " (is the disk full?)");
    p += n;
    bytes -= size_t(n);
  }
}

void DurableFileWriter::commit() {
  if (::fsync(fd_) != 0) throw Error("fsync of '" + path_ + "' failed: " + std::strerror(errno));
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw Error("closing '" + path_ + "' failed: " + std::strerror(errno));
}

void write_file_durably(const std::string& path, const std::string& contents) {
  DurableFileWriter w(path);
  w.write(contents.data(), contents.size());
  w.commit();
}

void fsync_directory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open directory '" + path + "' to fsync it: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) throw Error("fsync of directory '" + path + "' failed: " + std::strerror(err));
}

void write_new_directory(const std::string& final_dir, const std::string& option_hint,
                         const std::function<void(const std::string& tmp_dir)>& fill, bool replace) {
  namespace fs = std::filesystem;
  const fs::path target(final_dir);
  const std::string name = target.filename().string();
  RT_CHECK(!name.empty() && name != "." && name != "..",
           "write_new_directory: '" << final_dir << "' does not name a new directory");
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error("cannot create directory '" + parent.string() + "': " + ec.message() + " (check " + option_hint + ")");
  const fs::path tmp = parent / (".tmp_" + name);
  fs::remove_all(tmp, ec);  // left by a process killed mid-write
  fs::create_directory(tmp, ec);
  if (ec) throw Error("cannot create directory '" + tmp.string() + "': " + ec.message() + " (check " + option_hint + ")");
  try {
    fill(tmp.string());
    fsync_directory(tmp.string());
    const fs::path old = parent / (".replaced_" + name);  // replace: the old directory until the new one is in place
    const bool replacing = replace && fs::is_directory(target, ec);
    if (replacing) {
      fs::remove_all(old, ec);
      fs::rename(target, old, ec);
      if (ec) throw Error("cannot move the old '" + final_dir + "' aside to '" + old.string() + "': " + ec.message());
    }
    fs::rename(tmp, target, ec);
    if (ec) {
      const std::string why = ec.message();
      if (replacing) fs::rename(old, target, ec);  // the old one back
      throw Error("cannot rename '" + tmp.string() + "' to '" + final_dir + "': " + why);
    }
    if (replacing) fs::remove_all(old, ec);
  } catch (const std::exception& e) {
    std::error_code removed;
    fs::remove_all(tmp, removed);
    // An output that cannot be written (a full disk) is a usage error (exit 2), as for every command's --out.
    if (removed)
      throw RunError(kExitUsage, std::string(e.what()) + "; removing the partial output '" + tmp.string() +
                                     "' failed too (" + removed.message() + "): delete it by hand");
    throw RunError(kExitUsage, std::string(e.what()) + "; the partial output was removed, nothing was written to '" +
                                   final_dir + "'");
  }
  fsync_directory(parent.string());
}

namespace {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t lane_step(uint64_t lane, uint64_t word) { return rotl(lane + word * kP2, 31) * kP1; }
}  // namespace

uint64_t checksum64(const uint8_t* data, size_t bytes) {
  uint64_t lanes[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, data + i + 8 * size_t(l), 8);
      lanes[l] = lane_step(lanes[l], w);
    }
  }
  uint64_t h = rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18);
  h ^= uint64_t(bytes) * kP3;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = rotl(h ^ lane_step(0, w), 27) * kP1 + kP3;
  }
  for (; i < bytes; ++i) h = rotl(h ^ (uint64_t(data[i]) * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string file_checksum(const std::string& path, uint64_t* bytes) {
  MappedFile file(path);
  if (bytes) *bytes = file.size();
  char buf[32];
  std::snprintf(buf, sizeof buf, "rt64:%016llx",
                static_cast<unsigned long long>(checksum64(file.data(), size_t(file.size()))));
  return buf;
}

}  // namespace rt
