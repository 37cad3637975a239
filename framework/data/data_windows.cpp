// A sample source over given windows (make_windows_loader, data.h): the cases of `ringtrain eval --task needle`.
#include "framework/data/data_source.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

class WindowsSource final : public SampleSource {
 public:
  explicit WindowsSource(std::vector<Window> windows) : windows_(std::move(windows)) {}

  void sample(uint64_t index, int64_t T, int32_t* tokens, int32_t* targets, uint8_t* groups) const override {
    const Window& w = windows_[size_t(index % windows_.size())];
    for (int64_t p = 0; p < T; ++p) {
      tokens[p] = w.tokens[size_t(p)];
      targets[p] = w.targets[size_t(p)];
      groups[p] = 0;
    }
  }
  // Not a file split: the eval plan does not apply (the caller counts the windows).
  uint64_t split_tokens() const override { return 0; }

 private:
  std::vector<Window> windows_;
};

}  // namespace

std::unique_ptr<SampleSource> make_windows_source(const Config& config, std::vector<Window> windows) {
  RT_CHECK(!windows.empty(), "make_windows_loader: no windows");
  const size_t T = size_t(config.data.seq_len);
  for (size_t k = 0; k < windows.size(); ++k)
    RT_CHECK(windows[k].tokens.size() == T && windows[k].targets.size() == T,
             "make_windows_loader: window " << k << " has " << windows[k].tokens.size() << " tokens and "
                                            << windows[k].targets.size() << " targets; data.seq_len=" << T);
  return std::make_unique<WindowsSource>(std::move(windows));
}

}  // namespace rt
