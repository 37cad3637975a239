#include "framework/model_source.h"

#include <sstream>

#include "framework/config_schema.h"
#include "kernels/tensor.h"

namespace rt {

std::map<std::string, std::string> model_fields_as_metadata(const Config& config) {
  std::map<std::string, std::string> out;
  for (const FieldSpec& f : config_fields())
    if (std::string(f.section) == "model") out[f.name] = field_text(config, f);
  return out;
}

ModelSourceReport apply_model_from_checkpoint(Config& config, const std::map<std::string, std::string>& metadata,
                                              const std::string& origin,
                                              const std::set<std::string>& allowed_to_differ) {
  ModelSourceReport report;
  std::vector<std::string> conflicts;
  for (const FieldSpec& f : config_fields()) {
    if (std::string(f.section) != "model") continue;
    const std::string path = f.path();
    auto it = metadata.find(f.name);
    if (it == metadata.end()) {
      report.missing.push_back(path);
      continue;
    }
    // Parse the checkpoint's text with the field's type, so "1e-05" and "9.99999975e-06" compare as values.
    Config from_checkpoint = config;
    std::string error;
    if (!set_field(from_checkpoint, f, it->second, &error))
      throw Error("checkpoint " + origin + ": its metadata field " + f.name + " = '" + it->second +
                  "' does not parse (" + error + "); the file was not written by this ringtrain");
    const std::string want = field_text(from_checkpoint, f), have = field_text(config, f);
    if (want == have || allowed_to_differ.count(path)) continue;
    if (config.is_explicit(path)) {
      conflicts.push_back(path + ": the config sets " + have + ", the checkpoint has " + want);
      continue;
    }
    set_field(config, f, it->second, &error);
    report.taken.push_back(path + " = " + want);
  }
  if (conflicts.empty()) return report;
  std::ostringstream os;
  os << "the config's model section disagrees with checkpoint " << origin << " (its metadata is the model it "
     << "holds):";
  for (const std::string& c : conflicts) os << "\n  - " << c;
  os << "\nDelete these keys from the config (or the --set) so they come from the checkpoint, or set them to the "
        "checkpoint's values";
  throw Error(os.str());
}

}  // namespace rt
