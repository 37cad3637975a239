// The K/V E4M3 wire suites' runs (tests/mpi/test_ring_kv_fp8_wire.cpp on CPU ranks, tests/mpi/
// test_gpu_ring_kv_fp8_wire.cpp on GPU ranks): one rank's forward and backward with RingAttention::set_kv_wire on or
// off, the one-rank call as a reference, and a ring on world ranks [0, cp) compared with it, with the bytes it moved.
// Header-only; each test file includes it once.
#pragma once
#include <mpi.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"
#include "tests/mpi/mpi_world.h"
#include "tests/mpi/ring_attention_harness.h"

namespace rt::test::kvwire {

// How a ring runs: K/V on the wire in e4m3 or as they are; the FP8 backward (fp8.attention) on or off.
struct WireMode {
  bool e4m3 = false;
  bool fp8_backward = false;
};

// Where: tensors in `dtype` on `device` (LSE f32), the ring's communicator over an MPI communicator (taken over).
struct Where {
  Device device = Device::cpu();
  DType dtype = DType::f32;
  std::function<std::shared_ptr<Comm>(MPI_Comm)> make_comm = [](MPI_Comm c) {
    return std::make_shared<MpiComm>(c, /*owned=*/true);
  };
};

// One rank's outputs (B, n, ...) in its layout order, and what its ring moved.
struct RankRun {
  std::vector<float> out, lse, dq, dk, dv;  // (B,n,H,D), (B,H,n), (B,n,H,D), (B,n,Hkv,D) x2
  double fwd_sent = 0, bwd_sent = 0;        // this rank's bytes of the forward call and of the backward call
  double planned = 0, full = 0;             // planned_bytes_per_layer, ring_bytes_per_layer (over all ranks)
};

// Packed documents (CPU ranks): per sample, the first position of each position's document (T, natural order).
using DocStarts = std::vector<std::vector<int64_t>>;

// Forward and backward of `p` on `ring` (its rank's layout positions), outputs poisoned with NaN before the calls;
// with `docs`, under their document mask (RingAttention::set_documents, the ring scheme; host arrays: CPU only).
inline RankRun run_rank(Comm& ring, const AttentionProblem& p, Layout layout, WireMode mode, const Where& at,
                        const DocStarts* docs = nullptr) {
  const std::vector<int64_t> pos = layout_positions(layout, p.T, ring.size(), ring.rank());
  const int64_t n = int64_t(pos.size()), B = p.B, H = p.H, Hkv = p.Hkv, D = p.D;
  const DType dt = at.dtype;
  Arena arena(at.device, size_t(128) << 20);
  const RankTensors t = rank_tensors(arena, p, pos, dt);
  const Tensor &q = t.q, &k = t.k, &v = t.v, &dout = t.dout, &out = t.out, &lse = t.lse, &dq = t.dq, &dk = t.dk,
               &dv = t.dv;
  RingAttention attn(ring, layout, /*causal=*/true, {B, n, H, Hkv, D, dt}, arena);
  attn.set_fp8_backward(mode.fp8_backward, &arena);
  if (mode.e4m3) attn.set_kv_wire(DType::e4m3, arena);
  std::vector<int64_t> ring_pos, ring_start;  // (B, T) in ring order (kept alive for the calls)
  if (docs) {
    EXPECT_TRUE(at.device.is_cpu()) << "documents from host arrays: CPU ranks only";
    ring_pos = layout_ring_order(layout, B, p.T, ring.size());
    ring_start.resize(ring_pos.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < p.T; ++c)
        ring_start[size_t(b * p.T + c)] = (*docs)[size_t(b)][size_t(ring_pos[size_t(b * p.T + c)])];
    attn.set_documents(ring_pos.data(), ring_start.data());
  }
  EXPECT_EQ(attn.kv_wire(), mode.e4m3 ? DType::e4m3 : dt);
  RankRun r;
  attn.forward(q, k, v, out, lse);
  r.fwd_sent = attn.last_call_timings().sent_bytes;
  attn.backward(q, k, v, out, dout, lse, dq, dk, dv);
  r.bwd_sent = attn.last_call_timings().sent_bytes;
  r.planned = attn.planned_bytes_per_layer(), r.full = attn.ring_bytes_per_layer();
  r.out = download(out), r.lse = download(lse), r.dq = download(dq), r.dk = download(dk), r.dv = download(dv);
  return r;
}

// The one-rank call (cp = 1; every world rank computes it alone) as the reference a ring is compared with.
inline AttentionReference one_rank(const AttentionProblem& p, WireMode mode, const Where& at,
                                   const DocStarts* docs = nullptr) {
  MPI_Comm self = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  MpiComm comm(self, /*owned=*/true);
  const RankRun r = run_rank(comm, p, Layout::contiguous, mode, at, docs);
  AttentionReference ref;
  ref.out.assign(r.out.begin(), r.out.end());
  ref.lse.assign(r.lse.begin(), r.lse.end());
  ref.dq.assign(r.dq.begin(), r.dq.end());
  ref.dk.assign(r.dk.begin(), r.dk.end());
  ref.dv.assign(r.dv.begin(), r.dv.end());
  return ref;
}

// What a ring of cp ranks did, over all its ranks.
struct RingResult {
  RelErrors rel{};  // against the reference
  double bad = 0;   // non-finite outputs
  // Bytes: sent summed over the ring's ranks; planned and full are the planner's (already over all ranks).
  double fwd_sent = 0, bwd_sent = 0, planned = 0, full = 0;
};

// The ring on world ranks [0, cp) (the others only join the reductions), compared with `ref`.
inline RingResult run_ring(const AttentionProblem& p, const AttentionReference& ref, int cp, Layout layout,
                           WireMode mode, const Where& at, const DocStarts* docs = nullptr) {
  const bool member = world_rank() < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  ErrSum err[kNumQuantities];
  double bytes[4] = {0, 0, 0, 0};  // fwd_sent, bwd_sent (summed), planned, full (rank 0's)
  if (member) {
    std::shared_ptr<Comm> ring = at.make_comm(sub);
    const RankRun r = run_rank(*ring, p, layout, mode, at, docs);
    const std::vector<int64_t> pos = layout_positions(layout, p.T, cp, ring->rank());
    accumulate(err[kOut], r.out, ref.out, p.B, p.T, p.H * p.D, pos, true);
    accumulate(err[kLse], r.lse, ref.lse, p.B, p.T, p.H, pos, false);
    accumulate(err[kDq], r.dq, ref.dq, p.B, p.T, p.H * p.D, pos, true);
    accumulate(err[kDk], r.dk, ref.dk, p.B, p.T, p.Hkv * p.D, pos, true);
    accumulate(err[kDv], r.dv, ref.dv, p.B, p.T, p.Hkv * p.D, pos, true);
    bytes[0] = r.fwd_sent, bytes[1] = r.bwd_sent;
    if (ring->rank() == 0) bytes[2] = r.planned, bytes[3] = r.full;
  }
  MPI_Allreduce(MPI_IN_PLACE, bytes, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  RingResult res;
  res.rel = reduce_errors(err, &res.bad);
  res.fwd_sent = bytes[0], res.bwd_sent = bytes[1], res.planned = bytes[2], res.full = bytes[3];
  return res;
}

}  // namespace rt::test::kvwire
