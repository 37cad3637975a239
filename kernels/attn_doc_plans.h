// Document plans (issue 46): the set-up a document-masked CUDA attention call computes before its kernel
// (kernels/cuda/attention/attn_doc_mask.cu: the 64-row tile summaries, bwd v5's key-tile spans, fwd v5's query-tile
// spans, runs and launch order) depends only on the call's position arrays, their strides, the batch size and the
// call's row ranges. Within one batch every layer's forward and backward makes the same calls, so the set-up is the
// same for all of them.
//
// An owner of position arrays whose contents stay fixed for a batch (RingAttention: the model's uploaded positions
// and document starts, the gather scheme's key positions) keeps an AttnDocPlans over a device workspace from its arena,
// calls new_batch() whenever it rewrites any of those arrays, and opens an AttnDocPlanScope around its calls. Inside
// the scope the first call of each distinct AttnDocPlanKey computes its set-up into the workspace; every later call
// with that key (the other layers, the backward) reads it and launches no set-up kernel. Calls outside a scope (tests,
// benchmarks, any other caller) compute their set-up every time, as before.
//
// Correctness rests on the key and on new_batch(): the key names everything the set-up reads (stream, position
// pointers, strides, B, the resolved query and key ranges), and new_batch() drops every plan, so new document lengths
// in the same buffers never meet an old plan. Plans are only written and read on one stream (the first a plan is made
// on); a call on another stream bypasses the cache, so the workspace is reused only in stream order. A call whose
// plan does not fit the workspace's rest also bypasses it (correct, just not cached).
#pragma once
#include <cstdint>
#include <deque>

namespace rt {

// The set-up's summary tile (rows) and document runs per 128-row query tile; kernels/cuda/attention/attn_doc_mask.cuh
// checks that its kDocTileRows / kDocRuns equal these.
constexpr int kAttnDocTileRows = 64;
constexpr int kAttnDocRuns = 4;

// Where each part of one call's set-up lies, in int64 words from the plan's start (B samples, nq / nk 64-row tiles):
// q summaries (B, nq, 4), k summaries (B, nk, 2), bwd v5's 128-key spans (B, ceil(nk/2)) int2, fwd v5's runs
// (B, ceil(nq/2), kAttnDocRuns) longlong2 (16-byte aligned), spans (B, ceil(nq/2)) int2, order and run count
// (B, ceil(nq/2)) int each.
struct AttnDocPlanLayout {
  int64_t q_sum = 0, k_sum = 0, k128_span = 0, q128_runs = 0, q128_span = 0, q128_order = 0, q128_nruns = 0;
  int64_t words = 0;  // the whole plan
};
AttnDocPlanLayout attn_doc_plan_layout(int64_t B, int64_t nq_tiles, int64_t nk_tiles);
// Words of one call's plan over q_rows query rows and k_rows key rows (rounded up to whole tiles).
int64_t attn_doc_plan_words(int64_t B, int64_t q_rows, int64_t k_rows);

// Everything a call's set-up depends on. Ranges are the resolved ones (AttnRanges), never the mask's -1.
struct AttnDocPlanKey {
  const void* stream = nullptr;  // cudaStream_t of the call
  const int64_t* q_pos = nullptr;
  const int64_t* q_doc_start = nullptr;
  const int64_t* k_pos = nullptr;
  int64_t q_stride = 0, k_stride = 0, B = 0;
  int64_t q_begin = 0, q_end = 0, k_begin = 0, k_end = 0;
  bool operator==(const AttnDocPlanKey& o) const {
    return stream == o.stream && q_pos == o.q_pos && q_doc_start == o.q_doc_start && k_pos == o.k_pos &&
           q_stride == o.q_stride && k_stride == o.k_stride && B == o.B && q_begin == o.q_begin && q_end == o.q_end &&
           k_begin == o.k_begin && k_end == o.k_end;
  }
};

class AttnDocPlans {
 public:
  // One plan: its words from the workspace's start, and which parts of it are written (queued on the stream).
  struct Plan {
    AttnDocPlanKey key;
    int64_t offset = 0, words = 0;
    bool summaries = false, k128_spans = false, q128_order = false;
  };

  AttnDocPlans() = default;  // no workspace: caches nothing
  // workspace: `words` int64 words of device memory of CUDA device `device` (from the owner's arena), or nullptr.
  AttnDocPlans(int device, void* workspace, int64_t words);

  // The owner rewrote (or is about to rewrite) its position arrays: every plan is dropped, the workspace reused.
  void new_batch();
  // The plan of `key` (a call on `device` needing `words`): the existing one, or a new one with no part written, or
  // nullptr when the call must compute its own set-up (no workspace, another device, another stream than the
  // plans', or no room left this batch).
  Plan* find_or_add(int device, const AttnDocPlanKey& key, int64_t words);
  // The plan whose storage starts at `storage` (this batch), or nullptr.
  Plan* plan_at(const void* storage);
  int64_t* storage(const Plan& plan) const { return static_cast<int64_t*>(workspace_) + plan.offset; }

  int64_t generation() const { return generation_; }  // new_batch() calls so far
  int64_t plans() const { return int64_t(plans_.size()); }  // this batch
  int64_t used_words() const { return used_; }
  int64_t capacity_words() const { return capacity_; }
  int64_t hits() const { return hits_; }      // find_or_add that found a plan, since construction
  int64_t misses() const { return misses_; }  // ... that made one
  int64_t bypassed() const { return bypassed_; }  // ... that returned nullptr (another stream or device, no room)

 private:
  int device_ = -1;
  void* workspace_ = nullptr;
  int64_t capacity_ = 0, used_ = 0, generation_ = 0;
  const void* stream_ = nullptr;
  bool stream_bound_ = false;
  std::deque<Plan> plans_;  // a deque: a Plan* stays valid while later plans are added
  int64_t hits_ = 0, misses_ = 0, bypassed_ = 0;
};

// The plans the calls of this thread use while the scope lives (scopes nest; nullptr: none).
class AttnDocPlanScope {
 public:
  explicit AttnDocPlanScope(AttnDocPlans* plans);
  ~AttnDocPlanScope();
  AttnDocPlanScope(const AttnDocPlanScope&) = delete;
  AttnDocPlanScope& operator=(const AttnDocPlanScope&) = delete;

 private:
  AttnDocPlans* previous_;
};

// The innermost scope's plans on this thread, or nullptr.
AttnDocPlans* current_attn_doc_plans();

}  // namespace rt
