// The model section from its source, a checkpoint or a model directory (the source is the truth; issue 17):
//   - a model field the config does not set (in the file or by --set) takes the source's value;
//   - a model field the config sets explicitly to another value is an error naming the field and both values,
//     unless `config_may_override` names it: then the config's value stays and the report says so.
// The comparison walks the config schema (framework/config/config_schema.h), so a model field added there is covered
// without touching this file. Used by eval, resume and train.init_from (framework/hf/init_from.cpp).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/config/config.h"

namespace rt {

// Model fields as metadata strings, keyed by the field name inside model ("n_layer", "rope_base", ...), in
// the canonical text of the schema (written to model.safetensors' __metadata__).
std::map<std::string, std::string> model_fields_as_metadata(const Config& config);

struct ModelSourceReport {
  std::vector<std::string> taken;       // "model.n_layer = 2" for each field filled from the source
  std::vector<std::string> missing;     // model fields the source does not record (the config's value stays)
  std::vector<std::string> overridden;  // "model.rope_base: 20000 (config) overrides 10000 (<kind> <where>)"
};

// Applies `metadata` (the source's model fields by name; other keys are ignored) to config.model as above.
// `kind` and `where` name the source in messages ("checkpoint", "runs/a/step_10").
// `config_may_override` holds field paths ("model.rope_base") and prefixes ending in '.' ("model.rope_scaling.").
// Throws rt::Error listing every conflicting field at once. Does not validate: call validate_config afterwards.
ModelSourceReport apply_model_from_source(Config& config, const std::map<std::string, std::string>& metadata,
                                          const std::string& kind, const std::string& where,
                                          const std::set<std::string>& config_may_override = {});

}  // namespace rt
