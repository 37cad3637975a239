// Whether fwd v5's list mode (attn_fwd_work_list, attn_fwd_work_list.cu) runs a call of a given shape on a given
// device: its rules in one place (attn_fwd_work_list_fits.cu). The query attn_fwd_work_list_runs
// (kernels/attn_fwd_work_list_runs.cpp) asks them before a list is built; the launcher checks the same rules, with
// the reason, before it reads the list, so a call the query says yes to passes them and one it says no to is refused.
// Plain C++17 (no CUDA types).
#pragma once
#include <cstdint>
#include <string>

namespace rt {
namespace cuda {

// A call of q (B,Nq,H,D) bf16 on `device`, k with Nk rows, k2 with Nk2 rows (0: one source) and a key list of
// list_rows rows (attn_work_list_dims; one source reads k's rows only). The rules: compute capability 9.0 with an
// sm_90a build and D 64 or 128 (attn_fwd_ws_supported); at least 128 query rows, 128 rows of k and (two sources) 128
// of k2 (the TMA boxes); at most kWorkListTilesMax key tiles of 128 rows; 32-bit TMA row coordinates; H x (the most
// tasks, one per (sample, 128-row query tile)) units and the fill CTAs in one grid. True when the call keeps every
// rule; else false and, where why is not null, *why names the first rule it breaks, with the call's numbers and what
// to run instead (no prefix: the caller adds its op's name).
bool attn_fwd_work_list_fits(int device, int64_t B, int64_t H, int64_t D, int64_t Nq, int64_t Nk, int64_t Nk2,
                             int64_t list_rows, std::string* why);

// The same, as a yes / no (what kernels/attn_fwd_work_list_runs.cpp declares and asks).
bool attn_fwd_work_list_fits(int device, int64_t B, int64_t H, int64_t D, int64_t Nq, int64_t Nk, int64_t Nk2,
                             int64_t list_rows);

}  // namespace cuda
}  // namespace rt
