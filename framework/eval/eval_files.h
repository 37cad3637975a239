// Result files of the eval tasks: written whole under a hidden temporary name beside the target, then renamed, so
// that a failure (a full disk) leaves no half-written file.
#pragma once
#include <string>

namespace rt {

void write_result_file(const std::string& path, const std::string& contents);

}  // namespace rt
