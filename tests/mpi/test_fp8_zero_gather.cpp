// fp8.zero3_gather: fp8 on CPU ranks (issue 44; framework/model/zero_fp8_gather.h): the ZeRO-3 weight all-gather in
// E4M3 codes with one factor per matrix against the bf16 gather, on grids of CPU ranks (the CPU emulates the FP8
// rounding, kernels/fp8.h). Runs under `mpirun -np 4`; a grid smaller than the world runs on the first ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "framework/model/fp8_linear.h"
#include "framework/model/zero_fp8_gather.h"
#include "parallel/comm/mpi_comm.h"
#include "tests/mpi/fp8_grid_run.h"

using namespace rt;
using namespace rt::test::fp8grid;
using rt::test::rel_diff;
using rt::test::sub_world;
using rt::test::world_rank;
using rt::test::world_size;

// ---- fp8.zero3_gather: fp8, the ZeRO-3 weight all-gather in E4M3 (framework/model/zero_fp8_gather.h) ----
// Observed 2026-12-03 on CPU ranks (printed as "[ fp8 zero3_gather ... ]"), tensorwise against the bf16 gather on cp 4,
// dp 2 x tp 2 and cp 2 with bf16 first/last blocks: step-1 loss equal, step-1 gradients <= 4.4e-7, the loss gap
// 0, <= 8e-10, <= 4e-7, ... growing to <= 3.2e-4 by step 8 (the grid tests allow 1e-2), the weights after 8 steps
// <= 1.7e-2 apart (AdamW's normalised steps on near-zero gradients; printed, not bounded). The codes replace 4 f32
// bytes (2 bf16 bytes on GPUs) one for one. Rowwise / block with the E4M3 gather (refused): a loss gap of 3.5e-3 /
// 4.0e-3 and step-1 gradients 10% / 13% off the bf16 gather's.

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The grid model's real layout on 4 shards over MPI: every layer unit decodes to each weight matrix's whole-tensor
// tensorwise round trip (SwiGLU's [w1; w3] as one matrix, Fp8Linear's operand) and to the norms bit for bit.
TEST(Fp8ZeroGather, LayerUnitsDecodeAsTheirTensorwiseRoundTripAndNormsExactly) {
  std::shared_ptr<Comm> sub = sub_world(4);
  if (!sub) return;
  for (const char* mlp : {"swiglu", "gelu"}) {
    SCOPED_TRACE(mlp);
    Fp8Case c{"tensorwise", 1, 4, 1, 1, 3};
    c.mlp = mlp;
    const Config config = make_config(c, 1, 4, 1, 1, 3, "fp8");
    const ParamLayout layout = build_param_layout(config.model, 1, 0, 4);
    std::vector<float> flat(size_t(layout.total), 0.f);  // (P) the same on every rank; zero gaps
    std::mt19937_64 g(21);
    std::normal_distribution<float> n(0.f, 0.05f);
    for (const ParamEntry& e : layout.table)
      for (int64_t i = 0; i < e.numel; ++i) flat[size_t(e.offset + i)] = (e.local_shape.size() == 1 ? 1.f : 0.f) + n(g);
    const int r = sub->rank();
    std::vector<float> local;  // this rank's shard of every unit, in unit order (Model::compute() at zero 3)
    for (const ParamUnit& u : layout.units)
      local.insert(local.end(), flat.begin() + u.offset + u.numel / 4 * r, flat.begin() + u.offset + u.numel / 4 * (r + 1));
    std::vector<bool> covered(layout.units.size(), true);
    covered.front() = covered.back() = false;  // the embedding and the head stay in the activation dtype
    LocalComm tp;
    size_t bytes = 0;
    {
      Arena m = Arena::measuring(Device::cpu());
      ZeroFp8Gather probe(layout, covered, 4, r, DType::f32, *sub, &tp, m);
      bytes = m.peak();
    }
    Arena arena(Device::cpu(), bytes);
    ZeroFp8Gather gather(layout, covered, 4, r, DType::f32, *sub, &tp, arena);
    const Tensor lt(local.data(), DType::f32, Device::cpu(), {int64_t(local.size())});
    gather.take_amaxes(lt);
    for (int u = 1; u + 1 < int(layout.units.size()); ++u) {
      const ParamUnit& pu = layout.units[size_t(u)];
      const ZeroFp8Gather::Exchange x = gather.encode(u, u % 2, lt.slice(pu.offset / 4, pu.offset / 4 + pu.numel / 4));
      sub->wait(sub->all_gather_start(x.codes_send, x.codes_recv));
      sub->wait(sub->all_gather_start(x.plain_send, x.plain_recv));
      std::vector<float> out(size_t(pu.numel), -7.f);  // (unit) the slot
      gather.decode(u, u % 2, Tensor(out.data(), DType::f32, Device::cpu(), {pu.numel}));
      int matrices = 0, norms = 0;
      for (const ParamEntry& e : layout.table) {
        if (e.unit != u || ends_with(e.name, ".mlp.w3.weight")) continue;
        int64_t end = e.offset + e.numel;
        if (ends_with(e.name, ".mlp.w1.weight")) end += e.numel;  // w3 follows w1 directly, of the same shape
        if (e.local_shape.size() == 1) {
          ++norms;
          for (int64_t i = e.offset; i < end; ++i)
            ASSERT_EQ(out[size_t(i - pu.offset)], flat[size_t(i)]) << e.name << " element " << i - e.offset;
          continue;
        }
        ++matrices;
        float amax = 0.f;
        for (int64_t i = e.offset; i < end; ++i) amax = fp8_amax_join(amax, flat[size_t(i)]);
        const float s = fp8_scale_from_amax(amax), f = fp8_factor_from_scale(s);
        for (int64_t i = e.offset; i < end; ++i)
          ASSERT_EQ(out[size_t(i - pu.offset)], e4m3_to_float(float_to_e4m3(flat[size_t(i)] * s)) * f)
              << e.name << " element " << i - e.offset << " (rank " << r << ")";
      }
      EXPECT_EQ(matrices, std::string(mlp) == "swiglu" ? 6 : 6);  // wq wk wv wo, [w1; w3] | fc, w2 | proj
      EXPECT_EQ(norms, 2);
    }
  }
}

