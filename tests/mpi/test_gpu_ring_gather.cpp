// Packed documents on a ring of GPU ranks, both schemes (parallel.cp_scheme: ring and gather;
// parallel/schedule/cp_scheme.h):
// O, LSE, dQ, dK, dV against the whole sample on the CPU (test::document_attention_reference: f32 kernels, the same
// document mask, bf16-rounded inputs), next to one GPU rank running the whole sample. Two samples with different
// documents (length-1 documents and odd lengths; one document over half the sample), cp in {2, 4, 8} (up to the world
// size), contiguous, zigzag and balanced (each sample's order from its documents), head dims 64 and 128, GQA.
//   one H200:     `mpirun -np 4` (ctest, labels mpi;gpu): the ranks share the GPU through the mpi communicator
//   a GPU node:   `mpirun -np <GPUs>` with RINGTRAIN_TEST_COMM=nccl (bench/multi_gpu.sh): NCCL, one GPU per rank
// (tests/mpi/gpu_rank_placement.h). Skips without a CUDA device.
//
// Tolerances as tests/mpi/test_gpu_ring_attention.cpp: O, dQ, dK, dV come back in bf16, state and LSE are f32;
//   every quantity, every cp and scheme:  ||got - ref|| / ||ref|| <= 1.5e-2
//   the ring adds no error:               err <= 1.5 * err(one GPU rank) + 2e-3
// The gather also checks its bytes: what the ranks sent is what its plan says, and less than the ring's; and runs
// once more with its backward's own call split in two at a forced key row (parallel/cp/gather_backward.h: n / 2, two
// samples, so the parts run as key ranges on bwd v5 / v4), held to the same bounds.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "kernels/device_memory.h"
#include "parallel/cp/ring_attention.h"
#include "parallel/schedule/doc_balance.h"
#include "tests/mpi/gpu_rank_placement.h"
#include "tests/mpi/mpi_world.h"
#include "tests/mpi/ring_attention_harness.h"

using namespace rt;

namespace {

constexpr double kTolerance = 1.5e-2;
constexpr double kGrowth = 1.5, kSlack = 2e-3;
constexpr int64_t kB = 2, kT = 256, kH = 4, kHkv = 2;

using rt::test::gpu_present;
using rt::test::world_rank;

// Document starts (T) of a sample cut into the given lengths, cycled.
std::vector<int64_t> starts_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> start(static_cast<size_t>(kT));
  int64_t p = 0;
  for (size_t k = 0; p < kT; k = (k + 1) % lengths.size()) {
    for (int64_t t = 0; t < lengths[k] && p + t < kT; ++t) start[size_t(p + t)] = p;
    p += lengths[k];
  }
  return start;
}

// Sample 0: short documents, length 1 among them; sample 1: odd lengths, one of them half the sample.
const std::vector<std::vector<int64_t>> kLengths = {{1, 7, 1, 23, 2, 40, 5, 1, 17}, {13, 128, 1, 37, 77}};

// The ring order (B, T) of a layout (every sample alike), or balanced's per sample.
std::vector<int64_t> ring_order(const std::string& layout, int cp) {
  std::vector<int64_t> order;
  for (int64_t b = 0; b < kB; ++b) {
    const std::vector<int64_t> o = layout == "balanced" ? balanced_ring_order(starts_of(kLengths[size_t(b)]), cp)
                                                        : layout_ring_order(parse_layout(layout), kT, cp);
    order.insert(order.end(), o.begin(), o.end());
  }
  return order;
}

struct GpuRun {
  test::RelErrors rel{};
  double bad = 0;                              // non-finite outputs over the ranks
  double sent = 0, planned = 0, ring = 0;      // bytes over the ranks: sent, the plan's, the plain ring's
  bool scheme_ran = true;                      // every member ran the scheme it was given
  int one_launch_ranks = 0;                    // members whose gather forward ran in one launch
  int one_launch_bwd_ranks = 0;                // and whose backward did
};

