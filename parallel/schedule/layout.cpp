#include "parallel/schedule/layout.h"

#include "kernels/tensor.h"

namespace rt {

Layout parse_layout(const std::string& name) {
  if (name == "contiguous") return Layout::contiguous;
  if (name == "zigzag") return Layout::zigzag;
  if (name == "striped") return Layout::striped;
  if (name == "balanced") return Layout::balanced;
  RT_CHECK(false, "unknown sequence layout '" << name << "'; valid layouts: contiguous, zigzag, striped, balanced");
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous: return "contiguous";
    case Layout::zigzag: return "zigzag";
    case Layout::striped: return "striped";
    case Layout::balanced: return "balanced";
  }
  return "?";
}

std::vector<int64_t> layout_positions(Layout layout, int64_t seq_len, int cp, int cp_rank) {
  RT_CHECK(cp >= 1, "context-parallel size cp = " << cp << " must be at least 1");
  RT_CHECK(0 <= cp_rank && cp_rank < cp, "cp rank " << cp_rank << " is out of range [0, " << cp << ")");
  RT_CHECK(seq_len > 0, "seq_len " << seq_len << " must be positive");
  RT_CHECK(layout != Layout::balanced, "layout balanced is chosen per sample from its documents "
                                       "(balanced_ring_order, parallel/schedule/doc_balance.h), not by rank alone");
  if (layout == Layout::zigzag) {
    RT_CHECK(seq_len % (2 * int64_t(cp)) == 0,
             "seq_len " << seq_len << " is not divisible by 2*cp = " << 2 * cp << " (zigzag); use a multiple of "
                        << 2 * cp << " or layout contiguous");
  } else {
    RT_CHECK(seq_len % cp == 0, "seq_len " << seq_len << " is not divisible by cp = " << cp << " ("
                                           << layout_name(layout) << "); use a multiple of " << cp);
  }
  const int64_t n = seq_len / cp;  // tokens per rank
  std::vector<int64_t> positions(static_cast<size_t>(n));
  switch (layout) {
    case Layout::contiguous:
      for (int64_t i = 0; i < n; ++i) positions[size_t(i)] = cp_rank * n + i;
      break;
    case Layout::zigzag: {
      const int64_t h = n / 2;  // chunk length; rank r holds chunks r and 2cp-1-r
      const int64_t tail_chunk = 2 * int64_t(cp) - 1 - cp_rank;
      for (int64_t i = 0; i < h; ++i) {
        positions[size_t(i)] = cp_rank * h + i;
        positions[size_t(h + i)] = tail_chunk * h + i;
      }
      break;
    }
    case Layout::striped:
      for (int64_t i = 0; i < n; ++i) positions[size_t(i)] = cp_rank + i * int64_t(cp);
      break;
    case Layout::balanced:
      break;  // refused above
  }
  return positions;
}

}  // namespace rt