// One run with the bf16 gather and one with the E4M3 gather on the same grid (recipe: c.recipe; a recipe the config
// refuses with the E4M3 gather is set after parsing, to measure what it would do).
struct GatherRuns {
  RunResult bf16, fp8;
};
GatherRuns run_both_gathers(const Fp8Case& c, ProcessGrid& grid, int steps) {
  Fp8Case plain = c;
  plain.zero3_gather = "bf16";
  GatherRuns out;
  out.bf16 = train(make_config(plain, c.dp, c.cp, c.tp, c.a2a, 3, "fp8"), grid, steps);
  Config f = std::string(c.recipe) == "tensorwise" ? make_config(c, c.dp, c.cp, c.tp, c.a2a, 3, "fp8")
                                                   : make_config(plain, c.dp, c.cp, c.tp, c.a2a, 3, "fp8");
  f.fp8.zero3_gather = "fp8";
  out.fp8 = train(f, grid, steps);
  return out;
}

double worst_weight_error(const std::vector<HostTensor>& got, const std::vector<HostTensor>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) worst = std::max(worst, rel_diff(got[i].values, ref[i].values));
  return worst;
}

// Tensorwise: the E4M3 gather's weights re-quantize to the same codes, so the run equals the bf16 gather's up to the
// f32 rounding of a factor (CPU ranks; bit for bit on bf16 GPUs). The matrices' gathered bytes drop to one per element.
TEST(Fp8ZeroGather, TensorwiseTrainsAsTheBf16GatherWithFewerBytes) {
  Fp8Case cases[] = {{"tensorwise", 1, 4, 1, 1, 3}, {"tensorwise", 2, 1, 2, 1, 3}, {"tensorwise", 1, 2, 1, 1, 3}};
  cases[1].mlp = "gelu";                                   // tp 2: the amaxes reduced over tp too
  cases[2].mlp = "gelu", cases[2].first_last = true;       // blocks 0 and 2 in bf16: gathered in the act dtype
  cases[2].checkpointing = "full";
  for (Fp8Case c : cases) {
    c.zero3_gather = "fp8";
    const std::string name = case_name(c);
    SCOPED_TRACE(name);
    const int size = c.dp * c.cp * c.tp;
    std::shared_ptr<Comm> sub = sub_world(size);
    if (!sub) continue;
    ProcessGrid grid = ProcessGrid::create(sub, GridDims{c.dp, c.cp, c.tp, c.a2a});
    const int steps = 8;
    const GatherRuns r = run_both_gathers(c, grid, steps);
    const double loss_err = std::abs(r.fp8.losses[0] - r.bf16.losses[0]) / std::abs(r.bf16.losses[0]);
    const double grad_err = worst_grad_error(r.fp8.first_grads, r.bf16.first_grads, 1e-5);  // observed <= 4.4e-7
    double curve_err = 0;
    for (size_t i = 0; i < r.bf16.losses.size(); ++i)
      curve_err = std::max(curve_err, std::abs(r.fp8.losses[i] - r.bf16.losses[i]) / std::abs(r.bf16.losses[i]));
    const double weight_err = worst_weight_error(r.fp8.final, r.bf16.final);
    // Step 1 differs only by the f32 rounding of the re-quantization's factor (the codes are the same); later steps
    // carry that through FP8 rounding boundaries and AdamW like the grid tests' reassociation (same curve bound).
    EXPECT_LE(loss_err, 1e-6);
    EXPECT_LE(std::abs(r.fp8.losses[1] - r.bf16.losses[1]) / std::abs(r.bf16.losses[1]), 1e-6) << "step 2";
    EXPECT_LE(curve_err, kCurveRelTol);
    // Bytes (the last step): the E4M3 codes replace the activation dtype's elements one for one (f32 on CPU ranks:
    // a quarter; bf16 on GPUs: a half); everything else the bf16 gather sent is unchanged.
    const Model::ZeroStats &a = r.bf16.zero_last, &b = r.fp8.zero_last;
    const double act = 4;  // bytes of the CPU's activation dtype
    EXPECT_EQ(a.fp8_code_bytes, 0);
    EXPECT_GT(b.fp8_code_bytes, 0);
    EXPECT_EQ(b.gathered_bytes - b.fp8_code_bytes - b.fp8_side_bytes, a.gathered_bytes - act * b.fp8_code_bytes);
    EXPECT_LT(b.gathered_bytes, a.gathered_bytes);
    std::string gaps;  // per step |loss_fp8 - loss_bf16| / loss_bf16
    for (size_t i = 0; i < r.bf16.losses.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %.1e", std::abs(r.fp8.losses[i] - r.bf16.losses[i]) / std::abs(r.bf16.losses[i]));
      gaps += buf;
    }
    if (sub->rank() == 0) std::printf("[ fp8 zero3_gather %s ] loss gap per step:%s\n", name.c_str(), gaps.c_str());
    if (sub->rank() == 0)
      std::printf("[ fp8 zero3_gather %s ] step-1 loss err %.1e | worst grad err %.1e | curve err %.1e | weights "
                  "after %d steps %.1e | gathered %.3f MiB vs %.3f MiB (codes %.3f MiB for %.3f MiB of f32, norms + "
                  "amaxes %.4f MiB)\n",
                  name.c_str(), loss_err, grad_err, curve_err, steps, weight_err, b.gathered_bytes / 1048576,
                  a.gathered_bytes / 1048576, b.fp8_code_bytes / 1048576, act * b.fp8_code_bytes / 1048576,
                  b.fp8_side_bytes / 1048576);
  }
}

