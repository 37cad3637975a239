// Which GPU a rank uses, whether ranks share one, and the NCCL world communicator (nccl_comm.h).
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_api.h"
#include "kernels/device_memory.h"
#include "parallel/comm/cuda/nccl_comm.h"

namespace rt {

namespace {
// The ranks of `world` on this node.
MPI_Comm node_comm(MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  RT_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS,
           "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed: cannot find the ranks of this node");
  return node;
}
}  // namespace

int local_rank_gpu(MPI_Comm world) {
  MPI_Comm node = node_comm(world);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  const int count = cuda_device_count();
  RT_CHECK(count > 0, "no CUDA device is visible to this rank; use device: cpu");
  return local % count;
}

bool ranks_share_gpu(MPI_Comm world, int device) {
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  char mine[16];
  std::memcpy(mine, &props.uuid, sizeof(mine));  // (16) the physical GPU's UUID
  MPI_Comm node = node_comm(world);
  int local_size = 1;
  MPI_Comm_size(node, &local_size);
  std::vector<char> all(size_t(local_size) * 16);  // (local_size, 16)
  MPI_Allgather(mine, 16, MPI_BYTE, all.data(), 16, MPI_BYTE, node);
  MPI_Comm_free(&node);
  std::vector<std::string> ids;
  for (int r = 0; r < local_size; ++r) ids.emplace_back(all.data() + size_t(r) * 16, 16);
  std::sort(ids.begin(), ids.end());
  int shared = std::adjacent_find(ids.begin(), ids.end()) != ids.end() ? 1 : 0;
  int any = 0;  // every rank of the world reaches the same answer
  MPI_Allreduce(&shared, &any, 1, MPI_INT, MPI_MAX, world);
  return any != 0;
}

std::shared_ptr<Comm> make_nccl_world_comm(NcclOptions options) {
  const int device = local_rank_gpu(MPI_COMM_WORLD);
  RT_CHECK(!ranks_share_gpu(MPI_COMM_WORLD, device),
           "parallel.comm=nccl, but several ranks of this node share one GPU (" << cuda_device_count()
               << " visible); NCCL refuses that (\"Duplicate GPU detected\"). Use parallel.comm: mpi (or auto), "
                  "which stages through pinned host memory, or launch one rank per GPU");
  return std::make_shared<NcclComm>(MPI_COMM_WORLD, device, options);
}

}  // namespace rt