// One ring of cp GPU ranks (world ranks [0, cp)) on bf16 tensors with the document mask on the device (and its host
// copies), running `scheme`; outputs poisoned, compared with `ref` per sample's order. Collective over the world.
// own_split >= 0: the gather's own backward split forced there (RingAttention::set_gather_own_split);
// one_launch >= 0: its forward and backward in one launch forced off (0) or on (1)
// (RingAttention::set_gather_fwd_one_launch, set_gather_bwd_one_launch). GpuRun::one_launch_ranks and
// one_launch_bwd_ranks count the ranks that ran them.
GpuRun run_gpu_docs(const test::AttentionProblem& p, const test::AttentionReference& ref,
                    const std::vector<int64_t>& order, int cp, CpScheme scheme, const test::GpuRankPlacement& place,
                    int64_t own_split = -1, int one_launch = -1) {
  const int64_t T = kT, n = T / cp, D = p.D;
  std::vector<int64_t> pos(size_t(kB * T)), start(size_t(kB * T));  // (B, T) ring order
  for (int64_t b = 0; b < kB; ++b) {
    const std::vector<int64_t> s = starts_of(kLengths[size_t(b)]);
    for (int64_t c = 0; c < T; ++c) {
      pos[size_t(b * T + c)] = order[size_t(b * T + c)];
      start[size_t(b * T + c)] = s[size_t(order[size_t(b * T + c)])];
    }
  }
  const bool member = world_rank() < cp;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  test::ErrSum err[test::kNumQuantities];
  GpuRun run;
  // sent, planned, ring, members that did not run the scheme, one-launch ranks forward, backward
  double bytes[6] = {0, 0, 0, 0, 0, 0};
  if (member) {
    std::shared_ptr<Comm> comm = test::make_test_comm(sub, place);
    const int r = comm->rank();
    Arena arena(Device::cuda(place.device), size_t(64) << 20);
    const DType bf = DType::bf16;
    Tensor q = arena.alloc(bf, {kB, n, kH, D}, "q"), k = arena.alloc(bf, {kB, n, kHkv, D}, "k");
    Tensor v = arena.alloc(bf, {kB, n, kHkv, D}, "v"), dout = arena.alloc(bf, {kB, n, kH, D}, "do");
    Tensor out = arena.alloc(bf, {kB, n, kH, D}, "o"), lse = arena.alloc(DType::f32, {kB, kH, n}, "lse");
    Tensor dq = arena.alloc(bf, {kB, n, kH, D}, "dq"), dk = arena.alloc(bf, {kB, n, kHkv, D}, "dk");
    Tensor dv = arena.alloc(bf, {kB, n, kHkv, D}, "dv");
    Tensor dpos = arena.alloc(DType::i32, {kB, T, 2}, "doc pos"), dstart = arena.alloc(DType::i32, {kB, T, 2}, "start");
    test::upload_i32(dpos, std::vector<int32_t>(reinterpret_cast<const int32_t*>(pos.data()),
                                                reinterpret_cast<const int32_t*>(pos.data()) + 2 * pos.size()));
    test::upload_i32(dstart, std::vector<int32_t>(reinterpret_cast<const int32_t*>(start.data()),
                                                  reinterpret_cast<const int32_t*>(start.data()) + 2 * start.size()));
    // This rank's rows of every sample: its columns [r*n, (r+1)*n) of the ring order.
    auto rows_of = [&](const std::vector<float>& x, int64_t row) {
      std::vector<float> o(size_t(kB * n * row));  // (B, n, row)
      for (int64_t b = 0; b < kB; ++b)
        for (int64_t t = 0; t < n; ++t)
          for (int64_t e = 0; e < row; ++e)
            o[size_t((b * n + t) * row + e)] = x[size_t((b * T + pos[size_t(b * T + r * n + t)]) * row + e)];
      return o;
    };
    test::upload(q, rows_of(p.q, kH * D));
    test::upload(k, rows_of(p.k, kHkv * D));
    test::upload(v, rows_of(p.v, kHkv * D));
    test::upload(dout, rows_of(p.dout, kH * D));
    for (const Tensor& t : {out, lse, dq, dk, dv}) fill(t, std::nanf(""));  // poison
    RingAttention attn(*comm, Layout::contiguous, /*causal=*/true, {kB, n, kH, kHkv, D, bf}, arena, DType::f32,
                       /*gather=*/scheme == CpScheme::gather);
    if (own_split >= 0) attn.set_gather_own_split(own_split);
    if (one_launch >= 0) attn.set_gather_fwd_one_launch(one_launch);
    if (one_launch >= 0) attn.set_gather_bwd_one_launch(one_launch);
    attn.set_documents(static_cast<const int64_t*>(dpos.data), static_cast<const int64_t*>(dstart.data), pos.data(),
                       start.data(), scheme);
    attn.forward(q, k, v, out, lse);
    attn.backward(q, k, v, out, dout, lse, dq, dk, dv);
    bytes[0] = attn.timings().sent_bytes;
    bytes[1] = r == 0 ? attn.planned_bytes_per_layer() : 0;  // the plan's total over the ranks, once
    bytes[2] = attn.timings().ring_bytes;
    const bool split_ran = own_split < 0 || attn.gather_own_split() == own_split;
    bytes[3] = (cp > 1 && attn.scheme() != scheme) || !split_ran ? 1 : 0;
    bytes[4] = attn.gather_fwd_one_launch() ? 1 : 0;
    bytes[5] = attn.gather_bwd_one_launch() ? 1 : 0;
    const std::vector<float> got[test::kNumQuantities] = {test::download(out), test::download(lse),
                                                          test::download(dq), test::download(dk), test::download(dv)};
    const std::vector<double>* want[test::kNumQuantities] = {&ref.out, &ref.lse, &ref.dq, &ref.dk, &ref.dv};
    const int64_t width[test::kNumQuantities] = {kH * D, kH, kH * D, kHkv * D, kHkv * D};
    for (int qn = 0; qn < test::kNumQuantities; ++qn)
      for (int64_t b = 0; b < kB; ++b)
        for (int64_t t = 0; t < n; ++t)
          for (int64_t c = 0; c < width[qn]; ++c) {
            const int64_t gp = pos[size_t(b * T + r * n + t)];
            const bool token_major = qn != test::kLse;
            const double g = token_major ? got[qn][size_t((b * n + t) * width[qn] + c)]
                                         : got[qn][size_t((b * kH + c) * n + t)];
            const double w = token_major ? (*want[qn])[size_t((b * T + gp) * width[qn] + c)]
                                         : (*want[qn])[size_t((b * kH + c) * T + gp)];
            if (!std::isfinite(g)) err[qn].bad += 1;
            err[qn].diff2 += (g - w) * (g - w);
            err[qn].ref2 += w * w;
          }
  }
  MPI_Allreduce(MPI_IN_PLACE, bytes, 6, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  run.one_launch_ranks = int(bytes[4]);
  run.one_launch_bwd_ranks = int(bytes[5]);
  run.rel = test::reduce_errors(err, &run.bad);
  run.sent = bytes[0], run.planned = bytes[1], run.ring = bytes[2], run.scheme_ran = bytes[3] == 0;
  return run;
}

}  // namespace

