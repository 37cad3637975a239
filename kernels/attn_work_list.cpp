// The work lists' device forms (kernels/attn_work_list.h) and the dispatch of attn_fwd_work_list and
// attn_bwd_work_list on their tensors' device: kernels/cpu/attention/attn_{fwd,bwd}_work_list.cpp,
// kernels/cuda/attention/attn_{fwd,bwd}_work_list.cu.
#include "kernels/attn_work_list.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#ifdef RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/op_profile_scope.h"
#endif

namespace rt {

static_assert(sizeof(AttnKeySeg) == 8, "AttnKeySeg is 2 i32 words of the device form");
static_assert(sizeof(AttnWorkTask) == 16, "AttnWorkTask is 4 i32 words of the device form");
static_assert(sizeof(AttnRowBounds) == 16 && sizeof(AttnKeyRange) == 16,
              "a row group's bounds and a key tile's range are 4 i32 words each of the device form");
static_assert(sizeof(AttnQuerySeg) == 8 && offsetof(AttnQuerySeg, tiles) == offsetof(AttnKeySeg, tiles) &&
                  offsetof(AttnQuerySeg, source) == offsetof(AttnKeySeg, source),
              "AttnQuerySeg keeps AttnKeySeg's layout");
static_assert(sizeof(AttnBwdTask) == 16 && offsetof(AttnBwdTask, sample) == offsetof(AttnWorkTask, sample) &&
                  offsetof(AttnBwdTask, first_seg) == offsetof(AttnWorkTask, first_seg) &&
                  offsetof(AttnBwdTask, merge_slot) == offsetof(AttnWorkTask, merge_slot),
              "AttnBwdTask keeps AttnWorkTask's layout");

namespace cpu {
void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split);
void attn_bwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                        Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask, const Tensor& list);
}
#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {
// kernels/cuda/attention/attn_fwd_work_list.cu (fwd v5's list mode).
void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split, const AttnReadyFlags& ready);
int64_t attn_fwd_work_list_head_window(int64_t H, int64_t Hkv, int64_t key_rows, int64_t D, int64_t B);
// kernels/cuda/attention/attn_bwd_work_list.cu (bwd v5's list mode).
void attn_bwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                        Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask, const Tensor& list);
}  // namespace cuda
#endif

int64_t AttnWorkList::key_tiles() const {
  int64_t n = 0;
  for (const AttnKeySeg& s : segs) n += s.tiles;
  return n;
}

std::vector<int32_t> attn_work_list_words(const AttnWorkList& list) {
  const size_t T = list.tasks.size(), S = list.segs.size(), K = list.keys.size();
  RT_CHECK(T <= size_t(INT32_MAX / 64) && S <= size_t(INT32_MAX / 4) && K <= size_t(INT32_MAX / 16),
           "attn_work_list_words: " << T << " tasks, " << S << " segments and " << K
                                    << " key ranges do not fit i32 counts");
  RT_CHECK(list.rows.size() == T * size_t(kAttnWorkRowGroups) && (K > 0 || T == 0),
           "attn_work_list_words: " << T << " tasks need " << T * size_t(kAttnWorkRowGroups) << " row bounds and "
                                    << "the key ranges of every sample's key tiles; the list has " << list.rows.size()
                                    << " and " << K << ": fill them with doc_work_list_bounds "
                                    << "(parallel/schedule/doc_work_list.h)");
  const size_t rows_at = 4 + 4 * T, keys_at = rows_at + 32 * T, segs_at = keys_at + 4 * K;
  std::vector<int32_t> words(segs_at + 2 * S);  // (4 + 36 T + 4 K + 2 S)
  words[0] = int32_t(T);
  words[1] = int32_t(S);
  words[2] = kAttnFwdWorkListTag;
  words[3] = int32_t(K);
  if (T) std::memcpy(words.data() + 4, list.tasks.data(), T * sizeof(AttnWorkTask));
  if (T) std::memcpy(words.data() + rows_at, list.rows.data(), list.rows.size() * sizeof(AttnRowBounds));
  if (K) std::memcpy(words.data() + keys_at, list.keys.data(), K * sizeof(AttnKeyRange));
  if (S) std::memcpy(words.data() + segs_at, list.segs.data(), S * sizeof(AttnKeySeg));
  return words;
}

