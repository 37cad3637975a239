// What one rank of a config needs, and the longest context that fits (`ringtrain plan`, framework/plan/plan.cpp; the
// trainer's train.offload_layers: auto). Nothing is allocated: the model and optimizer are built for rank
// (dp 0, cp 0, tp 0) on a measuring arena, exactly as training builds them, with size-only communicators.
//
//   device per rank = arena (weights, gradients, Adam moments, each sharded per parallel.zero; ZeRO's gather
//                     and gradient slots; activations; the offload's two staging buffers)
//                   + 2 GiB allowance (CUDA context, cuBLASLt workspace; measured 0.55-2 GiB on an H200)
//                   + NCCL buffers: 0.8 GiB per NCCL communicator of more than one rank (the 2 x H200 cp = 2 run
//                     measured 2.4 GiB above its arena + context for its three such communicators)
//   host per node   = ranks per node x the pinned block inputs each rank offloads
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "framework/config/config.h"
#include "kernels/tensor.h"
#include "parallel/comm/comm.h"
#include "parallel/schedule/head_exchange.h"

namespace rt {

// A communicator that knows only its size: enough to shape buffers; any traffic is refused.
class SizeOnlyComm final : public Comm {
 public:
  explicit SizeOnlyComm(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string name() const override { return "plan"; }
  void all_reduce_sum(Tensor) override { refuse(); }
  void all_reduce_sum(double*, int) override { refuse(); }
  void broadcast(Tensor, int) override { refuse(); }
  void barrier() override { refuse(); }
  ExchangeHandle ring_exchange_start(const Tensor&, Tensor) override { refuse(); }
  void wait(ExchangeHandle) override { refuse(); }
  ExchangeHandle reduce_scatter_sum_start(const Tensor&, Tensor) override { refuse(); }
  ExchangeHandle all_gather_start(const Tensor&, Tensor) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { RT_CHECK(false, "ringtrain plan does not communicate"); }
  int size_;
};

struct PlanPoint {
  int seq_len = 0;
  int zero = 0;            // in effect (0 when the dp x cp group is one rank)
  int offload_layers = 0;  // resolved
  double arena_bytes = 0, allowance_bytes = 0, nccl_bytes = 0;
  double host_bytes_per_rank = 0, host_bytes_per_node = 0;
  bool fits_device = true, fits_host = true;
  std::vector<std::pair<std::string, double>> largest;  // what -> bytes, largest first (the arena's entries)
  // parallel.cp_a2a > 1: the head exchange per rank (parallel/cp/context_attention.h); its buffers are in the arena.
  HeadExchangeShape a2a;
  double device_bytes() const { return arena_bytes + allowance_bytes + nccl_bytes; }
  bool fits() const { return fits_device && fits_host; }
};

struct PlanLimits {
  double device_bytes = 0;  // per rank; <= 0: unknown (everything fits the device)
  double host_bytes = 0;    // per node; <= 0: unknown
  int ranks_per_node = 1;
};

// NCCL's buffers per rank when this config's grid runs over NCCL (CUDA, comm auto or nccl, > 1 rank), else 0.
double nccl_buffer_bytes(const Config& config, Device device);
// The rank's needs for `config` as it stands; train.offload_layers auto takes the fewest layers with which the
// device fits (all of them when none does).
PlanPoint plan_point(const Config& config, Device device, const PlanLimits& limits);
// "" or the refusal of an offload whose pinned inputs (pt.host_bytes_per_rank x ranks_per_node) exceed the node's
// host memory, saying how much is needed and what to change.
std::string offload_host_problem(const PlanPoint& pt, int ranks_per_node, double host_bytes);
// data.seq_len steps the layout allows: 2 * cp * 128 under zigzag, cp * 128 otherwise.
int seq_len_step(const Config& config);
// The longest data.seq_len (a multiple of seq_len_step) whose plan fits the limits; seq_len 0 when none does.
PlanPoint max_seq_len(const Config& config, Device device, const PlanLimits& limits);

}  // namespace rt
