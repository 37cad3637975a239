// `ringtrain eval --task loss-by-position` (framework/eval/eval_tasks.h): held-out losses in log-spaced position
// buckets, and the small file helpers the eval tasks share.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "framework/eval/eval_tasks.h"
#include "kernels/tensor.h"

namespace rt {

std::string check_eval_task_args(const EvalTaskArgs& a) {
  if (a.task != "loss" && a.task != "loss-by-position" && a.task != "needle" && a.task != "ruler")
    return "--task '" + a.task + "' is not a task; use loss, loss-by-position, needle or ruler";
  if (a.by != "window" && a.by != "document")
    return "--by '" + a.by + "' is not valid; use window (position in the eval window) or document";
  if (a.task == "loss" && !a.out.empty())
    return "--out is for --task loss-by-position, needle or ruler; the plain loss is printed";
  if (a.task != "loss" && a.out.empty())
    return "--task " + a.task + " needs --out FILE.jsonl (where its results go)";
  if (!a.out.empty() && (a.out.size() < 7 || a.out.substr(a.out.size() - 6) != ".jsonl"))
    return "--out '" + a.out + "' must end in .jsonl (loss-by-position also writes the .csv beside it, ruler the "
           ".md and .csv)";
  if (a.task == "needle" && a.cases.empty())
    return "--task needle needs --cases DIR (written by launch/make_needles.py)";
  if (a.task == "ruler" && a.cases.empty())
    return "--task ruler needs --cases DIR (written by launch/make_ruler.py)";
  if (a.task != "needle" && a.task != "ruler" && !a.cases.empty()) return "--cases is for --task needle or ruler";
  if (a.task != "loss-by-position" && a.by != "window") return "--by is for --task loss-by-position";
  return "";
}

std::vector<int64_t> position_bucket_edges(int64_t seq_len) {
  RT_CHECK(seq_len >= 1, "position buckets: seq_len " << seq_len << " must be >= 1");
  std::vector<int64_t> edges{0};
  for (int64_t e = 1; e < seq_len; e *= 2) edges.push_back(e);
  edges.push_back(seq_len);
  return edges;
}

namespace {

size_t bucket_of(const std::vector<int64_t>& edges, int64_t position) {
  size_t b = 0;  // edges[b] <= position < edges[b + 1]; at most log2(seq_len) steps
  while (b + 2 < edges.size() && position >= edges[b + 1]) ++b;
  return b;
}

}  // namespace

PositionLosses loss_by_position(Model& model, DataLoader& eval_loader, const EvalPlan& plan, int64_t seq_len,
                                bool by_document) {
  PositionLosses p;
  p.edges = position_bucket_edges(seq_len);
  const size_t buckets = p.edges.size() - 1;
  p.sum.assign(buckets, 0.0);
  p.count.assign(buckets, 0.0);
  eval_loader.set_cursor(0);
  for (uint64_t b = 0; b < plan.batches; ++b) {
    const Batch batch = eval_loader.next();
    const double count = model.global_target_count(batch);
    const std::vector<float> losses = model.step(batch, count, /*want_grad=*/false);  // (B_local*T_local)
    p.total.add(batch, losses);
    const std::vector<int32_t>& pos = by_document ? batch.document_positions : batch.window_positions;
    for (size_t i = 0; i < losses.size(); ++i) {
      if (batch.targets[i] < 0) continue;
      const size_t k = bucket_of(p.edges, pos[i]);
      p.sum[k] += losses[i], p.count[k] += 1;
    }
  }
  std::vector<double> v(p.sum);  // (2 * buckets): sums, then counts
  v.insert(v.end(), p.count.begin(), p.count.end());
  model.dp_cp_comm().all_reduce_sum(v.data(), int(v.size()));
  for (size_t k = 0; k < buckets; ++k) p.sum[k] = v[k], p.count[k] = v[buckets + k];
  p.total.all_reduce(model.dp_cp_comm());
  return p;
}

std::string position_losses_csv_path(const std::string& out) { return out.substr(0, out.size() - 6) + ".csv"; }

void write_position_losses(const PositionLosses& p, const std::string& out, const std::string& checkpoint,
                           const std::string& by, OutputFiles& outputs) {
  std::string jsonl, csv = "lo,hi,targets,mean_loss\n";
  for (size_t k = 0; k < p.sum.size(); ++k) {
    if (p.count[k] <= 0) continue;
    const double mean = p.sum[k] / p.count[k];
    nlohmann::json j = {{"checkpoint", checkpoint}, {"by", by}, {"lo", p.edges[k]}, {"hi", p.edges[k + 1]},
                        {"targets", int64_t(p.count[k])}, {"mean_loss", mean}};
    jsonl += j.dump() + "\n";
    char row[128];
    std::snprintf(row, sizeof row, "%lld,%lld,%lld,%.6f\n", (long long)p.edges[k], (long long)p.edges[k + 1],
                  (long long)p.count[k], mean);
    csv += row;
  }
  outputs.write_text("--out", position_losses_csv_path(out), csv);
  outputs.write_text("--out", out, jsonl);
}

}  // namespace rt