int64_t AttnBwdWorkList::query_tiles() const {
  int64_t n = 0;
  for (const AttnQuerySeg& s : segs) n += s.tiles;
  return n;
}

std::vector<int32_t> attn_work_list_words(const AttnBwdWorkList& list) {
  RT_CHECK(list.tasks.size() <= size_t(INT32_MAX / 4) && list.segs.size() <= size_t(INT32_MAX / 4),
           "attn_work_list_words: " << list.tasks.size() << " backward tasks and " << list.segs.size()
                                    << " segments do not fit i32 counts");
  const size_t T = list.tasks.size(), S = list.segs.size();
  std::vector<int32_t> words(4 + 4 * T + 2 * S);  // (4 + 4 T + 2 S)
  words[0] = int32_t(T);
  words[1] = int32_t(S);
  words[2] = kAttnBwdWorkListTag;
  words[3] = 0;
  if (T) std::memcpy(words.data() + 4, list.tasks.data(), T * sizeof(AttnBwdTask));
  if (S) std::memcpy(words.data() + 4 + 4 * T, list.segs.data(), S * sizeof(AttnQuerySeg));
  return words;
}

namespace {

bool holds_backward(const int32_t* words, int64_t n_words) {
  return n_words >= 4 && words[2] == kAttnBwdWorkListTag && words[3] == 0 && words[0] >= 0 && words[1] >= 0 &&
         n_words == 4 + 4 * int64_t(words[0]) + 2 * int64_t(words[1]);
}

bool holds_forward(const int32_t* words, int64_t n_words) {
  return n_words >= 4 && words[2] == kAttnFwdWorkListTag && words[0] >= 0 && words[1] >= 0 && words[3] >= 0 &&
         n_words == 4 + 36 * int64_t(words[0]) + 4 * int64_t(words[3]) + 2 * int64_t(words[1]);
}

}  // namespace

AttnWorkListKind attn_work_list_kind(const int32_t* words, int64_t n_words) {
  if (holds_backward(words, n_words)) return AttnWorkListKind::backward;
  RT_CHECK(n_words >= 4, "attn work list: " << n_words << " words, expected at least 4 (the counts and the kind's "
                                               "tag); build it with attn_work_list_words");
  RT_CHECK(holds_forward(words, n_words),
           "attn work list: " << n_words << " words do not hold " << words[0] << " tasks, " << words[1]
                              << " segments and " << words[3] << " key ranges (forward: 4 + 36 T + 4 K + 2 S words "
                              << "with the tag " << kAttnFwdWorkListTag << " at word 2; backward: 4 + 4 T + 2 S with "
                              << "the tag " << kAttnBwdWorkListTag << "); build it with attn_work_list_words");
  return AttnWorkListKind::forward;
}

AttnWorkList attn_work_list_from_words(const int32_t* words, int64_t n_words) {
  RT_CHECK(attn_work_list_kind(words, n_words) == AttnWorkListKind::forward,
           "attn work list: these " << n_words << " words are a backward list (AttnBwdWorkList, doc_bwd_work_list); "
                                       "the forward takes doc_work_list's list");
  const int64_t T = words[0], S = words[1], K = words[3];
  const int64_t rows_at = 4 + 4 * T, keys_at = rows_at + 32 * T, segs_at = keys_at + 4 * K;
  AttnWorkList list;
  list.tasks.resize(size_t(T));
  list.segs.resize(size_t(S));
  list.rows.resize(size_t(T * kAttnWorkRowGroups));
  list.keys.resize(size_t(K));
  if (T) std::memcpy(list.tasks.data(), words + 4, size_t(T) * sizeof(AttnWorkTask));
  if (T) std::memcpy(list.rows.data(), words + rows_at, list.rows.size() * sizeof(AttnRowBounds));
  if (K) std::memcpy(list.keys.data(), words + keys_at, size_t(K) * sizeof(AttnKeyRange));
  if (S) std::memcpy(list.segs.data(), words + segs_at, size_t(S) * sizeof(AttnKeySeg));
  for (const AttnWorkTask& t : list.tasks) list.merge_slots = std::max<int32_t>(list.merge_slots, t.merge_slot + 1);
  return list;
}