// Rowwise and block quantize the E4M3-gathered weights again per row / 128x128 block: measured here (the config
// refuses the combination, framework/config/config_validate.cpp); only printed and checked finite.
TEST(Fp8ZeroGather, RowwiseAndBlockWouldQuantizeTwiceMeasured) {
  Fp8Case cases[] = {{"rowwise", 1, 2, 1, 1, 3}, {"block", 1, 2, 1, 1, 3}};
  for (const Fp8Case& c : cases) {
    std::shared_ptr<Comm> sub = sub_world(2);
    if (!sub) continue;
    ProcessGrid grid = ProcessGrid::create(sub, GridDims{c.dp, c.cp, c.tp, c.a2a});
    const int steps = std::string(c.recipe) == "block" ? 3 : 8;
    const GatherRuns r = run_both_gathers(c, grid, steps);
    double curve = 0;
    for (size_t i = 0; i < r.bf16.losses.size(); ++i) {
      ASSERT_TRUE(std::isfinite(r.fp8.losses[i]));
      curve = std::max(curve, std::abs(r.fp8.losses[i] - r.bf16.losses[i]) / std::abs(r.bf16.losses[i]));
    }
    const double grad = worst_grad_error(r.fp8.first_grads, r.bf16.first_grads, 1.0);
    if (sub->rank() == 0)
      std::printf("[ fp8 zero3_gather %s (refused by the config) ] loss %.5f vs %.5f after %d steps | worst loss gap "
                  "%.2e | step-1 grad gap %.2e\n",
                  case_name(c).c_str(), r.fp8.losses.back(), r.bf16.losses.back(), steps, curve, grad);
  }
}

