// world = dp x cp x tp, tp fastest (DESIGN.md "Core types"). The cp group is ring x a2a (parallel.cp_a2a = u,
// DESIGN.md "All-to-all and the hybrid"): cp_rank = ring_rank * u + a2a_rank, so an all-to-all group is u
// consecutive cp ranks (inside one node's u x tp consecutive world ranks) and the ring of cp / u ranks joins the
// groups' members of equal a2a_rank. u = 1: the a2a group is one rank and the ring is the whole cp group.
#pragma once
#include <memory>

#include "parallel/comm/comm.h"

namespace rt {

struct GridDims {
  int dp = 1, cp = 1, tp = 1;
  int cp_a2a = 1;  // u: divides cp
  int ring() const { return cp / cp_a2a; }
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
  Comm& cp() { return *cp_; }     // the whole context group (ring x a2a)
  Comm& ring() { return *ring_; }  // cp / u ranks of equal a2a_rank: ring attention (the cp group when u = 1)
  Comm& a2a() { return *a2a_; }    // u consecutive cp ranks: the head exchange (a LocalComm when u = 1)
  int ring_rank() const { return cp_rank_ / dims_.cp_a2a; }
  int a2a_rank() const { return cp_rank_ % dims_.cp_a2a; }
  Comm& dp() { return *dp_; }
  Comm& dp_cp() { return *dp_cp_; }  // gradients: ranks with the same tp coordinate

 private:
  GridDims dims_;
  int dp_rank_ = 0, cp_rank_ = 0, tp_rank_ = 0;
  std::shared_ptr<Comm> world_, tp_, cp_, dp_, dp_cp_, ring_, a2a_;
};

}  // namespace rt
