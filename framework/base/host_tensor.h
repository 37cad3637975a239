// The unit of exchange between the model and files: checkpoints, Hugging Face weights, tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rt {

// A full (unsharded) fp32 host tensor with its checkpoint name, e.g. "layers.0.attn.wq.weight".
struct HostTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

}  // namespace rt
