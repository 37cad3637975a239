// The schedule of a batch of packed documents (parallel/schedule/batch_schedule.h).
#include "parallel/schedule/batch_schedule.h"

#include "kernels/tensor.h"
#include "parallel/schedule/doc_balance.h"

namespace rt {

BatchSchedule schedule_batch(const std::vector<std::vector<int64_t>>& doc_starts, const ScheduleRule& rule) {
  RT_CHECK(rule.ring >= 1, "schedule_batch: a ring of " << rule.ring << " ranks");
  const bool on_ring = rule.ring > 1;
  // The scheme the orders are chosen for: the ring alone on one rank or for cp_scheme ring; else the gather joins.
  const bool gather_joins = on_ring && rule.scheme != CpScheme::ring;
  const bool gather_only = on_ring && rule.scheme == CpScheme::gather;
  const bool scheme_auto = on_ring && !rule.scheme.has_value();
  BatchSchedule s;
  std::vector<CpSchemePrediction> predictions;  // (samples) auto only
  for (const std::vector<int64_t>& starts : doc_starts) {
    const int64_t T = int64_t(starts.size());
    std::vector<int64_t> order;  // (T)
    std::string label = layout_name(rule.layout);
    if (rule.layout != Layout::balanced) {
      order = layout_ring_order(rule.layout, T, rule.ring);
    } else if (gather_joins) {  // layout and scheme chosen together
      RingChoice choice = balanced_ring_choice(starts, rule.ring, rule.shape, /*with_gather=*/true, gather_only);
      order = std::move(choice.order);
      label = std::move(choice.label);
    } else {
      order = balanced_ring_order(starts, rule.ring, &label, rule.shape);
    }
    if (scheme_auto) predictions.push_back(predict_cp_schemes(starts, order, rule.ring, rule.shape));
    s.orders.push_back(std::move(order));
    s.labels.push_back(std::move(label));
  }
  if (!s.labels.empty()) s.label = s.labels[0];
  s.scheme = on_ring && rule.scheme ? *rule.scheme : CpScheme::ring;
  if (scheme_auto) {
    s.scheme = pick_cp_scheme(predictions);
    for (const CpSchemePrediction& p : predictions) s.ring_us += p.ring.total_us(), s.gather_us += p.gather.total_us();
  }
  return s;
}

}  // namespace rt
