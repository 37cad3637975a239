// plan_point / max_seq_len (framework/plan/plan_fit.h).
#include "framework/plan/plan_fit.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "framework/plan/plan.h"
#include "framework/plan/trainer_setup.h"

namespace rt {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kNcclBytesPerComm = 0.8 * kGiB;

// The arena and host needs with `offload_layers` resolved to a number.
PlanPoint measure(const Config& config, Device device, int offload_layers) {
  const ParallelConfig& p = config.parallel;
  SizeOnlyComm tp(p.tp), cp(p.cp), dp_cp(p.dp * p.cp), ring(p.ring()), a2a(p.cp_a2a);
  ModelComms comms;
  comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp, comms.tp_rank = 0;
  comms.ring = &ring, comms.a2a = &a2a;
  Config c = config;
  c.train.offload_layers = std::to_string(offload_layers);
  if (offload_layers == 0) c.train.offload = "none";
  const ModelSession s = measure_session(c, comms, device, /*with_optimizer=*/true);
  PlanPoint pt;
  pt.seq_len = config.data.seq_len;
  pt.zero = s.model->zero();
  pt.offload_layers = s.model->offload_layers();
  pt.arena_bytes = double(s.arena->peak());
  pt.allowance_bytes = non_arena_allowance_bytes(device);
  pt.nccl_bytes = nccl_buffer_bytes(config, device);
  pt.host_bytes_per_rank = double(s.model->host_offload_bytes());
  pt.a2a = s.model->attention().exchange();
  std::map<std::string, double> by_name;
  for (const Arena::Entry& e : s.arena->entries()) by_name[e.what] += double(e.bytes);
  pt.largest.assign(by_name.begin(), by_name.end());
  std::sort(pt.largest.begin(), pt.largest.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return pt;
}

void judge(PlanPoint& pt, const PlanLimits& limits) {
  pt.host_bytes_per_node = pt.host_bytes_per_rank * std::max(1, limits.ranks_per_node);
  pt.fits_device = limits.device_bytes <= 0 || pt.device_bytes() <= limits.device_bytes;
  pt.fits_host = limits.host_bytes <= 0 || pt.host_bytes_per_node <= limits.host_bytes;
}

}  // namespace

double nccl_buffer_bytes(const Config& config, Device device) {
  const ParallelConfig& p = config.parallel;
  if (!device.is_cuda() || p.comm == "mpi" || p.dp * p.cp * p.tp == 1) return 0;
  // ProcessGrid builds the world and its tp, cp, dp and dp x cp groups, and with cp_a2a > 1 the a2a group and
  // the ring (when neither is the whole cp group): one NCCL communicator each.
  const bool hybrid = p.cp_a2a > 1;
  const int sizes[7] = {p.dp * p.cp * p.tp, p.tp, p.cp, p.dp, p.dp * p.cp, hybrid ? p.cp_a2a : 1, hybrid ? p.ring() : 1};
  int multi = 0;
  for (int s : sizes) multi += s > 1 ? 1 : 0;
  return kNcclBytesPerComm * multi;
}

PlanPoint plan_point(const Config& config, Device device, const PlanLimits& limits) {
  const TrainConfig& t = config.train;
  if (t.offload != "activations") {
    PlanPoint pt = measure(config, device, 0);
    judge(pt, limits);
    return pt;
  }
  if (t.offload_layers != "auto") {
    PlanPoint pt = measure(config, device, std::stoi(t.offload_layers));
    judge(pt, limits);
    return pt;
  }
  // auto: the fewest offloaded layers that fit the device (device memory falls as layers are offloaded).
  const int L = config.model.n_layer;
  PlanPoint best = measure(config, device, 0);
  judge(best, limits);
  if (best.fits_device) return best;
  int lo = 0, hi = L;  // lo does not fit; find the smallest hi that does
  PlanPoint at_hi = measure(config, device, hi);
  judge(at_hi, limits);
  if (!at_hi.fits_device) return at_hi;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    PlanPoint pt = measure(config, device, mid);
    judge(pt, limits);
    if (pt.fits_device) hi = mid, at_hi = pt;
    else lo = mid;
  }
  return at_hi;
}

std::string offload_host_problem(const PlanPoint& pt, int ranks_per_node, double host_bytes) {
  const double need = pt.host_bytes_per_rank * std::max(1, ranks_per_node);
  if (need <= host_bytes) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "train.offload: %d offloaded layers need %.1f GiB of pinned host memory per node (%d ranks x %.1f GiB), "
                "but the host has %.1f GiB; lower train.offload_layers, or spread the sequence over more GPUs "
                "(parallel.cp)",
                pt.offload_layers, need / kGiB, std::max(1, ranks_per_node), pt.host_bytes_per_rank / kGiB,
                host_bytes / kGiB);
  return buf;
}

int seq_len_step(const Config& config) {
  const int cp = config.parallel.cp;
  // zigzag is over the ring (cp / cp_a2a ranks); every rank still holds seq_len / cp tokens.
  const int ring = config.parallel.ring(), zig = 2 * ring;
  if (resolved_layout(config) != "zigzag") return cp * 128;
  return std::lcm(zig, cp) * 128;
}

PlanPoint max_seq_len(const Config& config, Device device, const PlanLimits& limits) {
  RT_CHECK(limits.device_bytes > 0, "ringtrain plan --max-seq-len needs the device memory: run it where the GPU "
                                    "is visible, or give --device-memory-gib G");
  const int64_t step = seq_len_step(config);
  auto at = [&](int64_t k) {
    Config c = config;
    c.data.seq_len = int(k * step);
    return plan_point(c, device, limits);
  };
  PlanPoint fit = at(1);
  if (!fit.fits()) {
    fit.seq_len = 0;
    return fit;
  }
  const int64_t max_k = (int64_t(1) << 31) / step - 1;
  int64_t lo = 1, hi = 2;  // lo fits
  while (hi <= max_k) {
    PlanPoint pt = at(hi);
    if (!pt.fits()) break;
    lo = hi, fit = pt, hi *= 2;
  }
  hi = std::min(hi, max_k + 1);
  while (hi - lo > 1) {  // lo fits, hi does not (or is past the int range)
    const int64_t mid = (lo + hi) / 2;
    PlanPoint pt = at(mid);
    if (pt.fits()) lo = mid, fit = pt;
    else hi = mid;
  }
  return fit;
}

}  // namespace rt
