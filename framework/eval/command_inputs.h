// The inputs eval and generate take by path, refused with the real cause and the fix before anything is loaded:
//   - a Hugging Face model directory given as --checkpoint (config.json, no state.json) names `ringtrain
//     import-hf`, instead of failing later on tensor names "written for a different model config";
//   - a directory where a file is needed (--prompt-ids) says so, instead of reading as an empty prompt.
// Every refusal is a RunError with kExitUsage.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "framework/base/host_tensor.h"

namespace rt {

// "" or why `path` cannot be a ringtrain checkpoint (an HF model directory), naming import-hf.
std::string checkpoint_argument_problem(const std::string& path);
// Throws RunError(kExitUsage, "<command> --checkpoint: ...") when checkpoint_argument_problem is not "".
void check_checkpoint_argument(const std::string& command, const std::string& path);
// check_checkpoint_argument, then the weights (load_model_weights); any refusal of the checkpoint is a RunError
// (kExitUsage) "<command> --checkpoint: ...".
std::vector<HostTensor> load_checkpoint_argument(const std::string& command, const std::string& path,
                                                 std::map<std::string, std::string>* metadata);

// "" or why `path` (given as `option`) is not a readable file: missing, a directory, unreadable.
std::string input_file_problem(const std::string& option, const std::string& path);
// The whole file; RunError(kExitUsage, "<command> <option>: ...") when input_file_problem is not "" or the read fails.
std::string read_input_file(const std::string& command, const std::string& option, const std::string& path);

}  // namespace rt
