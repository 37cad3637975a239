// `ringtrain plan`'s memory limits through the real binary (issue 31, row 7; each case failed before):
//   - CPU ranks share the host: each is judged against --host-memory-gib (or this host's) over the ranks per node,
//     not against the whole host each (configs/tiny.yaml's 2 ranks used to "fit" 2 x the host);
//   - --host-memory-gib and --ranks-per-node are obeyed on the CPU (they were ignored);
//   - the plan says which device it is for and how to plan the other; --device-memory-gib on a CPU plan is refused
//     with that fix, and a GPU plan takes it;
//   - a large memory figure is printed in TiB, not as a 31-digit number of GiB;
//   - parallel.cp_scheme: auto with documents takes the ring where only the ring fits (framework/plan/
//     cp_scheme_memory.h).
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
    return plan_json_of("$BIN plan configs/tiny.yaml --set device=cpu " + args);
  }
  // The JSON object of a whole `ringtrain plan` command line (--json added).
  nlohmann::json plan_json_of(const std::string& command) {
    const ProcessResult r = bash(command + " --json");
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

// parallel.cp_scheme: auto with documents allocates the gather scheme's buffers; where only the ring fits the
// limit, the plan (as the trainer) takes the ring and says so; an explicit scheme is never changed, and where
// nothing fits the plan says DOES NOT FIT as before. README.md's lines are the documents (byte-level, eot 10).
TEST_F(PlanLimits, AutoSchemeTakesTheRingWhereOnlyTheRingFits) {
  const std::string docs =
      "$BIN plan configs/tiny.yaml --set device=cpu --set data.source=bytes --set data.path=README.md "
      "--set data.documents=eot --set data.eot_token=10 --set model.vocab_size=256 --set data.seq_len=1024 "
      "--set parallel.cp=4 --ranks-per-node 4 ";
  nlohmann::json roomy = plan_json_of(docs + "--host-memory-gib 8");
  ASSERT_EQ(roomy["cp_scheme"], "auto") << roomy.dump();
  nlohmann::json ring = plan_json_of(docs + "--host-memory-gib 8 --set parallel.cp_scheme=ring");
  const double with_gather = roomy["total_bytes_per_rank"].get<double>();
  const double ring_bytes = ring["total_bytes_per_rank"].get<double>();
  ASSERT_GT(with_gather, ring_bytes * 1.05) << "the gather's buffers must show\n" << roomy.dump() << ring.dump();
  // 4 ranks per node: a host of 4 x the midpoint leaves each rank between the two needs.
  const std::string between = std::to_string(4 * (with_gather + ring_bytes) / 2 / kGiB);
  nlohmann::json tight = plan_json_of(docs + "--host-memory-gib " + between);
  EXPECT_EQ(tight["cp_scheme"], "ring") << tight.dump();
  EXPECT_TRUE(tight["fits"].get<bool>()) << tight.dump();
  ProcessResult r = bash(docs + "--host-memory-gib " + between);
  EXPECT_NE(r.output.find("parallel.cp_scheme: auto runs the ring only"), std::string::npos) << r.output;
  // Explicit gather: kept, and it does not fit.
  nlohmann::json gather = plan_json_of(docs + "--host-memory-gib " + between + " --set parallel.cp_scheme=gather");
  EXPECT_EQ(gather["cp_scheme"], "gather") << gather.dump();
  EXPECT_FALSE(gather["fits"].get<bool>()) << gather.dump();
  // Nothing fits: auto stays, and the plan says so.
  const std::string small = std::to_string(4 * ring_bytes / 2 / kGiB);
  nlohmann::json none = plan_json_of(docs + "--host-memory-gib " + small);
  EXPECT_EQ(none["cp_scheme"], "auto") << none.dump();
  EXPECT_FALSE(none["fits"].get<bool>()) << none.dump();
}
