#include "framework/plan/trainer_setup.h"

#include "framework/base/run_errors.h"
#include "framework/model/fp8_linear.h"
#include "framework/plan/mfu.h"

#include "framework/plan/cp_scheme_memory.h"
#include "framework/plan/plan_fit.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/attention.h"
#include "kernels/device_memory.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/comm/watchdog.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include "parallel/comm/cuda/nccl_comm.h"
#endif

namespace rt {

namespace {
int local_rank_from_env() {
  for (const char* key : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(key)) return std::atoi(v);
  return 0;
}
}  // namespace

Device resolve_device(const Config& config) {
  const std::string& d = config.device;
  RT_CHECK(d == "auto" || d == "cpu" || d == "cuda", "device: '" << d << "' must be auto, cpu or cuda");
  const bool cuda = d == "cuda" || (d == "auto" && cuda_available());
  if (!cuda) return Device::cpu();
  RT_CHECK(cuda_available(), "device: cuda, but no CUDA device is available (or ringtrain was built without "
                             "CUDA). Set device: cpu");
  return Device::cuda(local_rank_from_env() % cuda_device_count());
}

// parallel.comm: mpi | nccl | auto. auto takes nccl when the device is CUDA and every rank has a GPU of its
// own, mpi otherwise (several ranks sharing one GPU stage through pinned host memory). nccl with CPU tensors or
// with a shared GPU is refused with the fix. Collective over MPI_COMM_WORLD (every rank decides the same).
std::shared_ptr<Comm> make_world_comm(const Config& config, Device device) {
  const std::string& choice = config.parallel.comm;
  RT_CHECK(choice == "auto" || choice == "mpi" || choice == "nccl",
           "parallel.comm: '" << choice << "' must be auto, mpi or nccl");
  RT_CHECK(choice != "nccl" || device.is_cuda(),
           "parallel.comm=nccl needs GPU tensors but this run is on the CPU; use parallel.comm: mpi (or auto)");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (choice == "mpi" || device.is_cpu()) return make_mpi_world_comm();
#ifdef RINGTRAIN_HAVE_CUDA
  const bool shared = ranks_share_gpu(MPI_COMM_WORLD, device.index);
  RT_CHECK(!(shared && choice == "nccl"),
           "parallel.comm=nccl, but several ranks of this node share one GPU; NCCL refuses that (\"Duplicate GPU "
           "detected\")" << (config.parallel.cp_a2a > 1 ? ", for the all-to-all (parallel.cp_a2a=" +
                                  std::to_string(config.parallel.cp_a2a) + ") as for the ring"
                                                                           : std::string()) <<
           ". Use parallel.comm: mpi (or auto), which stages through pinned host memory, or launch one rank per GPU");
  if (!shared) {
    if (rank == 0) std::fprintf(stderr, "parallel.comm: %s -> nccl (one GPU per rank)\n", choice.c_str());
    return std::make_shared<NcclComm>(MPI_COMM_WORLD, device.index);
  }
  if (rank == 0)  // stderr, as the start-up table (stdout is the command's output)
    std::fprintf(stderr, "parallel.comm: auto -> mpi (ranks share a GPU: staged through pinned host memory)\n");
#endif
  return make_mpi_world_comm();
}

std::shared_ptr<Comm> make_world_comm(const Config& config) { return make_world_comm(config, resolve_device(config)); }

ProcessGrid make_process_grid(const Config& config) { return make_process_grid(config, resolve_device(config)); }

ProcessGrid make_process_grid(const Config& config, Device device) {
  GridDims dims{config.parallel.dp, config.parallel.cp, config.parallel.tp};
  dims.cp_a2a = config.parallel.cp_a2a;
  int initialized = 0, size = 1;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1 && dims.world() == 1) return ProcessGrid::local();  // one rank: nothing to communicate
  RT_CHECK(initialized, "parallel: dp*cp*tp = " << dims.world() << " needs that many MPI ranks; launch with "
                                                << "mpirun -np " << dims.world() << " (or launch/train.sh)");
  // Collective: hosts, pids and the heartbeat communicator of the MPI watchdog (parallel/comm/watchdog.h); also the
  // default limit of the NCCL watchdog.
  watchdog_init(config.parallel.timeout_s, config.parallel.save_timeout_s);
  return ProcessGrid::create(make_world_comm(config, device), dims);
}

ModelOptions model_options(const Config& config, Device device) {
  ModelOptions o;
  o.checkpointing = parse_checkpointing(config.train.checkpointing);
  o.lm_head_chunk = config.train.lm_head_chunk;
  o.mlp_chunk = config.train.mlp_chunk;
  o.act_dtype = device.is_cuda() ? DType::bf16 : DType::f32;
  o.layout = parse_layout(resolved_layout(config));
  o.dkv_wire = config.parallel.dkv_wire == "bf16" ? DType::bf16 : DType::f32;
  o.zero = config.parallel.zero;
  // Per-sample RoPE rows whenever two samples of a batch can have different positions: document positions, or
  // the balanced layout (each sample's ranks hold the positions its own documents call for; issue 31 row 1).
  o.per_sample_positions = config.data.positions == "document" || o.layout == Layout::balanced;
  o.documents = config.data.documents == "eot";
  o.cp_gather = o.documents && config.parallel.cp_scheme != CpSchemeSetting::ring && config.parallel.ring() > 1;
  o.fp8 = config.train.precision == "fp8";
  o.fp8_recipe = parse_fp8_recipe(config.fp8.recipe);
  o.fp8_bf16_first_last = config.fp8.bf16_first_last;
  o.fp8_attention = o.fp8 && config.fp8.attention;
  o.fp8_attention_kv = o.fp8_attention && config.fp8.attention_kv == "e4m3";
  o.fp8_zero3_gather = config.fp8.zero3_gather == "fp8";
  if (config.train.offload == "activations") {
    RT_CHECK(device.is_cuda(), "train.offload=activations moves a GPU's block inputs to pinned host memory, but this "
                               "run is on the CPU, where every activation is in host memory already; use "
                               "train.offload: none (or device: cuda)");
    RT_CHECK(config.train.offload_layers != "auto", "train.offload_layers: auto must be resolved before the model is "
                                                    "built (build_session does it)");
    o.offload_layers = std::stoi(config.train.offload_layers);
  }
  return o;
}

