// Ring-attention scaling benchmark (issue 8): forward and backward of RingAttention on cp ranks, causal,
// B = 1, H heads of head_dim D, with n tokens per rank (weak scaling: the sequence is cp x n).
// Run under mpirun with one rank per GPU (NCCL) -- or several ranks on one GPU (mpi communicator; a
// functional run only). For every cp in the list the first cp world ranks form the ring; the others wait.
//
//   mpirun -np <GPUs> bench_ring_attention [--tokens-per-rank 8192,16384,32768] [--cp 1,2,4,8]
//        [--layouts zigzag,contiguous] [--heads 16] [--kv-heads 16] [--head-dim 128] [--warmup 2] [--iters 5]
//        [--comm auto|nccl|mpi] [--jsonl PATH]
//
// Per (cp, layout, n) it prints the median wall time of a forward and of a backward (max over the ring's
// ranks, host clock around a device sync and a barrier), the per-GPU TFLOP/s by the standard count (causal:
// 2*B*H*S^2*D forward over the whole sequence S = cp*n, divided by cp; backward 2.5x), the weak-scaling
// efficiency (per-GPU TFLOP/s over cp = 1's at the same n) and the exposed communication per ring step
// (RingAttention's timers: time the compute stream waited for a hop; max over ranks, median over calls).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/arena.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include <cuda_runtime.h>

#include "parallel/comm/cuda/nccl_comm.h"
#endif

using namespace rt;

namespace {

struct Options {
  std::vector<int64_t> tokens_per_rank{8192, 16384, 32768};
  std::vector<int> cps;  // empty: powers of two up to the world size, and the world size
  std::vector<std::string> layouts{"zigzag", "contiguous"};
  int64_t heads = 16, kv_heads = 16, head_dim = 128;
  int warmup = 2, iters = 5;
  std::string comm = "auto", jsonl;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "bench_ring_attention: %s\nusage: mpirun -np <ranks> bench_ring_attention [--tokens-per-rank "
               "8192,16384] [--cp 1,2,4] [--layouts zigzag,contiguous] [--heads 16] [--kv-heads 16] "
               "[--head-dim 128] [--warmup 2] [--iters 5] [--comm auto|nccl|mpi] [--jsonl PATH]\n",
               msg.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t parse_int(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size() && x > 0) return x;
  } catch (...) {
  }
  usage(flag + " needs positive integers, got '" + v + "'");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokens-per-rank") {
      o.tokens_per_rank.clear();
      for (const auto& s : split_list(value())) o.tokens_per_rank.push_back(parse_int(a, s));
    } else if (a == "--cp") {
      for (const auto& s : split_list(value())) o.cps.push_back(int(parse_int(a, s)));
    } else if (a == "--layouts") {
      o.layouts = split_list(value());
    } else if (a == "--heads") {
      o.heads = parse_int(a, value());
    } else if (a == "--kv-heads") {
      o.kv_heads = parse_int(a, value());
    } else if (a == "--head-dim") {
      o.head_dim = parse_int(a, value());
    } else if (a == "--warmup") {
      o.warmup = int(parse_int(a, value()));
    } else if (a == "--iters") {
      o.iters = int(parse_int(a, value()));
    } else if (a == "--comm") {
      o.comm = value();
      if (o.comm != "auto" && o.comm != "nccl" && o.comm != "mpi") usage("--comm must be auto, nccl or mpi");
    } else if (a == "--jsonl") {
      o.jsonl = value();
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  for (const auto& l : o.layouts) (void)parse_layout(l);  // throws with the valid names
  if (o.heads % o.kv_heads != 0) usage("--heads must be a multiple of --kv-heads");
  return o;
}

