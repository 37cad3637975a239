// The RoPE table: for each of this rank's positions and each rotated pair, (s cos(angle), s sin(angle)) with
// angle = position * inv_freq[i] and s the cos/sin scale (yarn's attention factor, 1 otherwise). The angles and
// their cos / sin are computed in fp64 on the host; the table is stored in fp32 (rope_from_table reads it), so
// the per-element kernel does no transcendental math. Layout: (n, pairs, 2) f32, row-major.
#pragma once
#include <cstdint>
#include <vector>

namespace rt {

// Fills `table` (resized to n * pairs * 2) from positions (n) and inv_freq (pairs).
void build_rope_table(std::vector<float>& table, const int32_t* positions, int64_t n, const double* inv_freq,
                      int32_t pairs, double cos_sin_scale);

// Bytes of the table for n positions and a head dim of head_dim.
inline int64_t rope_table_bytes(int64_t n, int64_t head_dim) { return n * (head_dim / 2) * 2 * int64_t(sizeof(float)); }

}  // namespace rt
