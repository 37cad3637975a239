// The gather scheme's buffers (parallel/cp/gather_scheme.h), sized for the most rows a plan can move.
#include "parallel/cp/gather_scheme.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/attention.h"
#include "kernels/attn_work_list.h"

namespace rt {

bool gather_work_list_from_env() {
  const char* env = std::getenv("RT_ATTN_WORK_LIST");  // unset or 1: on (the default), 0: off
  const std::string value = env ? env : "1";
  RT_CHECK(value == "0" || value == "1",
           "RT_ATTN_WORK_LIST=" << value << " is not 1 (the default, also when unset: the gather scheme's one launch "
                                "over the batch's work list, attn_fwd_work_list) or 0 (attn_fwd_whole_two_kv)");
  return value == "1";
}

bool gather_ready_flags_from_env() {
  const char* env = std::getenv("RT_ATTN_READY_FLAGS");  // unset or 0: off (the default), 1: on (experimental)
  const std::string value = env ? env : "0";
  RT_CHECK(value == "0" || value == "1",
           "RT_ATTN_READY_FLAGS=" << value << " is not 1 (experimental: the gather scheme's one-launch work-list "
                                  "forward on CUDA ranks is launched before the exchange's wait, behind ready flags) "
                                  "or 0 (the default, also when unset: wait, unpack, then the launch)");
  return value == "1";
}

std::unique_ptr<RingGather> make_ring_gather(const RingAttentionShape& shape, int cp, DType dkv_wire, Arena& arena) {
  RT_CHECK(cp > 1, "ring gather: a ring of one rank gathers nothing");
  const int64_t B = shape.batch, n = shape.local_tokens, Hkv = shape.kv_heads, D = shape.head_dim;
  auto g = std::make_unique<RingGather>();
  g->act = shape.dtype;
  g->wire = dkv_wire;
  g->rows_max = (cp - 1) * n;  // every row of every other rank
  const int64_t R = g->rows_max, W = Hkv * D, wire_rows = 2 * B * R;
  RT_CHECK(wire_rows <= (int64_t(1) << 31) - 1 && 2 * B * n <= (int64_t(1) << 31) - 1,
           "ring gather: " << wire_rows << " rows per exchange do not fit the i32 row indices; lower the batch or "
                           << "seq_len per ring, or use parallel.cp_scheme: ring");
  g->kv = arena.alloc(shape.dtype, {2, B, R, Hkv, D}, "ring_gather.kv");     // (2, B, Rmax, Hkv, D) K|V
  if (!shape.forward_only)  // the backward's dK|dV of the gathered rows
    g->dkv = arena.alloc(DType::f32, {2, B, R, Hkv, D}, "ring_gather.dkv");  // (2, B, Rmax, Hkv, D) f32 dK|dV
  const int64_t widest = int64_t(shape.forward_only ? dtype_size(shape.dtype)
                                                    : std::max(dtype_size(shape.dtype), dtype_size(dkv_wire)));
  const int64_t words = (wire_rows * W * widest + 3) / 4;
  g->wire_send = arena.alloc(DType::f32, {words}, "ring_gather.wire_send");  // (2, B*Rmax, W) widest, as f32 words
  g->wire_recv = arena.alloc(DType::f32, {words}, "ring_gather.wire_recv");  // (2, B*Rmax, W) widest, as f32 words
  g->send_index = arena.alloc(DType::i32, {wire_rows}, "ring_gather.send_index");      // (2*B*Rmax)
  g->unpack_index = arena.alloc(DType::i32, {wire_rows}, "ring_gather.unpack_index");  // (2*B*Rmax)
  g->return_index = arena.alloc(DType::i32, {wire_rows}, "ring_gather.return_index");  // (2*B*Rmax)
  g->k_pos = arena.alloc(DType::i32, {B, R, 2}, "ring_gather.k_pos");                  // (B, Rmax) int64
  g->k_list_pos = arena.alloc(DType::i32, {B, attn_second_kv_row(n) + R, 2}, "ring_gather.k_list_pos");  // int64
  const int64_t H = shape.heads;
  g->out2 = arena.alloc(shape.dtype, {B, n, H, D}, "ring_gather.out2");  // (B, n, H, D): at most all n rows
  g->lse2 = arena.alloc(DType::f32, {B, H, n}, "ring_gather.lse2");      // (B, H, n) f32
  g->work_list_on = gather_work_list_from_env();
  g->ready_flags_on = gather_ready_flags_from_env();
  if (arena.device().is_cuda() && g->work_list_on && g->ready_flags_on) {
    g->ready = arena.alloc(DType::i32, {1}, "ring_gather.ready");  // (1) i32: ready[0] = epoch once the rows are in
    g->fault = arena.alloc(DType::i32, {2}, "ring_gather.fault");  // (2) i32: the watchdog's fault word
    const int64_t slots = 2 * B * ((n + kAttnWorkTileRows - 1) / kAttnWorkTileRows);  // every query tile cut
    g->split_state = arena.alloc(DType::f32, {slots, shape.heads, kAttnWorkTileRows, D + 2},
                                 "ring_gather.split_state");  // (slots, H, 128, D + 2) f32
    g->split_count = arena.alloc(DType::i32, {slots, shape.heads, kAttnWorkRowGroups},
                                 "ring_gather.split_count");  // (slots, H, 8) i32
  }
  if (g->work_list_on) {
    // At most a task per 128-row query tile of each sample, each with at most half the key list's tiles + 1
    // segments (a segment needs a tile, and two segments of one source a tile left out between them; the own and the
    // gathered tiles may split one more), plus one per 32767 tiles (a segment's i16 length); 32 words of row bounds
    // per task and 4 of key range per sample and key tile.
    // With ready flags the own-first order cuts a task with own and gathered tiles in two (twice the tasks).
    const int64_t tasks = (g->split_state.defined() ? 2 : 1) * B * ((n + kAttnWorkTileRows - 1) / kAttnWorkTileRows);
    const int64_t tiles = (attn_second_kv_row(n) + R + kAttnWorkTileRows - 1) / kAttnWorkTileRows;
    const int64_t words = 4 + 36 * tasks + 4 * B * tiles + 2 * tasks * (tiles / 2 + 2 + tiles / 32767);
    g->work_list = arena.alloc(DType::i32, {words}, "ring_gather.work_list");  // (words) i32
    if (!shape.forward_only) {
      // The backward's list: a task per key tile of each sample, each with at most half the query tiles + 1
      // segments, plus one per 32767 query tiles.
      const int64_t q_tiles = (n + kAttnWorkTileRows - 1) / kAttnWorkTileRows, key_tasks = B * tiles;
      const int64_t bwd_words = 4 + 4 * key_tasks + 2 * key_tasks * (q_tiles / 2 + 1 + q_tiles / 32767);
      g->bwd_work_list = arena.alloc(DType::i32, {bwd_words}, "ring_gather.bwd_work_list");  // (bwd_words) i32
    }
  }
  return g;
}

}  // namespace rt
