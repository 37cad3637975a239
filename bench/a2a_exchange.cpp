// The all-to-all head exchange (parallel.cp_a2a, parallel/cp/context_attention.h) on the mpi communicator, host-staged:
// a FUNCTIONAL check only. On ranks sharing one GPU every exchange is a device -> pinned host copy, MPI's shared
// memory, and a copy back; its GB/s says nothing about NVLink (bench/NOTES.md "The all-to-all exchange" has the
// NVLink model).
//
//   mpirun -np 8 bench_a2a_exchange [--u 2,4,8] [--tokens-per-rank 65536] [--heads 16] [--kv-heads 16]
//        [--head-dim 128] [--warmup 1] [--iters 3] [--device auto|cpu]
//
// Defaults: the 1.41B model of configs/gpt-1b-64k.yaml (16 heads, Hkv 16, D 128, bf16 on the GPU) at 64K tokens per
// rank. For every u the first u world ranks form the a2a group; the others wait. Per u it times the four exchanges
// of one layer as ContextAttention posts them with one head group (forward: Q, K, V out, O back; backward: Q, K, V,
// O, dO out, dQ, dK, dV back) and prints, per exchange and per layer, the bytes each rank sends (its own chunk not
// counted, as `ringtrain plan` counts them), the median time (max over the group's ranks, host clock around a device
// sync and a barrier) and GB/s = bytes sent per rank / time.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/arena.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/context_attention.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include <cuda_runtime.h>

#include "parallel/comm/cuda/nccl_comm.h"
#endif

using namespace rt;

