// The work-list builder's inputs (parallel/schedule/doc_work_list.h) for a TwoKvCase whose positions are on the
// device (tests/gpu/two_kv_device_case.h: every position + kBase), two key sources; shared by the forward work-list
// tests (tests/gpu/test_cuda_attn_work_list_{flags,persistent}.cpp).
#pragma once
#include <cstdint>

#include "parallel/schedule/doc_work_list.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/unit/kernels/two_kv_case.h"

namespace rt::test {

inline DocWorkListInputs two_kv_work_list_inputs(const TwoKvCase& c) {
  DocWorkListInputs in;
  in.B = c.B, in.Nq = c.n, in.Nk = c.n, in.list_rows = c.list;
  in.q_stride = c.n, in.k_stride = c.list;
  for (int64_t p : c.q_pos) in.q_pos.push_back(p + kBase);
  for (int64_t p : c.q_doc) in.q_doc_start.push_back(p + kBase);
  for (int64_t p : c.k_pos) in.k_pos.push_back(p + kBase);
  return in;
}

}  // namespace rt::test