AttnBwdWorkList attn_bwd_work_list_from_words(const int32_t* words, int64_t n_words) {
  RT_CHECK(attn_work_list_kind(words, n_words) == AttnWorkListKind::backward,
           "attn work list: these " << n_words << " words are a forward list (AttnWorkList, doc_work_list); "
                                       "the backward takes doc_bwd_work_list's list");
  const int64_t T = words[0], S = words[1];
  AttnBwdWorkList list;
  list.tasks.resize(size_t(T));
  list.segs.resize(size_t(S));
  if (T) std::memcpy(list.tasks.data(), words + 4, size_t(T) * sizeof(AttnBwdTask));
  if (S) std::memcpy(list.segs.data(), words + 4 + 4 * T, size_t(S) * sizeof(AttnQuerySeg));
  return list;
}

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse) {
  attn_fwd_work_list(q, k, v, k2, v2, scratch, mask, list, tasks, out, lse, AttnSplitScratch{});
}

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split) {
  attn_fwd_work_list(q, k, v, k2, v2, scratch, mask, list, tasks, out, lse, split, AttnReadyFlags{});
}

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split, const AttnReadyFlags& ready) {
  RT_CHECK(split.slots >= 0, "attn_fwd_work_list: split.slots = " << split.slots << " (the list's merge slots, >= 0)");
  if (q.device.is_cuda()) {
#ifdef RINGTRAIN_HAVE_CUDA
    const cuda::OpProfileScope rt_op_timer_("attn_fwd_work_list");
    return cuda::attn_fwd_work_list(q, k, v, k2, v2, scratch, mask, list, tasks, out, lse, split, ready);
#else
    RT_CHECK(false, "attn_fwd_work_list: CUDA tensor given, but this ringtrain was built without CUDA. Set device: "
                    "cpu, or rebuild with nvcc available (-DRINGTRAIN_CUDA=ON)");
#endif
  }
  (void)ready;  // CPU ranks: the caller's cp_.wait ordered the gathered rows before the call
  cpu::attn_fwd_work_list(q, k, v, k2, v2, scratch, mask, list, tasks, out, lse, split);
}

int64_t attn_fwd_work_list_head_window(int64_t H, int64_t Hkv, int64_t key_rows, int64_t D, int64_t B) {
#ifdef RINGTRAIN_HAVE_CUDA
  return cuda::attn_fwd_work_list_head_window(H, Hkv, key_rows, D, B);
#else
  (void)H, (void)Hkv, (void)key_rows, (void)D, (void)B;
  return 1;
#endif
}

void attn_bwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                        Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask, const Tensor& list) {
  if (q.device.is_cuda()) {
#ifdef RINGTRAIN_HAVE_CUDA
    const cuda::OpProfileScope rt_op_timer_("attn_bwd_work_list");
    return cuda::attn_bwd_work_list(q, k, v, k2, v2, dout, lse, delta, dq_acc, dk, dv, dk2, dv2, mask, list);
#else
    RT_CHECK(false, "attn_bwd_work_list: CUDA tensor given, but this ringtrain was built without CUDA. Set device: "
                    "cpu, or rebuild with nvcc available (-DRINGTRAIN_CUDA=ON)");
#endif
  }
  cpu::attn_bwd_work_list(q, k, v, k2, v2, dout, lse, delta, dq_acc, dk, dv, dk2, dv2, mask, list);
}

}  // namespace rt
