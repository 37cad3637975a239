// The RoPE table of many positions built on several host threads (kernels/rope_table.h's build_rope_table, one
// slice of positions per thread; the same values bit for bit). Each (position, pair) is an fp64 sin and cos, about
// 2 us a position on one core: a 128K-token prefill's table took a quarter of a second of host time before the
// first kernel ran.
#pragma once
#include <cstdint>
#include <vector>

namespace rt {

// table: (n, pairs, 2) as build_rope_table writes it. max_threads 0: std::thread::hardware_concurrency (at most 16);
// fewer than 8192 positions a thread are not split further.
void build_rope_table_threaded(std::vector<float>& table, const int32_t* positions, int64_t n, const double* inv_freq,
                               int32_t pairs, double cos_sin_scale, int max_threads = 0);

}  // namespace rt