namespace {

struct Options {
  std::vector<int> us{2, 4, 8};
  int64_t tokens_per_rank = 65536, heads = 16, kv_heads = 16, head_dim = 128;
  int warmup = 1, iters = 3;
  std::string device = "auto";
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "bench_a2a_exchange: %s\nusage: mpirun -np <ranks> bench_a2a_exchange [--u 2,4,8] "
               "[--tokens-per-rank 65536] [--heads 16] [--kv-heads 16] [--head-dim 128] [--warmup 1] [--iters 3] "
               "[--device auto|cpu]\n",
               msg.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
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
    if (a == "--u") {
      o.us.clear();
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) o.us.push_back(int(parse_int(a, item)));
    } else if (a == "--tokens-per-rank") {
      o.tokens_per_rank = parse_int(a, value());
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
    } else if (a == "--device") {
      o.device = value();
      if (o.device != "auto" && o.device != "cpu") usage("--device must be auto or cpu");
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  if (o.heads % o.kv_heads != 0) usage("--heads must be a multiple of --kv-heads");
  return o;
}

void device_sync() {
#ifdef RINGTRAIN_HAVE_CUDA
  if (cuda_available()) {
    const cudaError_t err = cudaDeviceSynchronize();
    RT_CHECK(err == cudaSuccess, "cudaDeviceSynchronize: " << cudaGetErrorString(err));
  }
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Exchange {
  const char* name;
  int64_t width;  // elements per token row of one peer's chunk
  DType dtype;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 1, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  try {
    const Options o = parse(argc, argv);
    bool on_gpu = o.device == "auto" && cuda_available();
    int gpu_index = 0;
#ifdef RINGTRAIN_HAVE_CUDA
    if (on_gpu) gpu_index = local_rank_gpu(MPI_COMM_WORLD);
#else
    on_gpu = false;
#endif
    const Device device = on_gpu ? Device::cuda(gpu_index) : Device::cpu();
    const DType act = on_gpu ? DType::bf16 : DType::f32;
    const int64_t B = 1, n = o.tokens_per_rank, D = o.head_dim;
    if (world_rank == 0)
      std::printf("# bench_a2a_exchange: HOST-STAGED mpi communicator, FUNCTIONAL CHECK ONLY (not NVLink); world %d, "
                  "%s, B=1 n=%ld per rank, H=%ld Hkv=%ld D=%ld %s, warmup %d, iters %d\n",
                  world, on_gpu ? "tensors on the GPU (device -> pinned host -> MPI -> host -> device)"
                                : "tensors on the CPU",
                  long(n), long(o.heads), long(o.kv_heads), long(D), dtype_name(act), o.warmup, o.iters);
    for (int u : o.us) {
      if (u > world) {
        if (world_rank == 0) std::printf("u %d: skipped, needs %d ranks (mpirun -np %d)\n", u, u, u);
        continue;
      }
      const RingAttentionShape shape{B, n, o.heads, o.kv_heads, D, act};
      const HeadExchangeShape x = head_exchange_shape(shape, u, 1);
      const int64_t hq = x.q_heads, hk = x.kv_heads;
      const DType grad = x.replicated ? DType::f32 : act;
      const std::vector<Exchange> exchanges{{"fwd Q,K,V out", (hq + 2 * hk) * D, act},
                                            {"fwd O back", hq * D, act},
                                            {"bwd Q,K,V,O,dO out", (3 * hq + 2 * hk) * D, act},
                                            {"bwd dQ,dK,dV back", (hq + 2 * hk) * D, grad}};
      const bool member = world_rank < u;
      MPI_Comm sub = MPI_COMM_NULL;
      MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank, &sub);
      double layer_bytes = 0, layer_s = 0;
      if (member) {
        MpiComm a2a(sub, /*owned=*/true);
        size_t widest = 0;  // bytes of the widest exchange's buffer
        for (const Exchange& e : exchanges)
          widest = std::max(widest, size_t(u * B * n * e.width) * dtype_size(e.dtype));
        for (const Exchange& e : exchanges) {
          Arena arena(device, 2 * widest + 4096);
          const int64_t count = u * B * n * e.width;
          Tensor send = arena.alloc(e.dtype, {count}, "a2a.send");  // (u, B, n, width)
          Tensor recv = arena.alloc(e.dtype, {count}, "a2a.recv");  // (u, B, n, width)
          fill(send, float(world_rank + 1));
          std::vector<double> ms;
          for (int it = 0; it < o.warmup + o.iters; ++it) {
            device_sync();
            a2a.barrier();
            const auto t0 = std::chrono::steady_clock::now();
            a2a.wait(a2a.all_to_all_start(send, recv));
            device_sync();
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, sub);
            if (it >= o.warmup) ms.push_back(s);
          }
          // Functional: chunk p of recv came from rank p (filled with p + 1).
          std::vector<float> host(static_cast<size_t>(count));  // (u, B, n, width) f32
          copy_cast(Tensor(host.data(), DType::f32, Device::cpu(), {count}), recv);
          for (int p = 0; p < u; ++p) {
            const float got = host[size_t(p * B * n * e.width)], want = float(p + 1);
            RT_CHECK(got == want, "bench_a2a_exchange: u " << u << ", " << e.name << ": chunk " << p << " holds "
                                                           << got << ", expected " << want << " from rank " << p);
          }
          const double sent = double(u - 1) * double(B * n * e.width) * double(dtype_size(e.dtype));
          const double t = median(ms);
          layer_bytes += sent, layer_s += t;
          if (world_rank == 0)
            std::printf("u %d  %-20s sent per rank %8.3f GB  %9.2f ms  %7.2f GB/s  (host-staged, functional)\n", u,
                        e.name, sent / 1e9, t * 1e3, sent / t / 1e9);
        }
        if (world_rank == 0)
          std::printf("u %d  %-20s sent per rank %8.3f GB  %9.2f ms  %7.2f GB/s  (plan: %.3f GB; host-staged, "
                      "functional)\n",
                      u, "per layer", layer_bytes / 1e9, layer_s * 1e3, layer_bytes / layer_s / 1e9,
                      (x.forward_bytes + x.backward_bytes) / 1e9);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_a2a_exchange: error on rank %d: %s\n", world_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
