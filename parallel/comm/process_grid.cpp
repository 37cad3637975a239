#include "parallel/comm/process_grid.h"

namespace rt {

ProcessGrid ProcessGrid::local() {
  ProcessGrid g;
  g.world_ = std::make_shared<LocalComm>();
  g.tp_ = std::make_shared<LocalComm>();
  g.cp_ = std::make_shared<LocalComm>();
  g.dp_ = std::make_shared<LocalComm>();
  g.dp_cp_ = std::make_shared<LocalComm>();
  g.ring_ = g.cp_;
  g.a2a_ = std::make_shared<LocalComm>();
  return g;
}

ProcessGrid ProcessGrid::create(std::shared_ptr<Comm> world, GridDims dims) {
  RT_CHECK(world, "ProcessGrid::create: no world communicator given");
  RT_CHECK(dims.dp >= 1 && dims.cp >= 1 && dims.tp >= 1,
           "parallel sizes must be at least 1, got dp=" << dims.dp << " cp=" << dims.cp << " tp=" << dims.tp);
  RT_CHECK(world->size() == dims.world(),
           "world size " << world->size() << " does not match dp*cp*tp = " << dims.world() << " (dp=" << dims.dp
                         << " cp=" << dims.cp << " tp=" << dims.tp << "); launch " << dims.world()
                         << " ranks (mpirun -np " << dims.world() << ") or change parallel.dp/cp/tp");
  RT_CHECK(dims.cp_a2a >= 1 && dims.cp % dims.cp_a2a == 0,
           "parallel.cp_a2a=" << dims.cp_a2a << " does not divide parallel.cp=" << dims.cp
                              << "; use a cp_a2a that divides cp (1 = the ring alone, " << dims.cp
                              << " = all-to-all alone)");
  ProcessGrid g;
  g.dims_ = dims;
  const int rank = world->rank();
  // tp varies fastest, then cp, then dp: rank = (dp_rank * cp + cp_rank) * tp + tp_rank.
  g.tp_rank_ = rank % dims.tp;
  g.cp_rank_ = (rank / dims.tp) % dims.cp;
  g.dp_rank_ = rank / (dims.tp * dims.cp);
  // Every split is collective over the world, in the same order on every rank.
  g.tp_ = world->split(g.dp_rank_ * dims.cp + g.cp_rank_, g.tp_rank_);     // same dp and cp
  g.cp_ = world->split(g.dp_rank_ * dims.tp + g.tp_rank_, g.cp_rank_);     // same dp and tp: one ring
  g.dp_ = world->split(g.cp_rank_ * dims.tp + g.tp_rank_, g.dp_rank_);     // same cp and tp
  g.dp_cp_ = world->split(g.tp_rank_, g.dp_rank_ * dims.cp + g.cp_rank_);  // same tp: gradients
  const int u = dims.cp_a2a;
  if (u == 1) {
    g.ring_ = g.cp_;
    g.a2a_ = std::make_shared<LocalComm>();
  } else {
    const int ring_rank = g.cp_rank_ / u, a2a_rank = g.cp_rank_ % u, R = dims.cp / u;
    g.a2a_ = world->split((g.dp_rank_ * R + ring_rank) * dims.tp + g.tp_rank_, a2a_rank);  // u consecutive cp ranks
    g.ring_ = u == dims.cp ? std::shared_ptr<Comm>(std::make_shared<LocalComm>())
                           : world->split((g.dp_rank_ * u + a2a_rank) * dims.tp + g.tp_rank_, ring_rank);
  }
  g.world_ = std::move(world);
  return g;
}

}  // namespace rt