class GpuRingGather : public ::testing::TestWithParam<int> {};

TEST_P(GpuRingGather, BothSchemesMatchTheCpuAndOneGpu) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const int head_dim = GetParam();
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ASSERT_GE(world, 2) << "run with mpirun -np 4 (one GPU) or -np <GPUs>";
  const test::GpuRankPlacement placement = test::gpu_rank_placement();
  ASSERT_TRUE(placement.error.empty()) << placement.error;
  const test::AttentionProblem p =
      test::make_attention_problem(head_dim == 64 ? 31 : 37, kB, kT, kH, kHkv, head_dim, /*round_to_bf16=*/true);
  const test::AttentionReference ref =
      test::document_attention_reference(p, {starts_of(kLengths[0]), starts_of(kLengths[1])});
  const GpuRun one = run_gpu_docs(p, ref, ring_order("contiguous", 1), 1, CpScheme::ring, placement);
  EXPECT_EQ(one.bad, 0) << "non-finite outputs on one GPU rank";
  for (int cp : {2, 4, 8}) {
    if (cp > world) break;
    for (const std::string layout : {"contiguous", "zigzag", "balanced"})
      // ring; gather; gather with its own backward split forced; gather with its forward and backward in one launch
      // forced on, then off.
      for (int variant = 0; variant < 5; ++variant) {
        const CpScheme scheme = variant == 0 ? CpScheme::ring : CpScheme::gather;
        const int64_t own_split = variant == 2 ? kT / cp / 2 : -1;
        const int one_launch = variant == 3 ? 1 : variant == 4 ? 0 : -1;
        const char* tag[] = {"", "", " split", " one launch", " two calls"};
        const std::string what = layout + " " + cp_scheme_name(scheme) + tag[variant] + " cp=" + std::to_string(cp);
        const GpuRun run =
            run_gpu_docs(p, ref, ring_order(layout, cp), cp, scheme, placement, own_split, one_launch);
        if (variant == 3 && run.sent > 0) {  // a rank that receives rows runs one launch
          EXPECT_GT(run.one_launch_ranks, 0) << what << ": no rank ran its forward in one launch";
          EXPECT_GT(run.one_launch_bwd_ranks, 0) << what << ": no rank ran its backward in one launch";
        }
        if (variant == 4) {
          EXPECT_EQ(run.one_launch_ranks + run.one_launch_bwd_ranks, 0) << what;
        }
        EXPECT_EQ(run.bad, 0) << "non-finite outputs: " << what;
        EXPECT_TRUE(run.scheme_ran) << what;
        for (int i = 0; i < test::kNumQuantities; ++i) {
          const char* name = test::kQuantityNames[i];
          EXPECT_LE(run.rel[size_t(i)], kTolerance) << name << " " << what;
          EXPECT_LE(run.rel[size_t(i)], kGrowth * one.rel[size_t(i)] + kSlack)
              << name << " " << what << ": the ring adds error over one GPU rank's " << one.rel[size_t(i)];
        }
        if (scheme == CpScheme::gather) {
          EXPECT_NEAR(run.sent, run.planned, 1e-9 * run.ring) << what;
          EXPECT_LT(run.sent, run.ring) << what;
        }
        if (world_rank() == 0)
          std::printf("[ %s D=%d comm=%s ] rel err O %.1e LSE %.1e dQ %.1e dK %.1e dV %.1e | bytes %.0f of the "
                      "ring's %.0f\n",
                      what.c_str(), head_dim, placement.comm_name(), run.rel[0], run.rel[1], run.rel[2], run.rel[3],
                      run.rel[4], run.sent, run.ring);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, GpuRingGather, ::testing::Values(64, 128),
                         [](const auto& info) { return std::string(info.param == 64 ? "d64" : "d128"); });
