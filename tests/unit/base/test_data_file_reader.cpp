// DataFileReader (framework/base/data_files.h): the loader's reads of a data file that is cut or rewritten
// under a running job end in a RunError (exit 2) naming the file and the byte offset, never SIGBUS; reads of an
// unchanged file return its bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "framework/base/data_files.h"
#include "framework/base/run_errors.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

std::string make_file(const std::string& name, size_t bytes) {
  const std::string path = (fs::temp_directory_path() / (name + std::to_string(::getpid()))).string();
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < bytes; ++i) out.put(char(i * 7 % 251));
  return path;
}

TEST(DataFileReader, ReadsTheBytesAtAnOffset) {
  const std::string path = make_file("rt_reader_ok_", 10000);
  DataFileReader reader(path);
  EXPECT_EQ(reader.size(), 10000u);
  std::vector<uint8_t> got(100, 0xAA);  // (100) poisoned before the read
  reader.read(5000, got.size(), got.data());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], uint8_t((5000 + i) * 7 % 251)) << i;
  fs::remove(path);
}

TEST(DataFileReader, AFileCutUnderTheJobIsAnErrorNamingItAndTheOffset) {
  const std::string path = make_file("rt_reader_cut_", 10000);
  DataFileReader reader(path);
  fs::resize_file(path, 1000);
  std::vector<uint8_t> got(100);
  try {
    reader.read(5000, got.size(), got.data());
    ADD_FAILURE() << "a read past the cut succeeded";
  } catch (const RunError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), kExitUsage);
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("byte offset 5000"), std::string::npos) << m;
    EXPECT_NE(m.find("now has 1000 bytes"), std::string::npos) << m;
  }
  fs::remove(path);
}

TEST(DataFileReader, AFileRewrittenInPlaceIsAnErrorToo) {
  const std::string path = make_file("rt_reader_rewritten_", 4096);
  DataFileReader reader(path);
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(5));  // same size, other contents
  std::vector<uint8_t> got(16);
  EXPECT_THROW(reader.read(0, got.size(), got.data()), RunError);
  fs::remove(path);
}

}  // namespace
}  // namespace rt
