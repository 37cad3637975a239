// Sequence layouts for context parallelism (DESIGN.md "Sequence layouts and the ring schedule").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rt {

// balanced: chosen per sample from its documents (parallel/schedule/doc_balance.h); the ring then runs on the document
// mask (RingAttention::set_documents), so layout_positions and ring_block_plan refuse it.
enum class Layout { contiguous, zigzag, striped, balanced };
Layout parse_layout(const std::string& name);  // throws rt::Error listing the valid names
const char* layout_name(Layout layout);

// Global positions (length seq_len / cp) of the tokens rank `cp_rank` holds, in local order.
//   contiguous: [r*n, (r+1)*n);  zigzag: chunks r and 2cp-1-r of 2cp chunks;  striped: r, r+cp, r+2cp, ...
// Requires seq_len % cp == 0 (zigzag: seq_len % (2*cp) == 0); throws rt::Error naming the fix otherwise.
std::vector<int64_t> layout_positions(Layout layout, int64_t seq_len, int cp, int cp_rank);

}  // namespace rt
