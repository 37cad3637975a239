#include "framework/base/version.h"
namespace rt {
std::string version_string() {
#ifdef RINGTRAIN_HAVE_CUDA
  const char* cuda = "yes";
#else
  const char* cuda = "no";
#endif
  return std::string("ringtrain ") + RINGTRAIN_VERSION + " (cuda backend: " + cuda + ")";
}
}  // namespace rt
