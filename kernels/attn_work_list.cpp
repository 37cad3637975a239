// The work list's device form (kernels/attn_work_list.h) and the dispatch of attn_fwd_work_list on its tensors'
// device: kernels/cpu/attention/attn_fwd_work_list.cpp, kernels/cuda/attention/attn_fwd_work_list.cu.
#include "kernels/attn_work_list.h"

#include <cstring>

#ifdef RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/op_profile_scope.h"
#endif

namespace rt {

static_assert(sizeof(AttnKeySeg) == 8, "AttnKeySeg is 2 i32 words of the device form");
static_assert(sizeof(AttnWorkTask) == 16, "AttnWorkTask is 4 i32 words of the device form");

namespace cpu {
void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, Tensor out, Tensor lse);
}
#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {
// kernels/cuda/attention/attn_fwd_work_list.cu. CMakeLists.txt defines RT_HAVE_CUDA_ATTN_WORK_LIST for this file
// once that file exists, so the tree links before it lands.
void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, Tensor out, Tensor lse);
}  // namespace cuda
#endif

int64_t AttnWorkList::key_tiles() const {
  int64_t n = 0;
  for (const AttnKeySeg& s : segs) n += s.tiles;
  return n;
}

std::vector<int32_t> attn_work_list_words(const AttnWorkList& list) {
  RT_CHECK(list.tasks.size() <= size_t(INT32_MAX / 4) && list.segs.size() <= size_t(INT32_MAX / 4),
           "attn_work_list_words: " << list.tasks.size() << " tasks and " << list.segs.size()
                                    << " segments do not fit i32 counts");
  const size_t T = list.tasks.size(), S = list.segs.size();
  std::vector<int32_t> words(2 + 4 * T + 2 * S);  // (2 + 4 T + 2 S)
  words[0] = int32_t(T);
  words[1] = int32_t(S);
  if (T) std::memcpy(words.data() + 2, list.tasks.data(), T * sizeof(AttnWorkTask));
  if (S) std::memcpy(words.data() + 2 + 4 * T, list.segs.data(), S * sizeof(AttnKeySeg));
  return words;
}

AttnWorkList attn_work_list_from_words(const int32_t* words, int64_t n_words) {
  RT_CHECK(n_words >= 2, "attn work list: " << n_words << " words, expected at least 2 (the task and segment "
                                               "counts); build it with attn_work_list_words");
  const int64_t T = words[0], S = words[1];
  RT_CHECK(T >= 0 && S >= 0 && n_words == 2 + 4 * T + 2 * S,
           "attn work list: " << n_words << " words do not hold " << T << " tasks and " << S
                              << " segments (2 + 4 T + 2 S words); build it with attn_work_list_words");
  AttnWorkList list;
  list.tasks.resize(size_t(T));
  list.segs.resize(size_t(S));
  if (T) std::memcpy(list.tasks.data(), words + 2, size_t(T) * sizeof(AttnWorkTask));
  if (S) std::memcpy(list.segs.data(), words + 2 + 4 * T, size_t(S) * sizeof(AttnKeySeg));
  return list;
}

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, Tensor out, Tensor lse) {
  if (q.device.is_cuda()) {
#if defined(RINGTRAIN_HAVE_CUDA) && defined(RT_HAVE_CUDA_ATTN_WORK_LIST)
    const cuda::OpProfileScope rt_op_timer_("attn_fwd_work_list");
    return cuda::attn_fwd_work_list(q, k, v, k2, v2, scratch, mask, list, out, lse);
#elif defined(RINGTRAIN_HAVE_CUDA)
    RT_CHECK(false, "attn_fwd_work_list: the CUDA kernel is not built yet (kernels/cuda/attention/"
                    "attn_fwd_work_list.cu is absent); use attn_fwd_whole_two_kv on the GPU");
#else
    RT_CHECK(false, "attn_fwd_work_list: CUDA tensor given, but this ringtrain was built without CUDA. Set device: "
                    "cpu, or rebuild with nvcc available (-DRINGTRAIN_CUDA=ON)");
#endif
  }
  cpu::attn_fwd_work_list(q, k, v, k2, v2, scratch, mask, list, out, lse);
}

}  // namespace rt
