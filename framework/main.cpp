// The ringtrain command: train, plan, eval, version. (Filled in by the framework CLI.)
#include <cstdio>
int main() {
  std::printf("ringtrain %s\n", RINGTRAIN_VERSION);
  return 0;
}
