// The all-to-all head exchange's plan (parallel/schedule/head_exchange.h).
#include "parallel/schedule/head_exchange.h"

#include <algorithm>
#include <numeric>

namespace rt {

int pipeline_head_groups(int u, int64_t kv_heads, bool replicated) {
  constexpr int kGroups = 2;  // the pipeline's depth (head_exchange.h)
  return u > 1 && !replicated && kv_heads % kGroups == 0 ? kGroups : 1;
}

HeadExchangeShape head_exchange_shape(const RingAttentionShape& shape, int u, int head_groups) {
  const int64_t H = shape.heads, Hkv = shape.kv_heads, B = shape.batch, n = shape.local_tokens, D = shape.head_dim;
  RT_CHECK(u >= 1 && H % u == 0,
           "parallel.cp_a2a=" << u << " does not divide the " << H
                              << " query heads of a tensor-parallel rank; tp x cp_a2a must divide model.n_head");
  RT_CHECK(Hkv >= 1 && H % Hkv == 0, "context attention: " << H << " query heads are not a multiple of " << Hkv
                                                           << " KV heads");
  HeadExchangeShape x;
  x.u = u;
  x.q_heads = H / u;
  const int64_t g = H / Hkv;
  x.kv_group = std::gcd(x.q_heads, g);
  x.kv_heads = x.q_heads / x.kv_group;
  x.replicated = u * x.kv_heads > Hkv;
  if (u == 1) return x;
  x.head_groups = head_groups > 0 ? head_groups : pipeline_head_groups(u, x.kv_heads, x.replicated);
  RT_CHECK(x.kv_heads % x.head_groups == 0 && (x.head_groups == 1 || !x.replicated),
           "context attention: " << x.head_groups << " head groups must divide the " << x.kv_heads
                                 << " KV heads per all-to-all rank" << (x.replicated ? " (replicated K/V: use 1)" : "")
                                 << "; use 0 for the default");
  const double act = double(dtype_size(shape.dtype)), grad = x.replicated ? 4.0 : act;
  const double rows = double(u - 1) * double(B * n * D);  // rows leaving this rank, times D
  const double hq = double(x.q_heads), hk = double(x.kv_heads);
  x.forward_bytes = rows * ((hq + 2 * hk) * act + hq * act);
  x.backward_bytes = rows * ((3 * hq + 2 * hk) * act + (hq + 2 * hk) * grad);
  const double nh_d = double(B * u * n * D);  // one head-sharded head of the group's tokens
  // The exchange buffers (send + recv): G = 1 one pair of the widest use; else two pairs for the way out and one for
  // the way back, each a group's width.
  const double chunk = 2.0 * double(u * B * n * D), out_w = (3 * hq + 2 * hk) * act, back_w = (hq + 2 * hk) * grad;
  const double wires = x.head_groups == 1 ? chunk * std::max(out_w, back_w)
                                          : chunk * (2 * out_w + std::max(back_w, hq * act)) / x.head_groups;
  x.buffer_bytes = nh_d * ((3 * hq + 2 * hk) * act + (hq + 2 * hk) * grad) + wires +
                   (x.replicated ? 2.0 * double(B * n * Hkv * D) * 4.0 : 0.0);
  x.replica_bytes = x.replicated ? nh_d * 2 * (hk - double(Hkv) / u) * act : 0.0;
  return x;
}

}  // namespace rt
