// Where the ranks of a multi-rank GPU suite run and which communicator joins them:
//   one GPU per rank (a multi-GPU node, mpirun -np <= GPUs)  -> NCCL on the rank's own GPU (local rank)
//   ranks sharing a GPU (one H200: NCCL refuses that)        -> the mpi communicator (pinned host staging)
// RINGTRAIN_TEST_COMM=nccl demands NCCL (the multi-GPU run, bench/multi_gpu.sh, sets it so that a wrong
// rank count cannot silently turn a multi-GPU run into a host-staged one); =mpi forces the mpi communicator.
// Only for builds with CUDA (tests/mpi/test_gpu_*.cpp).
#pragma once
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/device_memory.h"
#include "parallel/comm/comm.h"
#include "parallel/comm/mpi_comm.h"
#include "tests/mpi/mpi_world.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include "parallel/comm/cuda/nccl_comm.h"
#endif

namespace rt::test {

struct GpuRankPlacement {
  bool nccl = false;  // NCCL between the ranks; else the mpi communicator
  int device = 0;     // this rank's GPU
  std::string error;  // non-empty: the requested communicator is impossible here (the test must fail)
  const char* comm_name() const { return nccl ? "nccl" : "mpi"; }
};

// Collective over MPI_COMM_WORLD; every rank reaches the same choice. Call only when a GPU is present.
inline GpuRankPlacement gpu_rank_placement() {
  GpuRankPlacement p;
#ifdef RINGTRAIN_HAVE_CUDA
  const char* env = std::getenv("RINGTRAIN_TEST_COMM");
  const std::string want = env ? env : "auto";
  p.device = local_rank_gpu(MPI_COMM_WORLD);
  const bool shared = ranks_share_gpu(MPI_COMM_WORLD, p.device);
  if (want == "nccl" && shared)
    p.error = "RINGTRAIN_TEST_COMM=nccl, but ranks share a GPU (" + std::to_string(cuda_device_count()) +
              " visible): run with mpirun -np <= the number of GPUs";
  else if (want != "auto" && want != "nccl" && want != "mpi")
    p.error = "RINGTRAIN_TEST_COMM='" + want + "' must be auto, nccl or mpi";
  p.nccl = !shared && want != "mpi";
#endif
  return p;
}

// The communicator of the ranks in `sub` (taken over: freed here for NCCL, owned by the MpiComm otherwise).
inline std::shared_ptr<Comm> make_test_comm(MPI_Comm sub, const GpuRankPlacement& p) {
#ifdef RINGTRAIN_HAVE_CUDA
  if (p.nccl) {
    auto comm = std::make_shared<NcclComm>(sub, p.device);  // duplicates `sub`
    MPI_Comm_free(&sub);
    return comm;
  }
#endif
  return std::make_shared<MpiComm>(sub, /*owned=*/true);
}

// The first `size` world ranks as one communicator (NCCL or mpi, per `placement`); null on the others.
// Collective over the world.
inline std::shared_ptr<Comm> sub_world(int size, const GpuRankPlacement& placement) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < size ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  if (sub == MPI_COMM_NULL) return nullptr;
  return make_test_comm(sub, placement);
}

}  // namespace rt::test
