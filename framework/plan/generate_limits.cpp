// check_generate_counts (framework/plan/generate_limits.h). Every comparison is made before any sum, so a count
// near 2^63 is refused instead of wrapping.
#include "framework/plan/generate_limits.h"

namespace rt {

std::string check_generate_counts(const GenerateCounts& c) {
  const std::string most = std::to_string(kMaxGenerateTokens);
  const std::string from = c.prompt_from.empty() ? "the prompt" : c.prompt_from;
  // "--generate-context 0" (plan's option is the count itself) or "--prompt (3 tokens)".
  const std::string prompt = from == "--generate-context" ? from + " " + std::to_string(c.prompt_tokens)
                                                          : from + " (" + std::to_string(c.prompt_tokens) + " tokens)";
  if (c.prompt_tokens < 1) return prompt + " is no prompt; give at least 1 token (e.g. --generate-context 131072)";
  if (c.prompt_tokens > kMaxGenerateTokens)
    return prompt + " is more than the " + most + " (2^30) tokens generate can address (the model's positions are "
           "32-bit); give at most " + most;
  if (c.new_tokens < 0 || c.new_tokens > kMaxGenerateTokens)
    return "--max-new-tokens " + std::to_string(c.new_tokens) + " is outside [0, " + most + "]; e.g. 64";
  if (c.new_tokens > kMaxGenerateTokens - c.prompt_tokens)  // no sum before both are known to be small
    return prompt + " + --max-new-tokens " + std::to_string(c.new_tokens) + " is more than the " + most +
           " (2^30) tokens generate can address (the model's positions are 32-bit); give --max-new-tokens at most " +
           std::to_string(kMaxGenerateTokens - c.prompt_tokens);
  if (c.prefill_chunk < 0 || c.prefill_chunk > kMaxGenerateTokens)
    return "--prefill-chunk " + std::to_string(c.prefill_chunk) + " is outside [0, " + most +
           "]; give 0 (auto: chunks only when the prefill does not fit) or a number of tokens per chunk";
  return "";
}

}  // namespace rt
