// For the MPI suites: this process's rank and the size of MPI_COMM_WORLD, whether every rank has a CUDA device
// (the same answer on every rank, so that all ranks skip a GPU test or none does: a skip on one rank only would
// leave the others in a collective), the first ranks as one CPU communicator, and a relative difference.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/device_memory.h"
#include "parallel/comm/mpi_comm.h"

namespace rt::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

inline bool gpu_present() {
  int here = cuda_available() ? 1 : 0, all = 0;
  MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

// The first `size` world ranks as one mpi communicator; null on the others. Collective over the world.
inline std::shared_ptr<Comm> sub_world(int size) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < size ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiComm>(sub, /*owned=*/true);
}

// ||a - ref|| / ||ref|| (a and ref of one size).
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(a[i]) - ref[i];
    num += d * d, den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace rt::test
