// attn_bwd_work_list on CUDA (kernels/attn_work_list.h has the op's contract): bwd v5's document-masked kernel
// (attn_bwd_sm90ws.cu) in its list mode (attn_bwd_sm90ws_list.cuh), one launch per call with no set-up kernel (no
// summaries, no k128 spans): persistent CTAs take (task, K/V head) units in the list's order (heaviest first) within
// windows of K/V heads; a unit loads its task's key tile from its source (k / v or k2 / v2), runs it against the 64-row
// halves of its segments' 128-row query tiles only, adds dQ into dq_acc and stores dK / dV (zeros for a task with no
// segment) into dk / dv or dk2 / dv2. Hopper only (bwd v5: sm_90a), bf16 q / k / v / dout, D = 64 or 128; not in
// deterministic mode (the dQ adds are unordered, as bwd v5's with documents). The ready flags of the list's
// segments (source s >= 0) are not waited on: the caller orders the gathered rows before the call.
//
// The list must name every key tile of the call once (doc_bwd_work_list does): dK / dV rows are written only by their
// tile's task (no zeroing pass), so a key tile the list leaves out keeps what its rows held. RT_ATTN_WORK_LIST_CHECK=1
// copies the list to the host and checks that (and every field) before the launch.
//
// Why dK / dV are bitwise attn_bwd_block_fresh_two_kv's (with bwd v5's items whole, AttnVariantOverride::bwd_doc_pieces
// off or a list of more units than half the SMs): per (key tile, K/V head) both run the same consumer code over the
// same 64-row query tiles in the same order (heads of the group outer, query tiles ascending), with the same element
// mask and class bits (the key tile's position ranges from its positions equal the summaries' min / max); the query
// tiles they do not share see no key of the tile (two_kv's span holds whole 64-row tiles between its first and last
// visible one; the list holds whole 128-row tiles), and a tile no row of which sees the keys adds P = dS = 0 products,
// which leave dK and dV unchanged (their accumulators start at +0). dq_acc gets the same terms, added by TMA reduces in
// an order that differs between runs of either kernel: within fp32 rounding, not bitwise.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_dispatch.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_kernel.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_maps.cuh"
#include "kernels/cuda/attention/attn_doc_mask.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/persistent_unit_counter.h"
#include "kernels/cuda/pdl.cuh"