TEST(Fp8ZeroGather, BadCombinationsAreRefusedNamingTheOptionAndTheFix) {
  if (world_rank() != 0) return;
  const std::string yaml =
      "model:\n  n_layer: 2\n  d_model: 64\n  n_head: 4\n  vocab_size: 32\n  d_ff: 128\ndata:\n  source: copy\n"
      "  seq_len: 64\nparallel:\n  cp: 4\n  zero: 3\ntrain:\n  steps: 2\n  precision: fp8\noptim:\n  warmup_steps: 1\n"
      "device: cpu\n";
  auto refusal = [&](const std::vector<std::string>& sets) -> std::string {
    std::vector<std::string> all = {"fp8.zero3_gather=fp8"};
    all.insert(all.end(), sets.begin(), sets.end());
    try {
      parse_config_text(yaml, all, 0, "refusal");
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refusal({}), "") << "zero 3, fp8, tensorwise is the supported combination";
  struct Bad {
    std::vector<std::string> sets;
    std::vector<const char*> says;
  };
  for (const Bad& b : {Bad{{"train.precision=bf16"}, {"fp8.zero3_gather", "train.precision", "fp8.zero3_gather: bf16"}},
                       Bad{{"parallel.zero=2"}, {"fp8.zero3_gather", "parallel.zero=2", "parallel.zero: 3"}},
                       Bad{{"fp8.recipe=rowwise"}, {"fp8.zero3_gather", "fp8.recipe=rowwise", "fp8.recipe: tensorwise"}},
                       Bad{{"fp8.recipe=block"}, {"fp8.zero3_gather", "fp8.recipe=block", "fp8.recipe: tensorwise"}},
                       Bad{{"fp8.zero3_gather=e5m2"}, {"fp8.zero3_gather"}}}) {
    const std::string why = refusal(b.sets);
    ASSERT_NE(why, "") << b.sets[0] << " was accepted";
    for (const char* s : b.says) EXPECT_NE(why.find(s), std::string::npos) << "'" << s << "' not in: " << why;
  }
}

}  // namespace
