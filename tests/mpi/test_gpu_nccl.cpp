// The NCCL path with world size 1 (a ring of one), run under `mpirun -np 1` (labels mpi;gpu) so that the
// bootstrap is the real one: rank 0's ncclGetUniqueId, MPI_Bcast, ncclCommInitRank, the GPU from the local
// rank (MPI_COMM_TYPE_SHARED). Exercises all_reduce (f32, bf16), broadcast, host-scalar sums, split(), the
// ring exchange (one ncclGroup of send + recv to itself on the comm stream, waited on by the compute stream),
// the shared-GPU check, and the parallel.comm selection of the trainer. Skips without a CUDA device.
// Also registered with -np 2: two ranks on one GPU, where nccl must be refused with a message and auto must
// fall back to mpi (the world-size-1 tests skip there, the shared-GPU test skips with one rank).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <vector>

#ifdef RINGTRAIN_HAVE_CUDA
#include "framework/plan/trainer_setup.h"
#include "kernels/arena.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "parallel/comm/cuda/nccl_comm.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/mpi/mpi_world.h"

using namespace rt;

namespace {

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = bf16_to_float(float_to_bf16(normal(rng)));  // exact in bf16 too
  return v;
}
using test::download;  // host f32 <-> device tensors through copy_cast
using test::upload;

