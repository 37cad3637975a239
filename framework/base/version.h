#pragma once
#include <string>
namespace rt {
// "ringtrain 0.1.0 (cuda: yes|no)"
std::string version_string();
}  // namespace rt
