// bench_doc_ring_steps --scheme gather, the report: the measured rows on stdout and as JSON members, from the plan
// (bench/doc_gather_plan.h) and the measurement (bench/doc_gather_steps.cuh, which says what each number is).
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/doc_gather_bwd_list.cuh"
#include "bench/doc_gather_deliver.cuh"
#include "bench/doc_gather_plan.h"
#include "bench/doc_gather_steps.cuh"

namespace rt::bench {

// The measured rows on stdout: per rank, the paths, the efficiencies against whole / cp and MagiAttention's figure
// of merit (mask FLOPs / (path x cp), TFLOP/s per GPU); flops_* are the mask FLOPs of each direction.
inline void print_gather_result(const GatherBench& g, const GatherMeasured& m, double whole_fwd_ms,
                                double whole_bwd_ms, double flops_fwd, double flops_bwd) {
  const int cp = g.plan.cp;
  auto one_kernel = [&](int r) {  // the one-launch forward's kernel, where it was timed
    return m.one_fwd_ms[size_t(r)] <= 0 ? "" : m.one_fwd_list[size_t(r)] ? " [list]" : " [two_kv]";
  };
  auto one_bwd_kernel = [&](int r) {  // the one-launch backward's kernel, where it was timed
    return m.one_bwd_ms[size_t(r)] <= 0 ? "" : m.one_bwd_list[size_t(r)] ? " [list]" : " [two_kv]";
  };
  for (int r = 0; r < cp; ++r)
    std::printf("  rank %d: %7ld rows received | fwd own %8.3f ms + gathered %8.3f ms, one launch %8.3f ms%s%s | bwd "
                "own %8.3f ms (A %.3f + B %.3f, split at %ld; one call %.3f) + gathered %8.3f ms, one launch %8.3f "
                "ms%s%s\n",
                r, long(g.plan.recv_rows[size_t(r)]), m.own_fwd_ms[size_t(r)], m.got_fwd_ms[size_t(r)],
                m.one_fwd_ms[size_t(r)], one_kernel(r),
                g.one_launch[size_t(r)] ? " (runs)" : "",
                m.own_bwd_ms[size_t(r)], m.own_bwd_a_ms[size_t(r)], m.own_bwd_b_ms[size_t(r)],
                long(g.splits[size_t(r)].m), m.own_bwd_one_ms[size_t(r)], m.got_bwd_ms[size_t(r)],
                m.one_bwd_ms[size_t(r)], one_bwd_kernel(r), g.one_launch_bwd[size_t(r)] ? " (runs)" : "");
  if (std::any_of(m.list_fwd_ms.begin(), m.list_fwd_ms.end(), [](double x) { return x > 0; })) {
    double two_kv_max = 0, list_max = 0;
    std::printf("  work list fwd (attn_fwd_work_list / attn_fwd_whole_two_kv, ms):");
    for (int r = 0; r < cp; ++r) {
      if (m.list_fwd_ms[size_t(r)] <= 0) continue;
      std::printf(" r%d %.3f/%.3f", r, m.list_fwd_ms[size_t(r)], m.two_kv_fwd_ms[size_t(r)]);
      two_kv_max = std::max(two_kv_max, m.two_kv_fwd_ms[size_t(r)]);
      list_max = std::max(list_max, m.list_fwd_ms[size_t(r)]);
    }
    std::printf("\n  work list fwd max over ranks %.3f ms vs %.3f ms (%.3fx); bits differing from two_kv: out %lld, lse "
                "%lld%s\n",
                list_max, two_kv_max, two_kv_max > 0 ? list_max / two_kv_max : 0.0, (long long)m.list_out_mismatch,
                (long long)m.list_lse_mismatch,
                m.list_out_mismatch + m.list_lse_mismatch > 0 ? "  <-- NOT BITWISE EQUAL" : "");
  }
  const int lists = int(std::count(m.one_fwd_list.begin(), m.one_fwd_list.end(), 1));
  const int launches = int(std::count_if(m.one_fwd_ms.begin(), m.one_fwd_ms.end(), [](double x) { return x > 0; }));
  std::printf("  one-launch forward in the paths: attn_fwd_work_list on %d of %d receiving ranks, "
              "attn_fwd_whole_two_kv on the rest (%s)\n",
              lists, launches, m.list_on ? "the list where its kernel runs the call: the default"
                                         : "RT_ATTN_WORK_LIST=0: two_kv everywhere");
  const int bwd_lists = int(std::count(m.one_bwd_list.begin(), m.one_bwd_list.end(), 1));
  const int bwd_launches =
      int(std::count_if(m.one_bwd_ms.begin(), m.one_bwd_ms.end(), [](double x) { return x > 0; }));
  const int bwd_in_paths = int(std::count(g.one_launch_bwd.begin(), g.one_launch_bwd.end(), 1));
  std::printf("  one-launch backward in the paths: attn_bwd_work_list on %d of %d receiving ranks, "
              "attn_bwd_block_fresh_two_kv on the rest (%s); the model runs it on %d ranks\n",
              bwd_lists, bwd_launches, m.list_on ? "the list where its kernel runs the call: the default"
                                                 : "RT_ATTN_WORK_LIST=0: two_kv everywhere",
              bwd_in_paths);
  const RingTimePrediction& p = m.path;
  const double pf = p.fwd_compute_us * 1e-3, pb = p.bwd_compute_us * 1e-3, cf = p.fwd_us * 1e-3, cb = p.bwd_us * 1e-3;
  auto per_gpu = [&](double flops, double ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 / cp : 0.0; };
  std::printf("  gather compute path   fwd %9.3f ms | bwd %9.3f ms (max over ranks of own + gathered)\n", pf, pb);
  std::printf("  gather path with comm fwd %9.3f ms | bwd %9.3f ms (exchange %.1f us K/V, %.1f us dK/dV; model "
              "predicted fwd %.3f ms bwd %.3f ms)\n",
              cf, cb, g.c_kv_us, g.c_dkv_us, g.predicted.fwd_us * 1e-3, g.predicted.bwd_us * 1e-3);
  std::printf("  forward with comm: every rank two calls %.3f ms, every receiving rank one launch %.3f ms, the "
              "model's forms %.3f ms\n",
              m.path_two_calls.fwd_us * 1e-3, m.path_one_launch.fwd_us * 1e-3, cf);
  std::printf("  backward with comm: every rank its calls %.3f ms, every receiving rank one launch %.3f ms, the "
              "model's forms %.3f ms\n",
              m.path_two_calls.bwd_us * 1e-3, m.path_one_launch.bwd_us * 1e-3, cb);
  std::printf("  own backward as one call: bwd compute path %9.3f ms, with comm %9.3f ms (efficiency with comm "
              "%.3f; split: %.3f)\n",
              m.path_one.bwd_compute_us * 1e-3, m.path_one.bwd_us * 1e-3,
              whole_bwd_ms / (cp * m.path_one.bwd_us * 1e-3), whole_bwd_ms / (cp * cb));
  if (m.deliver_on) print_deliver_result(m.deliver_path, m.deliver, g.c_kv_us, whole_fwd_ms);
  print_bwd_list(m.bwd_list);
  const double share = p.ring_bytes_per_layer > 0 ? 100 * p.bytes_per_layer / p.ring_bytes_per_layer : 0.0;
  std::printf("  bytes per layer %.0f of the ring's %.0f (%.2f%%), %ld rows received in all\n", p.bytes_per_layer,
              p.ring_bytes_per_layer, share, long(g.plan.total_rows()));
  std::printf("  efficiency (whole / (cp x path)) fwd %.3f bwd %.3f | with the comm model fwd %.3f bwd %.3f | TFLOP/s "
              "per GPU (mask FLOPs / (path x cp)) fwd %.1f bwd %.1f, with comm fwd %.1f bwd %.1f\n",
              whole_fwd_ms / (cp * pf), whole_bwd_ms / (cp * pb), whole_fwd_ms / (cp * cf), whole_bwd_ms / (cp * cb),
              per_gpu(flops_fwd, pf), per_gpu(flops_bwd, pb), per_gpu(flops_fwd, cf), per_gpu(flops_bwd, cb));
}

// The same as JSON members (after a leading comma), for bench_doc_ring_steps --json.
inline void json_gather(FILE* json, const GatherBench& g, const GatherMeasured* m, double whole_fwd_ms,
                        double whole_bwd_ms, double flops_fwd, double flops_bwd) {
  auto list = [](const std::vector<double>& xs) {
    std::string s = "[";
    char cell[32];
    for (size_t i = 0; i < xs.size(); ++i) std::snprintf(cell, sizeof(cell), "%s%.4f", i ? "," : "", xs[i]), s += cell;
    return s + "]";
  };
  const RingTimePrediction& e = g.predicted;
  std::vector<int64_t> split_m;  // (cp) each rank's own backward split
  for (const OwnBwdSplit& s : g.splits) split_m.push_back(s.m);
  std::fprintf(json,
               ",\"recv_rows\":[%s],\"send_rows\":[%s],\"bytes_per_layer\":%.0f,\"ring_bytes_per_layer\":%.0f,"
               "\"exchange_kv_us\":%.2f,\"exchange_dkv_us\":%.2f,\"model_path_fwd_ms\":%.4f,"
               "\"model_path_bwd_ms\":%.4f,\"model_compute_fwd_ms\":%.4f,\"model_compute_bwd_ms\":%.4f,"
               "\"model_eff_fwd\":%.4f,\"model_eff_bwd\":%.4f,\"own_split_m\":[%s]",
               gather_join(g.plan.recv_rows).c_str(), gather_join(g.plan.send_rows).c_str(), e.bytes_per_layer,
               e.ring_bytes_per_layer, g.c_kv_us, g.c_dkv_us, e.fwd_us * 1e-3, e.bwd_us * 1e-3,
               e.fwd_compute_us * 1e-3, e.bwd_compute_us * 1e-3, e.efficiency_fwd(), e.efficiency_bwd(),
               gather_join(split_m).c_str());
  if (m == nullptr) return;
  const int cp = g.plan.cp;
  const RingTimePrediction& p = m->path;
  const double pf = p.fwd_compute_us * 1e-3, pb = p.bwd_compute_us * 1e-3, cf = p.fwd_us * 1e-3, cb = p.bwd_us * 1e-3;
  auto per_gpu = [&](double flops, double ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 / cp : 0.0; };
  std::fprintf(json,
               ",\"own_fwd_ms\":%s,\"gathered_fwd_ms\":%s,\"own_bwd_ms\":%s,\"gathered_bwd_ms\":%s,"
               "\"path_fwd_ms\":%.4f,\"path_bwd_ms\":%.4f,\"path_comm_fwd_ms\":%.4f,\"path_comm_bwd_ms\":%.4f,"
               "\"eff_fwd\":%.4f,\"eff_bwd\":%.4f,\"eff_comm_fwd\":%.4f,\"eff_comm_bwd\":%.4f,"
               "\"fom_fwd_tflops_per_gpu\":%.2f,\"fom_bwd_tflops_per_gpu\":%.2f,"
               "\"fom_comm_fwd_tflops_per_gpu\":%.2f,\"fom_comm_bwd_tflops_per_gpu\":%.2f,"
               "\"check_lse\":%.3e,\"check_out\":%.3e,\"check_dq\":%.3e,\"check_dk\":%.3e,\"check_dv\":%.3e,"
               "\"own_bwd_a_ms\":%s,\"own_bwd_b_ms\":%s,\"own_bwd_one_call_ms\":%s,"
               "\"path_bwd_one_call_ms\":%.4f,\"path_comm_bwd_one_call_ms\":%.4f,\"eff_comm_bwd_one_call\":%.4f,"
               "\"one_fwd_ms\":%s,\"one_launch\":[%s],\"path_comm_fwd_two_calls_ms\":%.4f,"
               "\"path_comm_fwd_one_launch_ms\":%.4f,\"one_bwd_ms\":%s,\"one_launch_bwd\":[%s],"
               "\"path_comm_bwd_calls_ms\":%.4f,\"path_comm_bwd_one_launch_ms\":%.4f,\"one_fwd_work_list\":[%s],"
               "\"one_bwd_work_list\":[%s],\"work_list_on\":%s",
               list(m->own_fwd_ms).c_str(), list(m->got_fwd_ms).c_str(), list(m->own_bwd_ms).c_str(),
               list(m->got_bwd_ms).c_str(), pf, pb, cf, cb, whole_fwd_ms / (cp * pf), whole_bwd_ms / (cp * pb),
               whole_fwd_ms / (cp * cf), whole_bwd_ms / (cp * cb), per_gpu(flops_fwd, pf), per_gpu(flops_bwd, pb),
               per_gpu(flops_fwd, cf), per_gpu(flops_bwd, cb), m->check_lse, m->check_out, m->check_dq, m->check_dk,
               m->check_dv, list(m->own_bwd_a_ms).c_str(), list(m->own_bwd_b_ms).c_str(),
               list(m->own_bwd_one_ms).c_str(), m->path_one.bwd_compute_us * 1e-3, m->path_one.bwd_us * 1e-3,
               whole_bwd_ms / (cp * m->path_one.bwd_us * 1e-3), list(m->one_fwd_ms).c_str(),
               gather_join(std::vector<int64_t>(g.one_launch.begin(), g.one_launch.end())).c_str(),
               m->path_two_calls.fwd_us * 1e-3, m->path_one_launch.fwd_us * 1e-3, list(m->one_bwd_ms).c_str(),
               gather_join(std::vector<int64_t>(g.one_launch_bwd.begin(), g.one_launch_bwd.end())).c_str(),
               m->path_two_calls.bwd_us * 1e-3, m->path_one_launch.bwd_us * 1e-3,
               gather_join(std::vector<int64_t>(m->one_fwd_list.begin(), m->one_fwd_list.end())).c_str(),
               gather_join(std::vector<int64_t>(m->one_bwd_list.begin(), m->one_bwd_list.end())).c_str(),
               m->list_on ? "true" : "false");
  if (std::any_of(m->list_fwd_ms.begin(), m->list_fwd_ms.end(), [](double x) { return x > 0; }))
    std::fprintf(json, ",\"work_list_fwd_ms\":%s,\"two_kv_fwd_ms\":%s,\"work_list_out_bit_mismatches\":%lld,"
                       "\"work_list_lse_bit_mismatches\":%lld",
                 list(m->list_fwd_ms).c_str(), list(m->two_kv_fwd_ms).c_str(), (long long)m->list_out_mismatch,
                 (long long)m->list_lse_mismatch);
  if (m->deliver_on) json_deliver(json, m->deliver_path, m->deliver, whole_fwd_ms);
  json_bwd_list(json, m->bwd_list);
}

}  // namespace rt::bench
