// Ring attention on CUDA tensors, as several ranks sharing the one GPU through the mpi communicator (pinned
// host staging), against an fp64 single-sequence reference after un-permuting: O, LSE, dQ, dK, dV for
// cp in {1, 2, 4}, zigzag causal and contiguous non-causal, GQA, head_dim 64.
// Runs under `mpirun -np 4` (ctest labels mpi;gpu); skips without a CUDA device.
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
#include "parallel/ring_attention.h"
#include "tests/mpi/ring_attention_harness.h"

using namespace rt;

namespace {

constexpr double kTolerance = 1.5e-2;
constexpr double kGrowth = 1.5, kSlack = 2e-3;

// B = 1, T = 256 (divisible by 2*cp for cp = 1, 2, 4), H = 4, Hkv = 2, D = 64; inputs bf16-rounded.
test::AttentionProblem make_problem(uint64_t seed) {
  return test::make_attention_problem(seed, 1, 256, 4, 2, 64, /*round_to_bf16=*/true);
}
// The ring runs on bf16 CUDA tensors (LSE f32) of device 0, shared by every rank.
const test::RingTensors kOnGpu{Device::cuda(0), DType::bf16, size_t(64) << 20};

bool gpu_present() {
  // Every rank must take the same branch (a skip on one rank only would leave the others in a collective).
  int here = cuda_available() ? 1 : 0, all = 0;
  MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

}  // namespace

class GpuRingAttention : public ::testing::TestWithParam<std::tuple<Layout, bool>> {};

TEST_P(GpuRingAttention, SharedGpuRanksMatchSingleRankGpuAndReference) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const auto [layout, causal] = GetParam();
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_GE(world, 4) << "run with mpirun -np 4";
  const test::AttentionProblem p = make_problem(causal ? 17 : 23);
  const test::AttentionReference ref = test::attention_reference(p, causal);
  test::RelErrors base{};
  for (int cp : {1, 2, 4}) {
    double bad = 0;
    const test::RelErrors rel =
        test::run_ring(p, ref, cp, cp == 1 ? Layout::contiguous : layout, causal, kOnGpu, &bad);
    if (cp == 1) base = rel;
    EXPECT_EQ(bad, 0) << "non-finite outputs with cp=" << cp;
    for (int i = 0; i < test::kNumQuantities; ++i) {
      const char* name = test::kQuantityNames[i];
      EXPECT_LE(rel[size_t(i)], kTolerance) << name << " cp=" << cp;
      EXPECT_LE(rel[size_t(i)], kGrowth * base[size_t(i)] + kSlack)
          << name << " cp=" << cp << ": the ring adds error over the single-rank GPU result " << base[size_t(i)];
    }
    if (rank == 0)
      std::printf("[ %s causal=%d cp=%d ] rel err O %.1e LSE %.1e dQ %.1e dK %.1e dV %.1e\n", layout_name(layout),
                  int(causal), cp, rel[0], rel[1], rel[2], rel[3], rel[4]);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuRingAttention,
                         ::testing::Values(std::make_tuple(Layout::zigzag, true),
                                           std::make_tuple(Layout::contiguous, false)),
                         [](const auto& info) {
                           return std::string(layout_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_causal" : "_full");
                         });
