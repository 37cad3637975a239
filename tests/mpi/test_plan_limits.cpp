// `ringtrain plan`'s memory limits through the real binary (issue 31, row 7; each case failed before):
//   - CPU ranks share the host: each is judged against --host-memory-gib (or this host's) over the ranks per node,
//     not against the whole host each (configs/tiny.yaml's 2 ranks used to "fit" 2 x the host);
//   - --host-memory-gib and --ranks-per-node are obeyed on the CPU (they were ignored);
//   - the plan says which device it is for and how to plan the other; --device-memory-gib on a CPU plan is refused
//     with that fix, and a GPU plan takes it;
//   - a large memory figure is printed in TiB, not as a 31-digit number of GiB.
#include <nlohmann/json.hpp>
#include <regex>

#include "kernels/device_memory.h"
#include "tests/mpi/run_job_util.h"

namespace {

using rt::test::ProcessResult;

constexpr double kGiB = 1024.0 * 1024 * 1024;

class PlanLimits : public rt::test::RunJobTest {
 protected:
  // `ringtrain plan configs/tiny.yaml --json <args>` (device: cpu, so that a GPU machine plans the same).
  nlohmann::json plan_json(const std::string& args) {
    const ProcessResult r = bash("$BIN plan configs/tiny.yaml --json --set device=cpu " + args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t open = r.output.find('{');
    if (open == std::string::npos) {
      ADD_FAILURE() << "no JSON in\n" << r.output;
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(r.output.substr(open, r.output.find('\n', open) - open));
  }
};

TEST_F(PlanLimits, CpuRanksShareTheHostGivenOrMeasured) {
  nlohmann::json j = plan_json("--host-memory-gib 8");
  EXPECT_EQ(j["ranks_per_node"], 2) << j.dump();
  EXPECT_DOUBLE_EQ(j["host_bytes"].get<double>(), 8 * kGiB) << j.dump();
  EXPECT_DOUBLE_EQ(j["rank_limit_bytes"].get<double>(), 4 * kGiB) << "each of 2 ranks gets half the host\n"
                                                                   << j.dump();
  EXPECT_DOUBLE_EQ(j["device_bytes"].get<double>(), 8 * kGiB) << "CPU ranks' device is the host\n" << j.dump();
  j = plan_json("--host-memory-gib 8 --ranks-per-node 4");
  EXPECT_DOUBLE_EQ(j["rank_limit_bytes"].get<double>(), 2 * kGiB) << j.dump();
  // This host's memory, halved: never the whole host per rank.
  j = plan_json("");
  EXPECT_DOUBLE_EQ(j["rank_limit_bytes"].get<double>() * 2, j["host_bytes"].get<double>()) << j.dump();

  // tiny's arena is ~8.4 MiB per rank: 10 MiB of host fits one rank, not two.
  j = plan_json("--host-memory-gib 0.01 --ranks-per-node 1");
  EXPECT_TRUE(j["fits"].get<bool>()) << j.dump();
  j = plan_json("--host-memory-gib 0.01");
  EXPECT_FALSE(j["fits"].get<bool>()) << "2 ranks x ~8.4 MiB on a 10 MiB host\n" << j.dump();
  const ProcessResult r = bash("$BIN plan configs/tiny.yaml --set device=cpu --host-memory-gib 0.01");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("DOES NOT FIT"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("over 2 rank(s) per node"), std::string::npos) << r.output;
}

TEST_F(PlanLimits, ThePlanSaysWhichDeviceItIsForAndHowToPlanTheOther) {
  if (!rt::cuda_available()) {  // device: auto on a machine without a GPU: the CPU, said so with the fix
    const ProcessResult r = bash("$BIN plan configs/tiny.yaml");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("device: auto and no GPU is visible here, so this plans CPU ranks"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("--set device=cuda plans GPUs"), std::string::npos) << r.output;
  }
  ProcessResult r = bash("$BIN plan configs/tiny.yaml --set device=cpu --device-memory-gib 139");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device-memory-gib 139 is a GPU's memory, but this plan is for CPU ranks"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("add --set device=cuda"), std::string::npos) << r.output;
  // The fix works in a build with CUDA: a GPU plan (no GPU needed) judged against the given memory.
  if (bash("$BIN version").output.find("cuda backend: yes") == std::string::npos) return;
  r = bash("$BIN plan configs/tiny.yaml --json --set device=cuda --device-memory-gib 139");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["device"], "cuda") << j.dump();
  EXPECT_DOUBLE_EQ(j["device_bytes"].get<double>(), 139 * kGiB) << j.dump();
  EXPECT_NE(j["device_note"].get<std::string>().find("--set device=cpu"), std::string::npos) << j.dump();
}

TEST_F(PlanLimits, LargeMemoryIsPrintedInTiBAndAbsurdValuesAreRefused) {
  ProcessResult r = bash("$BIN plan configs/tiny.yaml --set device=cpu --host-memory-gib 1048576");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[of 512.00 TiB per rank, 1024.00 TiB per node: fits]"), std::string::npos) << r.output;
  EXPECT_FALSE(std::regex_search(r.output, std::regex("[0-9]{10}"))) << "an unreadable number\n" << r.output;
  r = bash("$BIN plan configs/tiny.yaml --set device=cpu --host-memory-gib 1e30");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--host-memory-gib: '1e30' must be a number of GiB above 0 and at most 1048576"),
            std::string::npos) << r.output;
}

}  // namespace
