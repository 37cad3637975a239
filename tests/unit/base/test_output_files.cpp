// The one rule for a command's outputs (framework/base/output_files.h): an existing file is refused unless
// --overwrite (named in the refusal), a directory always, a missing parent directory; outputs go to temporaries
// that are renamed together by commit(), and an error before it leaves none of them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "framework/base/output_files.h"
#include "framework/base/run_errors.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

class OutputFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rt_output_files_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  size_t entries() const { return size_t(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }
  static std::string read(const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::path dir_;
};

TEST_F(OutputFilesTest, RefusesWhatCannotBeWrittenNamingTheCauseAndTheFix) {
  std::ofstream(path("old.json")) << "keep";
  const std::string existing = output_file_problem("generate", "--out", path("old.json"), false);
  EXPECT_NE(existing.find("already exists"), std::string::npos) << existing;
  EXPECT_NE(existing.find(kOverwriteFlag), std::string::npos) << existing;
  EXPECT_EQ(output_file_problem("generate", "--out", path("old.json"), true), "");
  const std::string directory = output_file_problem("generate", "--out", dir_.string(), true);
  EXPECT_NE(directory.find("is a directory"), std::string::npos) << directory;
  const std::string missing = output_file_problem("eval", "--out", path("no/such/x.jsonl"), false);
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  EXPECT_EQ(output_file_problem("eval", "--out", path("new.jsonl"), false), "");
  try {
    check_output_file("eval", "--dump-logits", path("old.json"), false);
    ADD_FAILURE() << "an existing file was accepted";
  } catch (const RunError& e) {
    EXPECT_EQ(e.code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("eval --dump-logits"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(path("old.json")), "keep");
}

TEST_F(OutputFilesTest, CommitRenamesEveryOutputTogether) {
  std::ofstream(path("b.csv")) << "old";
  {
    OutputFiles outputs("eval");
    outputs.write_text("--out", path("a.jsonl"), "A");
    outputs.write_text("--out", path("b.csv"), "B");
    EXPECT_FALSE(fs::exists(path("a.jsonl")));
    EXPECT_EQ(read(path("b.csv")), "old");
    outputs.commit();
  }
  EXPECT_EQ(read(path("a.jsonl")), "A");
  EXPECT_EQ(read(path("b.csv")), "B");
  EXPECT_EQ(entries(), 2u) << "a temporary was left";
}

TEST_F(OutputFilesTest, AnErrorBeforeCommitLeavesNoneOfTheOutputs) {
  try {
    OutputFiles outputs("eval");
    outputs.write_text("--out", path("a.jsonl"), "A");  // written first, then the second output fails
    throw Error("the eval failed");
  } catch (const Error&) {
  }
  EXPECT_EQ(entries(), 0u) << "a temporary or an output was left";
}

}  // namespace
}  // namespace rt
