// AttnDocPlans (kernels/attn_doc_plans.h): the per-batch cache of document-mask set-ups, host side only (the CUDA
// dispatcher, kernels/cuda/attention/attn_doc_mask.cu, launches the set-up kernels into the plans it hands out).
#include "kernels/attn_doc_plans.h"

#include "kernels/tensor.h"

namespace rt {

namespace {

constexpr int64_t kPlanAlignWords = 32;  // 256 bytes: every plan starts as aligned as the workspace

thread_local AttnDocPlans* t_current = nullptr;

}  // namespace

AttnDocPlanLayout attn_doc_plan_layout(int64_t B, int64_t nq, int64_t nk) {
  RT_CHECK(B >= 0 && nq >= 0 && nk >= 0, "attn_doc_plan_layout: negative size (B " << B << ", tiles " << nq << " x "
                                                                                   << nk << ")");
  const int64_t nk2 = (nk + 1) / 2, nq2 = (nq + 1) / 2;
  AttnDocPlanLayout l;
  l.q_sum = 0;
  l.k_sum = B * nq * 4;
  l.k128_span = l.k_sum + B * nk * 2;
  l.q128_runs = (l.k128_span + B * nk2 + 1) / 2 * 2;  // even: 16-byte aligned longlong2
  l.q128_span = l.q128_runs + 2 * kAttnDocRuns * B * nq2;
  l.q128_order = l.q128_span + B * nq2;                // int2 each: one word
  l.q128_nruns = l.q128_order + (B * nq2 + 1) / 2;     // int each: half a word, rounded up
  l.words = l.q128_nruns + (B * nq2 + 1) / 2;
  return l;
}

int64_t attn_doc_plan_words(int64_t B, int64_t q_rows, int64_t k_rows) {
  const int64_t nq = (q_rows + kAttnDocTileRows - 1) / kAttnDocTileRows;
  const int64_t nk = (k_rows + kAttnDocTileRows - 1) / kAttnDocTileRows;
  return attn_doc_plan_layout(B, nq, nk).words;
}

AttnDocPlans::AttnDocPlans(int device, void* workspace, int64_t words)
    : device_(device), workspace_(workspace), capacity_(workspace ? words : 0) {
  RT_CHECK(words >= 0, "AttnDocPlans: negative workspace size " << words);
  RT_CHECK(reinterpret_cast<uintptr_t>(workspace) % (kPlanAlignWords * 8) == 0,
           "AttnDocPlans: the workspace must be 256-byte aligned (an arena allocation is)");
}

void AttnDocPlans::new_batch() {
  plans_.clear();
  used_ = 0;
  ++generation_;
}

AttnDocPlans::Plan* AttnDocPlans::find_or_add(int device, const AttnDocPlanKey& key, int64_t words) {
  if (workspace_ == nullptr || device != device_ || (stream_bound_ && key.stream != stream_)) {
    ++bypassed_;
    return nullptr;
  }
  for (Plan& p : plans_)
    if (p.key == key) {
      RT_CHECK(p.words == words, "AttnDocPlans: one key, two plan sizes (" << p.words << " and " << words
                                                                          << " words); the key misses an input");
      ++hits_;
      return &p;
    }
  const int64_t rounded = (words + kPlanAlignWords - 1) / kPlanAlignWords * kPlanAlignWords;
  if (used_ + rounded > capacity_) {
    ++bypassed_;
    return nullptr;
  }
  stream_ = key.stream;  // bound for the plans' lifetime: the workspace is reused in this stream's order only
  stream_bound_ = true;
  Plan p;
  p.key = key;
  p.offset = used_;
  p.words = words;
  used_ += rounded;
  plans_.push_back(p);
  ++misses_;
  return &plans_.back();
}

AttnDocPlans::Plan* AttnDocPlans::plan_at(const void* storage) {
  if (workspace_ == nullptr || storage == nullptr) return nullptr;
  for (Plan& p : plans_)
    if (this->storage(p) == storage) return &p;
  return nullptr;
}

AttnDocPlanScope::AttnDocPlanScope(AttnDocPlans* plans) : previous_(t_current) { t_current = plans; }

AttnDocPlanScope::~AttnDocPlanScope() { t_current = previous_; }

AttnDocPlans* current_attn_doc_plans() { return t_current; }

}  // namespace rt
