// Ring attention on CUDA tensors against an fp64 single-sequence reference after un-permuting: O, LSE, dQ,
// dK, dV for cp in {1, 2, 4, 8} (up to the world size), zigzag causal and contiguous non-causal, GQA, head_dim
// 64 and 128. cp = 1 is the single-GPU result the ring is held to.
//   one H200:     `mpirun -np 4` (ctest, labels mpi;gpu): the ranks share the GPU through the mpi communicator
//   a GPU node:   `mpirun -np <GPUs>` with RINGTRAIN_TEST_COMM=nccl (bench/multi_gpu.sh): NCCL, one GPU per rank
// (tests/mpi/gpu_rank_placement.h). Skips without a CUDA device.
//
// Tolerances: inputs are bf16-rounded so the reference sees what the GPU sees; O, dQ, dK, dV come back in
// bf16 (relative rounding 2^-9 = 2e-3 per element), state and LSE are f32. Measured on cp = 1 ~3e-3.
//   every quantity, every cp:  ||got - ref|| / ||ref|| <= 1.5e-2
//   the ring adds no error:   err(cp) <= 1.5 * err(cp = 1) + 2e-3   (the single-rank GPU result)
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "kernels/device_memory.h"
#include "parallel/cp/ring_attention.h"
#include "tests/mpi/gpu_rank_placement.h"
#include "tests/mpi/mpi_world.h"
#include "tests/mpi/ring_attention_harness.h"

using namespace rt;

namespace {

constexpr double kTolerance = 1.5e-2;
constexpr double kGrowth = 1.5, kSlack = 2e-3;

// B = 1, T = 256 (divisible by 2*cp for cp <= 8), H = 4, Hkv = 2; inputs bf16-rounded.
test::AttentionProblem make_problem(uint64_t seed, int64_t head_dim) {
  return test::make_attention_problem(seed, 1, 256, 4, 2, head_dim, /*round_to_bf16=*/true);
}

using rt::test::gpu_present;

}  // namespace

class GpuRingAttention : public ::testing::TestWithParam<std::tuple<Layout, bool, int>> {};

TEST_P(GpuRingAttention, RingOfGpuRanksMatchesSingleGpuAndReference) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const auto [layout, causal, head_dim] = GetParam();
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_GE(world, 2) << "run with mpirun -np 4 (one GPU) or -np <GPUs>";
  const test::GpuRankPlacement placement = test::gpu_rank_placement();
  ASSERT_TRUE(placement.error.empty()) << placement.error;
  // bf16 tensors (LSE f32) on this rank's GPU; NCCL between GPUs, else the mpi communicator.
  const test::RingTensors on_gpu{Device::cuda(placement.device), DType::bf16, size_t(64) << 20,
                                 [&](MPI_Comm sub) { return test::make_test_comm(sub, placement); }};
  const test::AttentionProblem p = make_problem(causal ? 17 : 23, head_dim);
  const test::AttentionReference ref = test::attention_reference(p, causal);
  test::RelErrors base{};
  for (int cp : {1, 2, 4, 8}) {
    if (cp > world) break;
    double bad = 0;
    const test::RelErrors rel =
        test::run_ring(p, ref, cp, cp == 1 ? Layout::contiguous : layout, causal, on_gpu, &bad);
    if (cp == 1) base = rel;
    EXPECT_EQ(bad, 0) << "non-finite outputs with cp=" << cp;
    for (int i = 0; i < test::kNumQuantities; ++i) {
      const char* name = test::kQuantityNames[i];
      EXPECT_LE(rel[size_t(i)], kTolerance) << name << " cp=" << cp;
      EXPECT_LE(rel[size_t(i)], kGrowth * base[size_t(i)] + kSlack)
          << name << " cp=" << cp << ": the ring adds error over the single-rank GPU result " << base[size_t(i)];
    }
    if (rank == 0)
      std::printf("[ %s causal=%d D=%d cp=%d comm=%s ] rel err O %.1e LSE %.1e dQ %.1e dK %.1e dV %.1e\n",
                  layout_name(layout), int(causal), head_dim, cp, cp == 1 ? "-" : placement.comm_name(), rel[0],
                  rel[1], rel[2], rel[3], rel[4]);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuRingAttention,
                         ::testing::Values(std::make_tuple(Layout::zigzag, true, 64),
                                           std::make_tuple(Layout::contiguous, false, 64),
                                           std::make_tuple(Layout::zigzag, true, 128),
                                           std::make_tuple(Layout::contiguous, true, 128)),
                         [](const auto& info) {
                           return std::string(layout_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_causal" : "_full") + "_d" +
                                  std::to_string(std::get<2>(info.param));
                         });
