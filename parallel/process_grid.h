// world = dp x cp x tp, tp fastest (DESIGN.md "Core types"). A cp ring is made of ranks with equal dp
// and tp coordinates.
#pragma once
#include <memory>

#include "parallel/comm.h"

namespace rt {

struct GridDims {
  int dp = 1, cp = 1, tp = 1;
  int world() const { return dp * cp * tp; }
};

class ProcessGrid {
 public:
  // Single process: every communicator is a LocalComm. Requires dims.world() == 1.
  static ProcessGrid local();
  // Builds from an existing world communicator (MPI or NCCL). Throws rt::Error if the world size is not
  // dp*cp*tp, naming both numbers.
  static ProcessGrid create(std::shared_ptr<Comm> world, GridDims dims);

  GridDims dims() const { return dims_; }
  int dp_rank() const { return dp_rank_; }
  int cp_rank() const { return cp_rank_; }
  int tp_rank() const { return tp_rank_; }
  Comm& world() { return *world_; }
  Comm& tp() { return *tp_; }
  Comm& cp() { return *cp_; }
  Comm& dp() { return *dp_; }
  Comm& dp_cp() { return *dp_cp_; }  // gradients: ranks with the same tp coordinate

 private:
  GridDims dims_;
  int dp_rank_ = 0, cp_rank_ = 0, tp_rank_ = 0;
  std::shared_ptr<Comm> world_, tp_, cp_, dp_, dp_cp_;
};

}  // namespace rt
