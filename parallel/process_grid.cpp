#include "parallel/process_grid.h"

namespace rt {

ProcessGrid ProcessGrid::local() {
  ProcessGrid g;
  g.world_ = std::make_shared<LocalComm>();
  g.tp_ = std::make_shared<LocalComm>();
  g.cp_ = std::make_shared<LocalComm>();
  g.dp_ = std::make_shared<LocalComm>();
  g.dp_cp_ = std::make_shared<LocalComm>();
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
  g.world_ = std::move(world);
  return g;
}

}  // namespace rt