void device_sync() {
#ifdef RINGTRAIN_HAVE_CUDA
  const cudaError_t err = cudaDeviceSynchronize();
  RT_CHECK(err == cudaSuccess, "cudaDeviceSynchronize: " << cudaGetErrorString(err));
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Fills a tensor with N(0, 1) values: a pool of random values tiled with a per-tensor offset.
void fill_random(const Tensor& t, const std::vector<float>& pool, size_t offset) {
  std::vector<float> host(size_t(t.numel()));  // (numel) f32
  for (size_t i = 0; i < host.size(); ++i) host[i] = pool[(i * 7 + offset) % pool.size()];
  copy_cast(t, Tensor(host.data(), DType::f32, Device::cpu(), {t.numel()}));
}

struct Row {
  int cp = 1;
  std::string layout, comm;
  int64_t n = 0;
  double fwd_ms = 0, bwd_ms = 0, fwd_tflops = 0, bwd_tflops = 0, total_tflops = 0;
  double fwd_exposed_ms_per_step = 0, bwd_exposed_ms_per_step = 0, exposed_share = 0;
  double weak_efficiency = 0;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 1, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  try {
    const Options o = parse(argc, argv);
    RT_CHECK(cuda_available(), "bench_ring_attention needs a CUDA device (none is visible)");
#ifdef RINGTRAIN_HAVE_CUDA
    const int device = local_rank_gpu(MPI_COMM_WORLD);
    const bool shared = ranks_share_gpu(MPI_COMM_WORLD, device);
    RT_CHECK(!(o.comm == "nccl" && shared), "--comm nccl, but ranks share a GPU: launch one rank per GPU");
    const bool use_nccl = !shared && o.comm != "mpi";
#else
    const int device = 0;
    const bool use_nccl = false;
#endif
    const Device gpu = Device::cuda(device);
    std::vector<int> cps = o.cps;
    if (cps.empty()) {
      for (int c = 1; c <= world; c *= 2) cps.push_back(c);
      if (cps.back() != world) cps.push_back(world);
    }
    for (int c : cps) RT_CHECK(c <= world, "--cp " << c << " needs " << c << " ranks; this run has " << world);

    std::vector<float> pool(size_t(1) << 20);  // (2^20) N(0,1) values
    {
      std::mt19937_64 rng(1234);
      std::normal_distribution<float> normal(0.f, 1.f);
      for (float& x : pool) x = normal(rng);
    }
    const int64_t B = 1, H = o.heads, Hkv = o.kv_heads, D = o.head_dim;
    std::vector<Row> rows;
    if (world_rank == 0)
      std::printf("# bench_ring_attention: world %d, %s, B=1 H=%ld Hkv=%ld D=%ld causal, warmup %d, iters %d\n",
                  world, use_nccl ? "NCCL (one GPU per rank)" : "mpi communicator (host-staged; FUNCTIONAL)",
                  long(H), long(Hkv), long(D), o.warmup, o.iters);
    for (int cp : cps) {
      const bool member = world_rank < cp;
      MPI_Comm sub = MPI_COMM_NULL;
      MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank, &sub);
      std::shared_ptr<Comm> ring;
      if (member) {
#ifdef RINGTRAIN_HAVE_CUDA
        if (use_nccl) ring = std::make_shared<NcclComm>(sub, device);  // duplicates `sub`
#endif
        if (!ring) ring = std::make_shared<MpiComm>(sub, /*owned=*/false);
      }
      for (int64_t n : o.tokens_per_rank) {
        for (const std::string& layout_name_str : cp == 1 ? std::vector<std::string>{"single"} : o.layouts) {
          Row row;
          row.cp = cp, row.n = n, row.layout = layout_name_str, row.comm = cp == 1 ? "-" : (use_nccl ? "nccl" : "mpi");
          if (member) {
            const Layout layout = cp == 1 ? Layout::contiguous : parse_layout(layout_name_str);
            const RingAttentionShape shape{B, n, H, Hkv, D, DType::bf16};
            Arena measure = Arena::measuring(gpu);
            auto alloc_all = [&](Arena& a) {
              std::vector<Tensor> t;
              t.push_back(a.alloc(DType::bf16, {B, n, H, D}, "q"));    // (B, n, H, D)
              t.push_back(a.alloc(DType::bf16, {B, n, Hkv, D}, "k"));  // (B, n, Hkv, D)
              t.push_back(a.alloc(DType::bf16, {B, n, Hkv, D}, "v"));  // (B, n, Hkv, D)
              t.push_back(a.alloc(DType::bf16, {B, n, H, D}, "do"));   // (B, n, H, D)
              t.push_back(a.alloc(DType::bf16, {B, n, H, D}, "o"));    // (B, n, H, D)
              t.push_back(a.alloc(DType::f32, {B, H, n}, "lse"));      // (B, H, n)
              t.push_back(a.alloc(DType::bf16, {B, n, H, D}, "dq"));   // (B, n, H, D)
              t.push_back(a.alloc(DType::bf16, {B, n, Hkv, D}, "dk")); // (B, n, Hkv, D)
              t.push_back(a.alloc(DType::bf16, {B, n, Hkv, D}, "dv")); // (B, n, Hkv, D)
              return t;
            };
            alloc_all(measure);
            { RingAttention probe(*ring, layout, true, shape, measure); }
            Arena arena(gpu, measure.peak());
            const std::vector<Tensor> t = alloc_all(arena);
            RingAttention attn(*ring, layout, true, shape, arena);
            for (int i = 0; i < 4; ++i) fill_random(t[size_t(i)], pool, size_t(i) * 104729);
            std::vector<double> fwd_ms, bwd_ms, fwd_exp, bwd_exp;
            for (int it = 0; it < o.warmup + o.iters; ++it) {
              double sample[4];
              device_sync();
              ring->barrier();
              auto t0 = std::chrono::steady_clock::now();
              attn.forward(t[0], t[1], t[2], t[4], t[5]);
              device_sync();
              auto t1 = std::chrono::steady_clock::now();
              const RingTimings f = attn.last_call_timings();
              ring->barrier();
              auto t2 = std::chrono::steady_clock::now();
              attn.backward(t[0], t[1], t[2], t[4], t[3], t[5], t[6], t[7], t[8]);
              device_sync();
              auto t3 = std::chrono::steady_clock::now();
              const RingTimings b = attn.last_call_timings();
              sample[0] = std::chrono::duration<double, std::milli>(t1 - t0).count();
              sample[1] = std::chrono::duration<double, std::milli>(t3 - t2).count();
              sample[2] = f.steps ? 1e3 * f.exposed_comm_s / double(f.steps) : 0;
              sample[3] = b.steps ? 1e3 * b.exposed_comm_s / double(b.steps) : 0;
              // The ring is as slow as its slowest rank.
              MPI_Allreduce(MPI_IN_PLACE, sample, 4, MPI_DOUBLE, MPI_MAX, sub);
              if (it < o.warmup) continue;
              fwd_ms.push_back(sample[0]), bwd_ms.push_back(sample[1]);
              fwd_exp.push_back(sample[2]), bwd_exp.push_back(sample[3]);
            }
            row.fwd_ms = median(fwd_ms), row.bwd_ms = median(bwd_ms);
            row.fwd_exposed_ms_per_step = median(fwd_exp), row.bwd_exposed_ms_per_step = median(bwd_exp);
            const double S = double(cp) * double(n);
            const double fwd_flop_per_gpu = 2.0 * B * H * S * S * D / cp;  // causal: half of 4*B*H*S^2*D
            row.fwd_tflops = fwd_flop_per_gpu / (row.fwd_ms * 1e-3) / 1e12;
            row.bwd_tflops = 2.5 * fwd_flop_per_gpu / (row.bwd_ms * 1e-3) / 1e12;
            row.total_tflops = 3.5 * fwd_flop_per_gpu / ((row.fwd_ms + row.bwd_ms) * 1e-3) / 1e12;
            row.exposed_share = cp * (row.fwd_exposed_ms_per_step + row.bwd_exposed_ms_per_step) /
                                (row.fwd_ms + row.bwd_ms);
          }
          MPI_Barrier(MPI_COMM_WORLD);
          if (world_rank == 0) {
            const auto base = std::find_if(rows.begin(), rows.end(),
                                           [&](const Row& r) { return r.cp == 1 && r.n == n; });
            row.weak_efficiency = base != rows.end() ? row.total_tflops / base->total_tflops : 0;
            std::printf("cp=%d layout=%-10s n/rank=%6ld S=%7ld comm=%-4s | fwd %8.2f ms %6.1f TF/s/GPU | bwd %8.2f "
                        "ms %6.1f TF/s/GPU | fwd+bwd %6.1f TF/s/GPU, weak eff %5.1f%% | exposed comm/step fwd %.3f "
                        "bwd %.3f ms (%.1f%% of the call)\n",
                        cp, row.layout.c_str(), long(n), long(cp * n), row.comm.c_str(), row.fwd_ms,
                        row.fwd_tflops, row.bwd_ms, row.bwd_tflops, row.total_tflops, 100 * row.weak_efficiency,
                        row.fwd_exposed_ms_per_step, row.bwd_exposed_ms_per_step, 100 * row.exposed_share);
            std::fflush(stdout);
            rows.push_back(row);
          }
        }
      }
      ring.reset();
      if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
    }
    if (world_rank == 0 && !o.jsonl.empty()) {
      FILE* f = std::fopen(o.jsonl.c_str(), "w");
      RT_CHECK(f, "cannot write " << o.jsonl);
      for (const Row& r : rows)
        std::fprintf(f,
                     "{\"kind\":\"ring_attention\",\"cp\":%d,\"layout\":\"%s\",\"comm\":\"%s\",\"tokens_per_rank\":%ld,"
                     "\"heads\":%ld,\"kv_heads\":%ld,\"head_dim\":%ld,\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,"
                     "\"fwd_tflops_per_gpu\":%.2f,\"bwd_tflops_per_gpu\":%.2f,\"tflops_per_gpu\":%.2f,"
                     "\"weak_efficiency\":%.4f,\"fwd_exposed_ms_per_step\":%.4f,\"bwd_exposed_ms_per_step\":%.4f,"
                     "\"exposed_share\":%.4f}\n",
                     r.cp, r.layout.c_str(), r.comm.c_str(), long(r.n), long(H), long(Hkv), long(D), r.fwd_ms,
                     r.bwd_ms, r.fwd_tflops, r.bwd_tflops, r.total_tflops, r.weak_efficiency,
                     r.fwd_exposed_ms_per_step, r.bwd_exposed_ms_per_step, r.exposed_share);
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ring_attention: error on rank %d: %s\n", world_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
