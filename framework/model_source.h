// The model section from a checkpoint (the checkpoint's metadata is the truth; issue 17):
//   - a model field the config does not set (in the file or by --set) takes the checkpoint's value;
//   - a model field the config sets explicitly to another value is an error naming the field and both values;
//   - fields in `allowed_to_differ` keep the config's value silently.
// The comparison walks the config schema (framework/config_schema.h), so a model field added there is covered
// without touching this file. Used by eval and resume; init_from uses the same call.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/config.h"

namespace rt {

// Model fields as metadata strings, keyed by the field name inside model ("n_layer", "rope_base", ...), in
// the canonical text of the schema (written to model.safetensors' __metadata__).
std::map<std::string, std::string> model_fields_as_metadata(const Config& config);

struct ModelSourceReport {
  std::vector<std::string> taken;    // "model.n_layer = 2" for each field filled from the checkpoint
  std::vector<std::string> missing;  // model fields the checkpoint does not record (the config's value stays)
};

// Applies `metadata` (a checkpoint's model fields by name; other keys are ignored) to config.model as above.
// `origin` names the checkpoint in messages. Throws rt::Error listing every conflicting field at once.
// Does not validate the result: call validate_config afterwards.
ModelSourceReport apply_model_from_checkpoint(Config& config, const std::map<std::string, std::string>& metadata,
                                              const std::string& origin,
                                              const std::set<std::string>& allowed_to_differ = {});

}  // namespace rt