int64_t resolved_mlp_chunk(const Config& config, int64_t tokens) {
  return resolve_mlp_chunk(config.train.mlp_chunk, tokens, config.model.d_ff / config.parallel.tp,
                           config.train.precision == "fp8", parse_checkpointing(config.train.checkpointing));
}

std::string zero_note(const Config& config) {
  const ParallelConfig& p = config.parallel;
  if (p.zero == 0 || p.dp * p.cp > 1) return "";
  return "note: parallel.zero=" + std::to_string(p.zero) + " has nothing to shard: the dp x cp group is one rank "
         "(dp=" + std::to_string(p.dp) + ", cp=" + std::to_string(p.cp) + "), so every rank holds the whole state "
         "as at zero 0; raise dp or cp to shard it";
}

LoaderRank loader_rank(const Config& config, const ProcessGrid& grid) {
  LoaderRank r;
  r.dp = config.parallel.dp, r.dp_rank = grid.dp_rank();
  r.cp = config.parallel.cp, r.cp_rank = grid.cp_rank();
  r.ring = config.parallel.ring();
  r.layout = resolved_layout(config);
  return r;
}

int64_t sequences_per_rank(const Config& config) {
  RT_CHECK(config.train.batch_size % config.parallel.dp == 0,
           "train.batch_size (" << config.train.batch_size << ") must be divisible by parallel.dp ("
                                << config.parallel.dp << ")");
  return config.train.batch_size / config.parallel.dp;
}

int64_t tokens_per_rank(const Config& config) {
  RT_CHECK(config.data.seq_len % config.parallel.cp == 0,
           "data.seq_len (" << config.data.seq_len << ") must be divisible by parallel.cp (" << config.parallel.cp
                            << ")");
  return config.data.seq_len / config.parallel.cp;
}

namespace {
void build_into(ModelSession& s, const Config& config, const ModelComms& comms, Device device,
                bool with_optimizer) {
  ModelOptions options = model_options(config, device);
  options.forward_only = !with_optimizer;  // eval and generate: no backward, so no activations kept for one
  s.model = std::make_unique<Model>(config.model, options, sequences_per_rank(config), tokens_per_rank(config), comms,
                                    *s.arena);
  if (with_optimizer) s.optimizer = std::make_unique<AdamW>(config.optim, *s.model, *s.arena);
}
}  // namespace

ModelSession measure_session(const Config& config, const ModelComms& comms, Device device, bool with_optimizer) {
  ModelSession s;
  s.arena = std::make_unique<Arena>(Arena::measuring(device));
  build_into(s, config, comms, device, with_optimizer);
  return s;
}

Config resolve_offload(const Config& config, Device device) {
  if (config.train.offload != "activations") return config;
  RT_CHECK(device.is_cuda(), "train.offload=activations moves a GPU's block inputs to pinned host memory, but this "
                             "run is on the CPU, where every activation is in host memory already; use "
                             "train.offload: none (or device: cuda)");
  Config c = config;
  const PlanLimits limits = trainer_device_limits(device);
  const int local_ranks = limits.ranks_per_node;
  const double host = double(host_physical_bytes());
  const PlanPoint pt = plan_point(c, device, limits);
  c.train.offload_layers = std::to_string(pt.offload_layers);
  // Refused up front: pinned memory beyond the host's would fail (or swap) in the middle of the first step.
  const std::string problem = offload_host_problem(pt, local_ranks, host);
  RT_CHECK(problem.empty(), problem);
  return c;
}

ModelSession build_session(const Config& config_in, const ModelComms& comms, Device device, bool with_optimizer) {
  const int head_dim = config_in.model.n_head > 0 ? config_in.model.d_model / config_in.model.n_head : 0;
  if (device.is_cuda() && head_dim != 64 && head_dim != 128)
    throw Error("head_dim = model.d_model / model.n_head = " + std::to_string(head_dim) +
                ", but the CUDA attention kernels take head dims 64 and 128; change d_model / n_head, or set device: cpu");
  const std::string fp8_problem = fp8_device_problem(config_in, device);
  if (!fp8_problem.empty()) throw RunError(kExitUsage, fp8_problem);
  const Config config = resolve_offload(config_in, device);
  if (config.train.deterministic_attention) set_deterministic_attention(true);  // else RT_ATTN_DETERMINISTIC decides
  size_t bytes = 0;
  {
    ModelSession measured = measure_session(config, comms, device, with_optimizer);
    bytes = measured.arena->peak();
  }
  ModelSession s;
  s.arena = std::make_unique<Arena>(device, bytes);
  build_into(s, config, comms, device, with_optimizer);
  return s;
}

}  // namespace rt
