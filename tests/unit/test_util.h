// Small helpers of the unit tests: a fresh temporary directory, and the message of the rt::Error a call throws.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/tensor.h"

namespace rt::test {

// A new, empty directory under the system temp directory, named <prefix>_XXXXXX.
inline std::filesystem::path make_temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

// The message of the rt::Error that f throws, or "<no error>".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const rt::Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace rt::test
