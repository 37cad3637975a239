// The attention variant overrides (kernels/cuda/attention/attn_variant.h): parsed once from the environment, then only
// changed through set_attn_variant_override().
#include "kernels/cuda/attention/attn_variant.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/tensor.h"

namespace rt {
namespace cuda {
namespace {

constexpr int kFwdVariants[] = {2, 3, 4, 5};
constexpr int kBwdVariants[] = {1, 4, 5};

template <size_t N>
bool built(const int (&list)[N], int v) {
  for (int x : list)
    if (x == v) return true;
  return false;
}
template <size_t N>
std::string names(const int (&list)[N]) {
  std::string s;
  for (int x : list) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

void check(const AttnVariantOverride& o, const char* fwd_source, const char* bwd_source) {
  RT_CHECK(o.fwd == 0 || built(kFwdVariants, o.fwd),
           fwd_source << " = " << o.fwd << " names no forward attention kernel of this build; valid: "
                      << attn_fwd_variant_names() << " (or unset for the default; the others are in dev/attention)");
  RT_CHECK(o.bwd == 0 || built(kBwdVariants, o.bwd),
           bwd_source << " = " << o.bwd << " names no backward attention kernel of this build; valid: "
                      << attn_bwd_variant_names() << " (or unset for the default; the others are in dev/attention)");
  RT_CHECK(o.fwd_rows == 0 || o.fwd_rows == 64 || o.fwd_rows == 128 || o.fwd_rows == 192,
           "fwd v5 query rows per CTA = " << o.fwd_rows << " is not 64, 128 or 192 (RT_ATTN_FWD_ROWS; unset for the "
                                                           "default choice)");
  RT_CHECK(o.fwd_doc_l2_kb >= 0 && o.fwd_doc_l2_kb <= (1 << 30),
           "fwd v5's document window budget = " << o.fwd_doc_l2_kb << " KiB is not from 0 to 2^30 "
                                                   "(RT_ATTN_FWD_DOC_L2_KB; unset for the default 16384)");
}

// "" or unset: 0; "5" or "v5": 5 (a positive number up to max_value); anything else: an error naming the
// variable and the valid values.
int parse(const char* name, const std::string& valid, long max_value = 99) {
  const char* env = std::getenv(name);
  if (env == nullptr || env[0] == '\0') return 0;
  const char* digits = (env[0] == 'v' || env[0] == 'V') ? env + 1 : env;
  char* end = nullptr;
  const long v = std::strtol(digits, &end, 10);
  RT_CHECK(end != digits && *end == '\0' && v > 0 && v <= max_value,
           name << "='" << env << "' is not one of " << valid << " (or unset for the default)");
  return int(v);
}

std::mutex g_mutex;
bool g_loaded = false;
AttnVariantOverride g_override;

void load_locked() {
  if (g_loaded) return;
  AttnVariantOverride o;
  o.fwd = parse("RT_ATTN_FWD_VARIANT", attn_fwd_variant_names());
  o.bwd = parse("RT_ATTN_BWD_VARIANT", attn_bwd_variant_names());
  o.fwd_rows = parse("RT_ATTN_FWD_ROWS", "64, 128, 192", 192);
  if (const char* env = std::getenv("RT_ATTN_FWD_DOC_L2_KB"); env != nullptr && env[0] != '\0') {
    char* end = nullptr;
    const long kb = std::strtol(env, &end, 10);
    RT_CHECK(end != env && *end == '\0' && kb >= 0 && kb <= (1L << 30),
             "RT_ATTN_FWD_DOC_L2_KB='" << env << "' is not a whole number of KiB from 0 to 2^30 (0: head by head; "
                                          "unset for the default 16384)");
    o.fwd_doc_l2_kb = int(kb);
  }
  check(o, "RT_ATTN_FWD_VARIANT", "RT_ATTN_BWD_VARIANT");  // and RT_ATTN_FWD_ROWS
  g_override = o;
  g_loaded = true;
}

}  // namespace

std::string attn_fwd_variant_names() { return names(kFwdVariants); }
std::string attn_bwd_variant_names() { return names(kBwdVariants); }

AttnVariantOverride attn_variant_override() {
  std::lock_guard<std::mutex> lock(g_mutex);
  load_locked();
  return g_override;
}

void set_attn_variant_override(const AttnVariantOverride& o) {
  check(o, "set_attn_variant_override: fwd", "set_attn_variant_override: bwd");
  std::lock_guard<std::mutex> lock(g_mutex);
  g_override = o;
  g_loaded = true;
}

}  // namespace cuda
}  // namespace rt
