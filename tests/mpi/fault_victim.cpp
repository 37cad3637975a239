// A tiny ring job for the fault test: every rank runs one ring-attention forward over MPI_COMM_WORLD inside
// run_or_abort. With RINGTRAIN_TEST_FAULT_RANK=r, rank r throws while its peers wait in the ring exchange;
// the job must end non-zero, promptly, with the rank named on stderr. Without it the job exits 0.
#include <mpi.h>

#include <random>
#include <vector>

#include "kernels/arena.h"
#include "parallel/comm/fault.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int rc = rt::run_or_abort([] {
    auto world = rt::make_mpi_world_comm();
    const int64_t B = 1, n = 8, H = 2, Hkv = 1, D = 4;
    std::mt19937 rng(unsigned(world->rank()) + 1);
    std::normal_distribution<float> normal;
    std::vector<float> q(size_t(B * n * H * D)), kv(size_t(B * n * Hkv * D)), out(q.size()), lse(size_t(B * H * n));
    for (float& e : q) e = normal(rng);
    for (float& e : kv) e = normal(rng);
    rt::Arena arena(rt::Device::cpu(), size_t(1) << 20);
    rt::RingAttention attn(*world, rt::Layout::zigzag, true, {B, n, H, Hkv, D, rt::DType::f32}, arena);
    auto t4 = [&](std::vector<float>& x, int64_t heads) {
      return rt::Tensor(x.data(), rt::DType::f32, rt::Device::cpu(), {B, n, heads, D});
    };
    attn.forward(t4(q, H), t4(kv, Hkv), t4(kv, Hkv), t4(out, H),
                 rt::Tensor(lse.data(), rt::DType::f32, rt::Device::cpu(), {B, H, n}));
    world->barrier();
    return 0;
  });
  MPI_Finalize();
  return rc;
}
