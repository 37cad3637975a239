// The ZeRO-3 weight gather in E4M3 (framework/model/zero_fp8_gather.h) on two ranks in one process (threads over a
// small all-gather board): a unit whose fused [w1; w3] matrix is split across the two shards (w1 on rank 0, w3 on
// rank 1, one factor for both), a plain matrix on one rank, and two norms with alignment gaps. After the amaxes,
// the encode, the two all-gathers and the decode, every rank holds:
//   - each matrix as its whole-tensor tensorwise quantization (amax over the group, kernels/fp8.h's factor), bit for
//     bit against a host reference, and its gathered amax mapped to 448 (the largest element comes back exactly);
//   - the norms bit for bit (never E4M3);
//   - a NaN in one rank's part of a matrix makes that whole matrix NaN on every rank (the amax carries it), and
//     leaves the other matrix and the norms as they were.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "framework/model/zero_fp8_gather.h"
#include "kernels/ops.h"

namespace rt {
namespace {

constexpr int kRanks = 2;

// The ranks' meeting point: all_gather copies every rank's send block into each rank's recv.
struct Board {
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0, generation = 0;
  const void* sends[kRanks] = {};
  void barrier() {
    std::unique_lock<std::mutex> lock(m);
    const int gen = generation;
    if (++arrived == kRanks) {
      arrived = 0, ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(Board& board, int rank) : board_(board), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return kRanks; }
  std::string name() const override { return "threads"; }
  void all_reduce_sum(Tensor) override { ADD_FAILURE() << "unexpected all_reduce"; }
  void all_reduce_sum(double*, int) override { ADD_FAILURE() << "unexpected all_reduce"; }
  void broadcast(Tensor, int) override { ADD_FAILURE() << "unexpected broadcast"; }
  void barrier() override { board_.barrier(); }
  ExchangeHandle ring_exchange_start(const Tensor&, Tensor) override {
    ADD_FAILURE() << "unexpected ring exchange";
    return {};
  }
  void wait(ExchangeHandle) override {}
  ExchangeHandle reduce_scatter_sum_start(const Tensor&, Tensor) override {
    ADD_FAILURE() << "unexpected reduce-scatter";
    return {};
  }
  ExchangeHandle all_gather_start(const Tensor& send, Tensor recv) override {
    check_all_gather(send, recv, kRanks, "ThreadComm");
    board_.sends[rank_] = send.data;
    board_.barrier();
    const size_t block = send.nbytes();
    for (int r = 0; r < kRanks; ++r) {
      char* to = static_cast<char*>(recv.data) + block * size_t(r);
      if (to != board_.sends[r]) std::memcpy(to, board_.sends[r], block);
    }
    board_.barrier();  // nobody changes a send block before every rank has read it
    return {};
  }

 private:
  Board& board_;
  int rank_;
};

ParamEntry entry(const std::string& name, std::vector<int64_t> shape, int64_t offset) {
  ParamEntry e;
  e.name = name, e.full_shape = shape, e.local_shape = shape, e.offset = offset, e.unit = 0;
  e.numel = 1;
  for (int64_t d : shape) e.numel *= d;
  return e;
}

// One unit of 512 elements in two shards of 256:
//   [0, 192)   attn.wq (4, 48)                    rank 0
//   [192, 320) mlp.w1 (2, 32) then mlp.w3 (2, 32)  one matrix: w1 on rank 0, w3 on rank 1
//   [320, 360) attn_norm (40), gap to 384         rank 1
//   [384, 424) mlp_norm (40), gap to 512          rank 1
ParamLayout unit_layout() {
  ParamLayout l;
  l.table = {entry("layers.0.attn.wq.weight", {4, 48}, 0), entry("layers.0.mlp.w1.weight", {2, 32}, 192),
             entry("layers.0.mlp.w3.weight", {2, 32}, 256), entry("layers.0.attn_norm.weight", {40}, 320),
             entry("layers.0.mlp_norm.weight", {40}, 384)};
  l.units = {ParamUnit{"layers.0", 0, 512}};
  l.total = 512, l.shard_count = kRanks;
  return l;
}

// The full unit's values: normal weights (a large one in w3, i.e. in rank 1's part of the fused matrix, so that
// rank 0 needs the reduction), norms near 1, zero gaps.
std::vector<float> unit_values() {
  std::mt19937_64 g(3);
  std::normal_distribution<float> n(0.f, 0.05f);
  std::vector<float> x(512, 0.f);
  for (int i = 0; i < 320; ++i) x[size_t(i)] = n(g);
  x[300] = 0.9f;
  for (int i = 320; i < 360; ++i) x[size_t(i)] = 1.f + n(g);
  for (int i = 384; i < 424; ++i) x[size_t(i)] = 1.f + n(g);
  return x;
}

bool is_norm(int i) { return (i >= 320 && i < 360) || (i >= 384 && i < 424); }

// The tensorwise quantization and dequantization of x[b, e) as one tensor, by kernels/fp8.h.
void reference_round_trip(const std::vector<float>& x, int b, int e, std::vector<float>& out, float* amax_out) {
  float amax = 0.f;
  for (int i = b; i < e; ++i) amax = fp8_amax_join(amax, x[size_t(i)]);
  const float s = fp8_scale_from_amax(amax), f = fp8_factor_from_scale(s);
  for (int i = b; i < e; ++i) out[size_t(i)] = e4m3_to_float(float_to_e4m3(x[size_t(i)] * s)) * f;
  *amax_out = amax;
}

// Every rank's decoded unit after one gather of `x` (the full unit; each rank holds its 256).
std::vector<std::vector<float>> gather_on_threads(const std::vector<float>& x, Fp8GatherPlan* plan_out) {
  const ParamLayout layout = unit_layout();
  Board board;
  std::vector<std::vector<float>> decoded(kRanks, std::vector<float>(512, -7.f));
  std::vector<std::string> errors(kRanks);
  auto rank_main = [&](int r) {
    try {
      ThreadComm comm(board, r);
      LocalComm tp;
      size_t bytes = 0;
      {
        Arena m = Arena::measuring(Device::cpu());
        ZeroFp8Gather probe(layout, {true}, kRanks, r, DType::f32, comm, &tp, m);
        bytes = m.peak();
      }
      Arena arena(Device::cpu(), bytes);
      ZeroFp8Gather g(layout, {true}, kRanks, r, DType::f32, comm, &tp, arena);
      if (r == 0 && plan_out) *plan_out = g.plan(0);
      std::vector<float> local(x.begin() + 256 * r, x.begin() + 256 * (r + 1));  // this rank's shard
      const Tensor shard(local.data(), DType::f32, Device::cpu(), {256});
      g.take_amaxes(shard);
      const ZeroFp8Gather::Exchange ex = g.encode(0, 0, shard);
      EXPECT_EQ(ex.codes_recv.dtype, DType::e4m3);
      EXPECT_EQ(ex.codes_recv.nbytes(), size_t(512));  // one byte per element of the unit
      comm.wait(comm.all_gather_start(ex.codes_send, ex.codes_recv));
      ASSERT_TRUE(ex.plain_recv.defined());
      comm.wait(comm.all_gather_start(ex.plain_send, ex.plain_recv));
      std::vector<float>& out = decoded[size_t(r)];
      g.decode(0, 0, Tensor(out.data(), DType::f32, Device::cpu(), {512}));
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) threads.emplace_back(rank_main, r);
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  return decoded;
}

TEST(ZeroFp8Gather, PlanSplitsTheFusedMatrixAcrossShardsAndPacksTheNorms) {
  std::vector<const ParamEntry*> params;
  const ParamLayout layout = unit_layout();
  for (const ParamEntry& e : layout.table) params.push_back(&e);
  const Fp8GatherPlan p = make_fp8_gather_plan(params, layout.units[0], kRanks);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].begin, 0);
  EXPECT_EQ(p.groups[0].end, 192);
  EXPECT_EQ(p.groups[1].begin, 192);
  EXPECT_EQ(p.groups[1].end, 320);  // [w1; w3]: one matrix
  ASSERT_EQ(p.plain.size(), 2u);
  EXPECT_EQ(p.plain[1].end, 424);  // the parameter only: the gap and the unit's padding are not sent
  const auto r0 = p.group_pieces(0), r1 = p.group_pieces(1);
  ASSERT_EQ(r0.size(), 2u);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r0[1].second.end, 256);  // the fused matrix split at the shard edge
  EXPECT_EQ(r1[0].second.begin, 256);
  EXPECT_TRUE(p.plain_of_rank[0].empty());
  EXPECT_EQ(p.plain_cap, 80);
}

TEST(ZeroFp8Gather, DecodesEachMatrixAsItsWholeTensorQuantizationAndTheNormsExactly) {
  const std::vector<float> x = unit_values();
  std::vector<float> want(512, 0.f);
  float amax_wq = 0, amax_w13 = 0;
  reference_round_trip(x, 0, 192, want, &amax_wq);
  reference_round_trip(x, 192, 320, want, &amax_w13);
  EXPECT_EQ(amax_w13, 0.9f);
  for (int i = 320; i < 512; ++i) want[size_t(i)] = is_norm(i) ? x[size_t(i)] : -7.f;  // gaps: left as they were
  const auto got = gather_on_threads(x, nullptr);
  for (int r = 0; r < kRanks; ++r) {
    int wrong = 0;
    for (int i = 0; i < 512; ++i)
      if (std::memcmp(&got[size_t(r)][size_t(i)], &want[size_t(i)], 4) != 0 && wrong++ < 5)
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << got[size_t(r)][size_t(i)] << " want "
                      << want[size_t(i)] << " (from " << x[size_t(i)] << ")";
    EXPECT_EQ(wrong, 0) << "rank " << r;
    // The largest element of each matrix was coded 448 and comes back within an f32 rounding of its amax.
    EXPECT_NEAR(got[size_t(r)][300], 0.9f, 0.9f * 1e-6f);
    // The control: the decode is not the identity on the matrices.
    int moved = 0;
    for (int i = 0; i < 320; ++i) moved += got[size_t(r)][size_t(i)] != x[size_t(i)];
    EXPECT_GT(moved, 100) << "rank " << r << ": the matrices came back unrounded; nothing was quantized";
  }
}

TEST(ZeroFp8Gather, ANaNInOneShardMakesItsWholeMatrixNaNOnEveryRank) {
  std::vector<float> x = unit_values();
  x[10] = std::nanf("");  // wq, rank 0's part
  x[290] = std::nanf("");  // w3, rank 1's part of the fused matrix
  const auto got = gather_on_threads(x, nullptr);
  std::vector<float> clean(512, 0.f);
  float unused = 0;
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < 320; ++i) ASSERT_TRUE(std::isnan(got[size_t(r)][size_t(i)])) << "rank " << r << " element " << i;
    for (int i = 320; i < 512; ++i) {
      if (is_norm(i)) {
        ASSERT_EQ(got[size_t(r)][size_t(i)], x[size_t(i)]) << "rank " << r << " norm " << i;
      }
    }
  }
  // Only the matrix holding the NaN: wq alone poisoned leaves [w1; w3] finite.
  x = unit_values();
  x[10] = std::nanf("");
  const auto one = gather_on_threads(x, nullptr);
  reference_round_trip(x, 192, 320, clean, &unused);
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < 192; ++i) ASSERT_TRUE(std::isnan(one[size_t(r)][size_t(i)])) << "rank " << r << " wq " << i;
    for (int i = 192; i < 320; ++i) ASSERT_EQ(one[size_t(r)][size_t(i)], clean[size_t(i)]) << "rank " << r << " w13 " << i;
  }
}

}  // namespace
}  // namespace rt
