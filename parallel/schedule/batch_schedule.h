// The schedule of a batch of packed documents (DESIGN.md "Document masks"): each sample's ring order (which positions
// each rank of the ring holds), its name, and the scheme the ring moves K/V with for the whole batch. One function,
// called by the loader (framework/data/data.cpp) for every batch and by `ringtrain plan --doc-lengths`
// (framework/plan/plan_docs.cpp) for each window it reports, so that the plan shows the loader's own pick.
// Host only; deterministic, so every rank of a ring schedules alike.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallel/schedule/cp_scheme.h"
#include "parallel/schedule/layout.h"
#include "parallel/schedule/ring_time_model.h"

namespace rt {

// What the schedule follows (from the config: framework/data/data.h's schedule_rule).
struct ScheduleRule {
  Layout layout = Layout::contiguous;  // resolved: a fixed layout, or balanced (the chooser picks per sample)
  int ring = 1;                        // ranks the layout is over (cp / cp_a2a)
  std::optional<CpScheme> scheme;      // parallel.cp_scheme ring | gather; nullopt: auto, picked per batch
  RingShape shape;                     // per rank, what the candidates and schemes are priced with
};

struct BatchSchedule {
  std::vector<std::vector<int64_t>> orders;  // (samples, T) each sample's ring order: rank 0's positions, rank 1's, ...
  std::vector<std::string> labels;           // (samples) each order's name (balanced: the chooser's pick, e.g.
                                             // docpack(2048/runs) or gather:gatherpack(0.25); else the layout's)
  std::string label;                         // the first sample's, as the batch names it (Batch::ring_layout)
  CpScheme scheme = CpScheme::ring;          // how the ring runs the batch
  double ring_us = 0, gather_us = 0;         // auto on a ring: both predictions summed over the samples
                                             // (forward + backward per layer, microseconds); else 0
};

// doc_starts: (samples, T) each sample's document start per position. On a ring of one rank the scheme is the ring.
// With balanced and a gather or auto scheme, layout and scheme are chosen together (balanced_ring_choice; gather:
// among the gather candidates alone); auto then picks the scheme of least predicted time over the batch's samples
// (pick_cp_scheme). Throws rt::Error when a fixed layout does not divide T.
BatchSchedule schedule_batch(const std::vector<std::vector<int64_t>>& doc_starts, const ScheduleRule& rule);

}  // namespace rt