#define RT_REQUIRE_CUDA_MPI()                                             \
  do {                                                                    \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";              \
  } while (0)

using rt::test::world_size;

#define RT_REQUIRE_WORLD_OF_ONE()                                                       \
  do {                                                                                  \
    if (world_size() != 1) GTEST_SKIP() << "world-size-1 case (run with mpirun -np 1)"; \
  } while (0)

const std::string kYaml =
    "model:\n  n_layer: 1\n  d_model: 64\n  n_head: 1\n  n_kv_head: 1\n  vocab_size: 32\n  mlp: gelu\n  d_ff: 128\n"
    "data:\n  source: copy\n  seq_len: 64\ntrain:\n  batch_size: 1\n  steps: 100\n";

TEST(GpuNccl, WorldOfOneBootstrapsAndEveryOperationIsTheIdentity) {
  RT_REQUIRE_CUDA_MPI();
  RT_REQUIRE_WORLD_OF_ONE();
  EXPECT_FALSE(ranks_share_gpu(MPI_COMM_WORLD, local_rank_gpu(MPI_COMM_WORLD)));
  std::shared_ptr<Comm> comm = make_nccl_world_comm();
  ASSERT_EQ(comm->name(), "nccl");
  ASSERT_EQ(comm->size(), 1);
  ASSERT_EQ(comm->rank(), 0);
  const Device gpu = Device::cuda(static_cast<NcclComm&>(*comm).device());

  const int64_t n = 3 * 1024 + 5;  // not a multiple of anything NCCL likes
  Arena arena(gpu, size_t(8) << 20);
  Tensor f = arena.alloc(DType::f32, {n}, "f");        // (n) f32
  Tensor h = arena.alloc(DType::bf16, {n}, "h");       // (n) bf16
  Tensor send = arena.alloc(DType::bf16, {2, n}, "s");  // (2, n) a packed K|V-like hop
  Tensor recv = arena.alloc(DType::bf16, {2, n}, "r");  // (2, n)
  const std::vector<float> a = random_values(n, 1), b = random_values(n, 2), c = random_values(2 * n, 3);
  upload(f, a);
  upload(h, b);
  comm->all_reduce_sum(f);
  comm->all_reduce_sum(h);
  EXPECT_EQ(download(f), a) << "all_reduce f32 over one rank must be the identity";
  EXPECT_EQ(download(h), b) << "all_reduce bf16 over one rank must be the identity";
  comm->broadcast(f, 0);
  EXPECT_EQ(download(f), a);

  double scalars[2] = {1.5, -2.0};
  comm->all_reduce_sum(scalars, 2);
  EXPECT_EQ(scalars[0], 1.5);
  EXPECT_EQ(scalars[1], -2.0);

  // A ring of one sends to itself; two hops in flight at once, like K/V and dK/dV in the ring backward.
  upload(send, c);
  fill(recv, std::nanf(""));  // poison
  const ExchangeHandle hop = comm->ring_exchange_start(send, recv);
  comm->wait(hop);
  EXPECT_EQ(download(recv), c) << "a ring of one must deliver the sent bytes";

  // A second exchange right after, reusing the buffers the other way round (double-buffer pattern).
  const std::vector<float> d = random_values(2 * n, 4);
  upload(recv, d);
  const ExchangeHandle back = comm->ring_exchange_start(recv, send);
  comm->wait(back);
  EXPECT_EQ(download(send), d);

  // Sub-communicators (what ProcessGrid builds) work the same.
  std::shared_ptr<Comm> sub = comm->split(0, 0);
  ASSERT_EQ(sub->name(), "nccl");
  ASSERT_EQ(sub->size(), 1);
  upload(h, b);
  sub->all_reduce_sum(h);
  EXPECT_EQ(download(h), b);
  comm->barrier();
}

TEST(GpuNccl, ProcessGridOverNcclWorld) {
  RT_REQUIRE_CUDA_MPI();
  RT_REQUIRE_WORLD_OF_ONE();
  ProcessGrid grid = ProcessGrid::create(make_nccl_world_comm(), GridDims{1, 1, 1});
  EXPECT_EQ(grid.cp().name(), "nccl");
  EXPECT_EQ(grid.tp().name(), "nccl");
  EXPECT_EQ(grid.dp_cp().size(), 1);
}

TEST(GpuNccl, TrainerSelectsNcclOnItsOwnGpuAndMpiWhenAsked) {
  RT_REQUIRE_CUDA_MPI();
  RT_REQUIRE_WORLD_OF_ONE();
  const std::string& yaml = kYaml;
  const Config autoc = parse_config_text(yaml + "device: cuda\nparallel:\n  comm: auto\n", {}, 0, "auto");
  EXPECT_EQ(make_world_comm(autoc)->name(), "nccl") << "auto on a GPU of its own must pick nccl";
  const Config mpic = parse_config_text(yaml + "device: cuda\nparallel:\n  comm: mpi\n", {}, 0, "mpi");
  EXPECT_EQ(make_world_comm(mpic)->name(), "mpi");
  const Config cpuc = parse_config_text(yaml + "device: cpu\nparallel:\n  comm: auto\n", {}, 0, "cpu");
  EXPECT_EQ(make_world_comm(cpuc)->name(), "mpi") << "auto with CPU tensors must pick mpi";
}

// Two (or more) ranks on one GPU: nccl is refused on every rank with the fix, auto falls back to mpi.
TEST(GpuNccl, SharedGpuRefusesNcclAndAutoFallsBackToMpi) {
  RT_REQUIRE_CUDA_MPI();
  if (world_size() < 2 || world_size() <= cuda_device_count())
    GTEST_SKIP() << "needs more ranks than GPUs (run with mpirun -np 2 on one GPU)";
  EXPECT_TRUE(ranks_share_gpu(MPI_COMM_WORLD, local_rank_gpu(MPI_COMM_WORLD)));
  try {
    make_nccl_world_comm();
    ADD_FAILURE() << "make_nccl_world_comm accepted ranks sharing a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("share one GPU"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parallel.comm: mpi"), std::string::npos) << e.what();
  }
  const Config nccl = parse_config_text(kYaml + "device: cuda\nparallel:\n  comm: nccl\n", {}, 0, "nccl");
  EXPECT_THROW(make_world_comm(nccl), Error);
  // The all-to-all (parallel.cp_a2a > 1) is refused the same way, and says so.
  const std::string two_heads =  // head_dim 64, and 2 heads for the all-to-all to split
      "model:\n  n_layer: 1\n  d_model: 128\n  n_head: 2\n  n_kv_head: 1\n  vocab_size: 32\n  mlp: gelu\n  d_ff: 128\n"
      "data:\n  source: copy\n  seq_len: 64\ntrain:\n  batch_size: 1\n  steps: 100\n";
  const Config a2a = parse_config_text(two_heads + "device: cuda\nparallel:\n  comm: nccl\n  cp: 2\n  cp_a2a: 2\n", {},
                                       0, "a2a");
  try {
    make_world_comm(a2a);
    ADD_FAILURE() << "parallel.comm=nccl with cp_a2a=2 was accepted on a shared GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cp_a2a=2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parallel.comm: mpi"), std::string::npos) << e.what();
  }
  const Config autoc = parse_config_text(kYaml + "device: cuda\nparallel:\n  comm: auto\n", {}, 0, "auto");
  EXPECT_EQ(make_world_comm(autoc)->name(), "mpi") << "auto with a shared GPU must pick mpi";
}

}  // namespace

#else  // built without CUDA: nothing to test, say so

TEST(GpuNccl, NeedsCuda) { GTEST_SKIP() << "built without CUDA (no NCCL)"; }

#endif