namespace rt {
namespace cuda {
namespace {

// K/V heads per window of the unit order: as bwd v5's document windows (v5_grid, attn_bwd_sm90ws.cu), as many as keep
// their query heads' Q, dO (bf16) and dQ (f32) within 16 MB of L2, but over every sample (the list's tasks span them).
int64_t list_kv_window(int64_t B, int64_t Nq, int64_t group, int64_t D, int64_t Hkv) {
  const int64_t head_bytes = std::max<int64_t>(1, B * Nq * group * D * 8);
  return std::max<int64_t>(1, std::min<int64_t>(Hkv, (int64_t(16) << 20) / head_bytes));
}

bool host_check_requested() {
  const char* e = std::getenv("RT_ATTN_WORK_LIST_CHECK");
  return e != nullptr && e[0] != '\0' && e[0] != '0';
}

// RT_ATTN_WORK_LIST_CHECK=1: the list on the host, checked as the kernel trusts it: one unsplit task per key tile of
// the call (every one: the kernel zeroes no row it does not own), segments of the call's query tiles, ascending, of
// the tile's source.
void check_list_on_host(const Tensor& list, const AttnDims& d, int64_t list_rows, bool two, cudaStream_t stream,
                        const char* op) {
  std::vector<int32_t> words(size_t(list.shape[0]));  // (n_words) i32
  CUDA_CHECK(cudaMemcpyAsync(words.data(), list.data, words.size() * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const AttnBwdWorkList wl = attn_bwd_work_list_from_words(words.data(), int64_t(words.size()));
  const int64_t own_tiles = (d.Nk + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  const int64_t first_gathered = two ? attn_second_kv_row(d.Nk) / kAttnWorkTileRows : own_tiles;
  const int64_t list_tiles = two ? (list_rows + kAttnWorkTileRows - 1) / kAttnWorkTileRows : own_tiles;
  const int64_t q_tiles = (d.Nq + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
  std::vector<uint8_t> seen(size_t(d.B * list_tiles), 0);  // (B, list_tiles)
  for (size_t n = 0; n < wl.tasks.size(); ++n) {
    const AttnBwdTask& task = wl.tasks[n];
    const int64_t t = task.k_row / kAttnWorkTileRows;
    const bool own = t < own_tiles, gathered = two && t >= first_gathered && t < list_tiles;
    RT_CHECK(task.sample >= 0 && task.sample < d.B && task.k_row >= 0 && task.k_row % kAttnWorkTileRows == 0 &&
                 (own || gathered) && task.part == 0 && task.parts == 1 && task.merge_slot == -1,
             op << ": task " << n << " (sample " << task.sample << ", k_row " << task.k_row << ", part "
                << int(task.part) << " of " << int(task.parts) << ") is not an unsplit 128-row key tile of the call");
    uint8_t& s = seen[size_t(task.sample * list_tiles + t)];
    RT_CHECK(!s, op << ": task " << n << " names sample " << task.sample << "'s key tile at row " << task.k_row
                    << " again (one task per key tile)");
    s = 1;
    RT_CHECK(task.segs >= 0 && task.first_seg >= 0 && int64_t(task.first_seg) + task.segs <= int64_t(wl.segs.size()),
             op << ": task " << n << " names segments [" << task.first_seg << ", " << task.first_seg + task.segs
                << ") of " << wl.segs.size());
    int64_t next = 0;
    for (int g = task.first_seg; g < task.first_seg + task.segs; ++g) {
      const AttnQuerySeg& seg = wl.segs[size_t(g)];
      const int64_t lo = seg.first_tile, hi = lo + seg.tiles;
      RT_CHECK(seg.tiles >= 1 && lo >= next && hi <= q_tiles && (own ? seg.source == -1 : seg.source >= 0),
               op << ": task " << n << "'s segment " << g << " (query tiles [" << lo << ", " << hi << "), source "
                  << int(seg.source) << ") is out of range or order, or of the wrong source");
      next = hi;
    }
  }
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < list_tiles; ++t)
      RT_CHECK(seen[size_t(b * list_tiles + t)] || (t >= own_tiles && t < first_gathered),
               op << ": sample " << b << "'s key tile " << t << " has no task; the CUDA kernel writes dK / dV only "
                  << "through its tile's task (doc_bwd_work_list lists every key tile)");
}

template <int D>
void launch(const AttnBwdParams& p, int64_t B, const BwdWorkListDev& wl, int64_t window, int device,
            cudaStream_t stream) {
  constexpr int R = kBr;
  constexpr size_t smem = WgBwdV5Smem<D, R>::kBytesDocs;
  auto* kernel = attn_bwd_ws_kernel<D, true, R, true>;
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured[device_slot(device)] = true;
  }
  const bool two = p.k2_row > 0;
  const BwdV5Maps m = make_bwd_v5_maps<D, R>(p, B, two);
  // The host does not read the list: T <= B x key tiles (one task per key tile), so the units are at most that x Hkv,
  // and the kernel takes the count from words[0]. CTAs beyond the units find none and end.
  const int64_t max_units = B * int64_t(wl.key_tiles) * p.Hkv;
  const int n_sm = device_props().multiProcessorCount;  // `device` is current (stream_for in the op)
  BwdV5Grid g{0, p.Hkv, window, 0, 1, 0, std::min<int64_t>(max_units, n_sm)};
  if (g.ctas == 0) return;
  int* next_unit = persistent_unit_counter(PersistentKernel::bwd_work_list, device, stream);
  launch_dependent_kernel(kernel, dim3(unsigned(g.ctas)), dim3(kV5Threads), smem, stream, m.q, m.dout, m.k, m.v,
                          m.dq, m.dk, m.dv, m.k2, m.v2, m.dk2, m.dv2, p, g, next_unit, wl);
}

}  // namespace

// attn_bwd_work_list_runs's CUDA checks (kernels/attn_bwd_work_list_runs.h): what the op below refuses, as a query.
bool attn_bwd_work_list_fits(int device, int64_t B, int64_t H, int64_t Hkv, int64_t D, int64_t Nq, int64_t Nk,
                             int64_t Nk2, int64_t list_rows) {
  const int64_t key_rows = Nk2 > 0 ? list_rows : Nk;
  const int64_t key_tiles = (key_rows + kWgBwdKeys - 1) / kWgBwdKeys;
  return !rt::deterministic_attention() && Nq >= kWgBwdRows && Nk >= kWgBwdKeys &&
         (Nk2 == 0 || Nk2 >= kWgBwdKeys) &&  // TMA boxes
         Nq <= INT_MAX && key_rows <= INT_MAX && H <= INT_MAX && B * key_tiles * Hkv <= INT_MAX / 2 &&
         attn_bwd_wgmma_supported(device, D);  // sm_90a, D 64 or 128
}

void attn_bwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                        Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask, const Tensor& list) {
  const char* op = "attn_bwd_work_list";
  cudaStream_t stream = stream_for(q, op);
  int64_t list_rows = 0;
  const AttnDims d = attn_work_list_dims(q, k, v, k2, v2, mask, list, list_rows, op);
  attn_dims(q, k, v, op);  // bf16 on q's device, D 64 or 128
  check_attn_bwd_args(d, q, dout, lse, delta, dq_acc, dk, dv, op);
  const bool two = k2.defined() && k2.shape[1] > 0;
  const int64_t Nk2 = two ? k2.shape[1] : 0;
  if (two) {
    require_attn_tensor(k2, DType::bf16, q.device, op, "k2");
    require_attn_tensor(v2, DType::bf16, q.device, op, "v2");
    require_attn_tensor(dk2, DType::f32, q.device, op, "dk2");
    require_attn_tensor(dv2, DType::f32, q.device, op, "dv2");
    check_shape(dk2, {d.B, Nk2, d.Hkv, d.D}, op, "dk2 (B,Nk2,Hkv,D)");
    check_shape(dv2, {d.B, Nk2, d.Hkv, d.D}, op, "dv2 (B,Nk2,Hkv,D)");
  } else {
    RT_CHECK((!dk2.defined() || dk2.numel() == 0) && (!dv2.defined() || dv2.numel() == 0),
             op << ": dk2 / dv2 are given but k2 / v2 hold no rows; pass all four, or none for one source");
  }
  if (d.B == 0 || d.H == 0 || d.Nq == 0 || d.D == 0) return;
  const int device = q.device.index;
  const int64_t key_rows = two ? list_rows : d.Nk;  // one source: k's rows only
  RT_CHECK(attn_bwd_work_list_fits(device, d.B, d.H, d.Hkv, d.D, d.Nq, d.Nk, Nk2, list_rows),
           op << ": the CUDA kernel is bwd v5's list mode: compute capability 9.0 with an sm_90a build, D 64 or 128, "
              << "at least " << kWgBwdRows << " query rows and " << kWgBwdKeys << " rows in each key source (Nq = "
              << d.Nq << ", Nk = " << d.Nk << ", Nk2 = " << Nk2 << "), not deterministic mode; ask "
              << "attn_bwd_work_list_runs (kernels/attn_bwd_work_list_runs.h) first and run "
              << "attn_bwd_block_fresh_two_kv where it says no");
  RT_CHECK(list.shape[0] >= 4 && list.shape[0] <= INT_MAX,
           op << ": the list's " << list.shape[0] << " words: at least its 4 header words, under 2^31");
  RT_CHECK(reinterpret_cast<uintptr_t>(list.data) % 16 == 0,
           op << ": the list's words must be 16-byte aligned (the kernel reads its tasks as 16-byte vectors)");
  require_device_positions(mask.docs.q_pos, device, op, "q_pos");
  require_device_positions(mask.docs.q_doc_start, device, op, "q_doc_start");
  require_device_positions(mask.docs.k_pos, device, op, "k_pos");
  if (host_check_requested()) check_list_on_host(list, d, key_rows, two, stream, op);

  AttnBwdParams p;
  set_attn_bwd_pointers(p, q, k, v, dout, lse, delta, dq_acc, dk, dv);
  p.dq_turn = nullptr;  // not deterministic (attn_bwd_work_list_fits)
  p.Nq = d.Nq, p.Nk = d.Nk, p.H = d.H, p.Hkv = d.Hkv, p.group = d.group;
  p.q_begin = 0, p.q_end = d.Nq, p.k_begin = 0, p.k_end = key_rows;
  p.diag = 0;
  p.causal = false;
  p.scale = float(1.0 / std::sqrt(double(d.D)));
  p.scale2 = p.scale * kLog2e;
  p.overwrite_dkv = true;
  p.docs.on = true;  // the positions only: the list replaces the summaries and spans
  p.docs.q_pos = mask.docs.q_pos;
  p.docs.q_doc = mask.docs.q_doc_start;
  p.docs.k_pos = mask.docs.k_pos;
  p.docs.q_stride = mask.docs.q_stride;
  p.docs.k_stride = mask.docs.k_stride;
  if (two) {
    p.k2_row = attn_second_kv_row(d.Nk);
    p.k2 = k2.ptr<__nv_bfloat16>();
    p.v2 = v2.ptr<__nv_bfloat16>();
    p.dk2 = dk2.ptr<float>();
    p.dv2 = dv2.ptr<float>();
  }
  BwdWorkListDev wl;
  wl.words = list.ptr<int32_t>();
  wl.n_words = int(list.shape[0]);
  wl.B = int(d.B);
  wl.q_tiles = int((d.Nq + kAttnWorkTileRows - 1) / kAttnWorkTileRows);
  wl.key_tiles = int((key_rows + kAttnWorkTileRows - 1) / kAttnWorkTileRows);
  const int64_t window = list_kv_window(d.B, d.Nq, d.group, d.D, d.Hkv);
  if (d.D == 64) launch<64>(p, d.B, wl, window, device, stream);
  else launch<128>(p, d.B, wl, window, device, stream);
}

}  // namespace cuda
}  // namespace rt
