// The per-batch document plans (kernels/attn_doc_plans.h) on the GPU: two "layers" with the same document layout
// run through one AttnDocPlans (the second layer's calls launch no set-up kernel), then new_batch() and a second
// layout with other document lengths written into the same position buffers, two layers again. Every layer's out,
// lse and gradients are checked against the fp64 reference of its own layout (random bf16-rounded inputs per layer,
// outputs NaN-poisoned first, the bounds of test_cuda_attention_docs.cpp, NaN fails). The cache's counters show one
// plan per distinct call and batch, made by the first layer's forward. A control runs the second layout without
// new_batch(): the first layout's stale plan must give wrong results, so these checks can see a stale plan.
// Forms: the forward resumed over two key blocks (two plans per batch) and the fused whole forward / fresh backward
// (one plan), on each kernel pair the device has (fwd v5 / bwd v5, fwd v4 / bwd v4, the mma.sync fwd v2 / bwd v1).
#include <cuda_runtime.h>

#include <iostream>
#include <string>

#include "kernels/attn_doc_plans.h"
#include "kernels/cuda/check.h"
#include "tests/gpu/attention_docs_case.h"
#include "tests/gpu/attention_test_util.h"

namespace rt::test {
namespace {

constexpr int64_t kD = 128, kB = 2, kH = 4, kHkv = 2, kN = 512;

// Layout A: long documents (most tiles under the diagonal fully visible); layout B: short ones (most skipped). A
// plan of A applied to B runs B's cross-document tiles unmasked.
DocCase layout_case(const char* name, std::vector<std::vector<int64_t>> lengths, bool two_blocks) {
  std::vector<Range> blocks = two_blocks ? std::vector<Range>{{0, kN, 0, 256}, {0, kN, 256, kN}}
                                         : std::vector<Range>{{0, kN, 0, kN}};
  return DocCase{name, kB, kH, kHkv, std::move(lengths), iota_rows(0, kN), iota_rows(0, kN), std::move(blocks)};
}

DocCase layout_a(bool two_blocks) { return layout_case("long_docs", {{kN}, {300, 212}}, two_blocks); }
DocCase layout_b(bool two_blocks) {
  return layout_case("short_docs", {{40, 1, 87, 64, 128, 100, 92}, {17, 200, 3, 3, 150, 139}}, two_blocks);
}

// The position buffers the "model" rewrites per batch: the same device pointers for both layouts.
struct PositionBuffers {
  explicit PositionBuffers(int64_t rows)
      : q_pos(std::vector<int64_t>(size_t(rows), 0)), q_doc(std::vector<int64_t>(size_t(rows), 0)),
        k_pos(std::vector<int64_t>(size_t(rows), 0)) {}
  void write(const DocArrays& a) {
    CUDA_CHECK(cudaDeviceSynchronize());  // the last batch's calls have read them
    CUDA_CHECK(cudaMemcpy(q_pos.p, a.q_pos.data(), a.q_pos.size() * 8, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(q_doc.p, a.q_doc.data(), a.q_doc.size() * 8, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(k_pos.p, a.k_pos.data(), a.k_pos.size() * 8, cudaMemcpyHostToDevice));
  }
  DevicePositions q_pos, q_doc, k_pos;  // (B, N) int64 each
};

// The workspace of the plans: (words) int64 of device memory.
struct Workspace {
  explicit Workspace(int64_t words) { CUDA_CHECK(cudaMalloc(&p, size_t(words) * 8)); }
  ~Workspace() {
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) ADD_FAILURE() << "cudaFree of the plans' workspace: " << cudaGetErrorString(e);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* p = nullptr;
};

// One layer: the case's forward (two blocks resumed, or whole) and backward (blocks into pre-filled gradients, or
// fresh), with the mask arrays in `pos`, inside the scope of `plans`.
Results run_layer(const DocCase& c, const PositionBuffers& pos, const Inputs& in, AttnDocPlans& plans) {
  const int64_t B = c.B, N = kN, H = c.H, Hkv = c.Hkv, D = kD;
  const bool whole = c.blocks.size() == 1;
  Buffer gq(gpu(), DType::bf16, {B, N, H, D}), gk(gpu(), DType::bf16, {B, N, Hkv, D}),
      gv(gpu(), DType::bf16, {B, N, Hkv, D}), gdo(gpu(), DType::bf16, {B, N, H, D}),
      gout(gpu(), DType::bf16, {B, N, H, D});
  Buffer gacc(gpu(), DType::f32, {B, H, N, D}), gm(gpu(), DType::f32, {B, H, N}), gl(gpu(), DType::f32, {B, H, N});
  Buffer glse(gpu(), DType::f32, {B, H, N}), gdelta(gpu(), DType::f32, {B, H, N});
  Buffer gdq(gpu(), DType::f32, {B, N, H, D}), gdk(gpu(), DType::f32, {B, N, Hkv, D}),
      gdv(gpu(), DType::f32, {B, N, Hkv, D});
  upload(gq, in.q); upload(gk, in.k); upload(gv, in.v); upload(gdo, in.dout);
  upload(gdq, in.dq0); upload(gdk, in.dk0); upload(gdv, in.dv0);
  poison(gacc); poison(gm); poison(gl); poison(gout); poison(glse); poison(gdelta);
  if (whole) { poison(gdk); poison(gdv); }  // attn_bwd_block_fresh overwrites them
  std::vector<AttnMask> masks;
  for (const Range& r : c.blocks) {
    AttnMask m = mask(false, 0, 0, r.qb, r.qe, r.kb, r.ke);
    m.docs.q_pos = pos.q_pos.p;
    m.docs.q_doc_start = pos.q_doc.p;
    m.docs.k_pos = pos.k_pos.p;
    m.docs.q_stride = m.docs.k_stride = N;
    masks.push_back(m);
  }
  {
    const AttnDocPlanScope scope(&plans);
    AttnState st{gacc.t(), gm.t(), gl.t()};
    if (whole) {
      attn_fwd_whole(gq.t(), gk.t(), gv.t(), st, masks.at(0), gout.t(), glse.t());
    } else {
      attn_state_reset(st);
      for (const AttnMask& m : masks) attn_fwd_block(gq.t(), gk.t(), gv.t(), st, m);
      attn_fwd_finalize(st, gout.t(), glse.t());
    }
    attn_bwd_delta(gout.t(), gdo.t(), gdelta.t());
    if (whole) {
      attn_bwd_block_fresh(gq.t(), gk.t(), gv.t(), gdo.t(), glse.t(), gdelta.t(), gdq.t(), gdk.t(), gdv.t(),
                           masks.at(0));
    } else {
      for (const AttnMask& m : masks)
        attn_bwd_block(gq.t(), gk.t(), gv.t(), gdo.t(), glse.t(), gdelta.t(), gdq.t(), gdk.t(), gdv.t(), m);
    }
  }
  Results r{download(gout), download(glse), {}, {}, {}};
  const std::vector<float> zeros_k(in.dk0.size(), 0.f);
  r.dq = increment(download(gdq), in.dq0);
  r.dk = increment(download(gdk), whole ? zeros_k : in.dk0);
  r.dv = increment(download(gdv), whole ? zeros_k : in.dv0);
  return r;
}

// The largest of the five errors (out, lse, dq, dk, dv), each as test_cuda_attention_docs.cpp measures it, and
// whether every one is within its bound (out and gradients 1e-2 relative, lse 1e-4 absolute; NaN fails).
struct Errors {
  double out, lse, dq, dk, dv;
  bool ok() const { return out <= 1e-2 && lse <= 1e-4 && dq <= 1e-2 && dk <= 1e-2 && dv <= 1e-2; }
};
Errors errors(const Results& g, const Results& ref) {
  return Errors{rel_error(g.out, ref.out), lse_max_abs_error(g.lse, ref.lse), rel_error64(g.dq, ref.dq),
                rel_error64(g.dk, ref.dk), rel_error64(g.dv, ref.dv)};
}
std::ostream& operator<<(std::ostream& os, const Errors& e) {
  return os << "out " << e.out << " lse " << e.lse << " dq " << e.dq << " dk " << e.dk << " dv " << e.dv;
}

// One layer of case c with fresh inputs (seed), checked against its own reference.
void layer_matches(const DocCase& c, const PositionBuffers& pos, AttnDocPlans& plans, uint64_t seed,
                   const std::string& label) {
  const DocArrays a = doc_arrays(c);
  const Inputs in = make_inputs(c, kD, seed);
  const Results ref = reference(c, a, kD, in.q, in.k, in.v, in.dout);
  const Errors e = errors(run_layer(c, pos, in, plans), ref);
  std::cout << "[attn doc plans] " << label << ": " << e << "\n";
  EXPECT_TRUE(e.ok()) << label << ": " << e;
}

void two_batches_two_layers(bool two_blocks) {
  const int64_t calls = two_blocks ? 2 : 1;  // distinct calls (plans) per batch
  const DocCase a = layout_a(two_blocks), b = layout_b(two_blocks);
  for (const auto& [fwd, bwd] : std::vector<std::pair<const char*, const char*>>{{"5", "5"}, {"4", "4"}, {"2", "1"}}) {
    ScopedAttnVariant forced(fwd, bwd);
    const std::string form = std::string(two_blocks ? "two key blocks" : "whole") + " fwd v" + fwd + " bwd v" + bwd;
    PositionBuffers pos(kB * kN);
    const int64_t words = 4 * attn_doc_plan_words(kB, kN, kN) + 256;
    Workspace space(words);
    AttnDocPlans plans(0, space.p, words);

    plans.new_batch();
    pos.write(doc_arrays(a));
    layer_matches(a, pos, plans, 1000, form + " layout A layer 1");
    EXPECT_EQ(plans.misses(), calls) << form << ": one plan per distinct call, made by the first layer's forward";
    layer_matches(a, pos, plans, 2000, form + " layout A layer 2");
    EXPECT_EQ(plans.misses(), calls) << form << ": the second layer made a plan of its own";
    EXPECT_EQ(plans.plans(), calls) << form;
    EXPECT_GE(plans.hits(), 3 * calls) << form << ": layer 1's backward and layer 2's calls read the plans";

    plans.new_batch();  // the next batch: other document lengths in the same buffers
    pos.write(doc_arrays(b));
    layer_matches(b, pos, plans, 3000, form + " layout B layer 1");
    layer_matches(b, pos, plans, 4000, form + " layout B layer 2");
    EXPECT_EQ(plans.misses(), 2 * calls) << form;
    EXPECT_EQ(plans.plans(), calls) << form;
    EXPECT_EQ(plans.bypassed(), 0) << form;

    // Control: layout A written again without new_batch(): the plans of B are stale, and the checks must see it.
    pos.write(doc_arrays(a));
    const Inputs in = make_inputs(a, kD, 5000);
    const Results ref = reference(a, doc_arrays(a), kD, in.q, in.k, in.v, in.dout);
    const Errors stale = errors(run_layer(a, pos, in, plans), ref);
    std::cout << "[attn doc plans] " << form << " stale plan (control): " << stale << "\n";
    EXPECT_FALSE(stale.ok()) << form << ": a stale plan passed the checks, so they cannot catch one";
  }
}

TEST(CudaAttentionDocPlans, TwoLayoutsTwoLayersTwoKeyBlocks) {
  RT_REQUIRE_CUDA();
  two_batches_two_layers(true);
}

TEST(CudaAttentionDocPlans, TwoLayoutsTwoLayersWhole) {
  RT_REQUIRE_CUDA();
  two_batches_two_layers(false);
}

}  // namespace
}  // namespace rt::test
