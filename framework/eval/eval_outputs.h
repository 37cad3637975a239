// What `ringtrain eval` refuses at validation, before the weights meet the data (framework/eval/trainer_eval.cpp):
//   - options that cannot take effect: --by document on data without documents (data.documents: none), where the
//     positions would be window positions labelled as document positions; --dump-logits on more than one rank;
//   - outputs that cannot be written, under the one rule of framework/base/output_files.h: --out (and, for
//     loss-by-position, the .csv beside it), --dump-logits (and FILE.tokens.npy); --overwrite replaces them.
// Every refusal is a RunError with kExitUsage naming the option.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "framework/config/config.h"
#include "framework/eval/eval_tasks.h"

namespace rt {

// (option, path) of every file this eval request writes.
std::vector<std::pair<std::string, std::string>> eval_output_paths(const EvalTaskArgs& task,
                                                                   const std::string& dump_logits_file);
void check_eval_request(const Config& config, const EvalTaskArgs& task, const std::string& dump_logits_file,
                        int world_size);

}  // namespace rt
