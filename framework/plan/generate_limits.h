// The ranges of the counts `ringtrain generate` and `ringtrain plan --generate-context` take from a user, checked
// in one place per command before any arithmetic on them (so that no sum or product of them can wrap):
//   prompt tokens    >= 1        generate: the ids of --prompt / --prompt-ids; plan: --generate-context
//   new tokens       >= 0        --max-new-tokens
//   prompt + new     <= kMaxGenerateTokens: the model's positions are 32-bit (Batch::positions, the decode
//                    position), and the prefill pads the prompt up to a multiple of 2 cp, so 2^30 leaves room
//   prefill chunk    0 (auto) or 1 .. kMaxGenerateTokens (--prefill-chunk)
// Both commands call check_generate_counts with the same numbers, so plan refuses exactly what generate refuses.
#pragma once
#include <cstdint>
#include <string>

namespace rt {

constexpr int64_t kMaxGenerateTokens = int64_t(1) << 30;  // 1,073,741,824 tokens: prompt and new tokens together

struct GenerateCounts {
  int64_t prompt_tokens = 0;  // the prompt's ids (plan: --generate-context)
  int64_t new_tokens = 0;     // --max-new-tokens
  int64_t prefill_chunk = 0;  // --prefill-chunk (0: auto)
  std::string prompt_from;    // the option that gave the prompt, named in the message: "--generate-context" (the
                              // count itself), "--prompt" or "--prompt-ids"
};

// "" or the refusal of the first count out of range, naming the option, the range and a value that works.
std::string check_generate_counts(const GenerateCounts& counts);

}  // namespace rt
