// An environment variable set for a scope: ScopedEnv sets it (or unsets it, value nullptr) and puts back what was
// there before (the old value, or no variable) at restore() or at the end of the scope, whichever comes first, so a
// test that forces a knob read at construction (e.g. RT_ATTN_WORK_LIST) leaves the process's environment as it was,
// also when the construction throws.
#pragma once
#include <cstdlib>
#include <string>

namespace rt::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() { restore(); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void restore() {
    if (restored_) return;
    restored_ = true;
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false, restored_ = false;
};

}  // namespace rt::test
