#include "framework/checkpoint/model_source.h"

#include <sstream>

#include "framework/config/config_schema.h"
#include "kernels/tensor.h"

namespace rt {

std::map<std::string, std::string> model_fields_as_metadata(const Config& config) {
  std::map<std::string, std::string> out;
  for (const FieldSpec& f : config_fields())
    if (std::string(f.section) == "model") out[f.name] = field_text(config, f);
  return out;
}

namespace {

bool listed(const std::set<std::string>& paths_and_prefixes, const std::string& path) {
  for (const std::string& p : paths_and_prefixes)
    if (p == path || (!p.empty() && p.back() == '.' && path.rfind(p, 0) == 0)) return true;
  return false;
}

}  // namespace

ModelSourceReport apply_model_from_source(Config& config, const std::map<std::string, std::string>& metadata,
                                          const std::string& kind, const std::string& where,
                                          const std::set<std::string>& config_may_override) {
  const std::string origin = kind + " " + where;
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
    // Parse the source's text with the field's type, so "1e-05" and "9.99999975e-06" compare as values.
    Config from_source = config;
    std::string error;
    if (!set_field(from_source, f, it->second, &error))
      throw Error(origin + ": its model field " + f.name + " = '" + it->second + "' does not parse (" + error +
                  "); it was not written by this ringtrain");
    const std::string want = field_text(from_source, f), have = field_text(config, f);
    if (want == have) continue;
    if (config.is_explicit(path)) {
      if (listed(config_may_override, path))
        report.overridden.push_back(path + ": " + have + " (config) overrides " + want + " (" + origin + ")");
      else
        conflicts.push_back(path + ": the config sets " + have + ", the " + kind + " has " + want);
      continue;
    }
    set_field(config, f, it->second, &error);
    report.taken.push_back(path + " = " + want);
  }
  if (conflicts.empty()) return report;
  std::ostringstream os;
  os << "the config's model section disagrees with " << origin << " (it holds the model):";
  for (const std::string& c : conflicts) os << "\n  - " << c;
  os << "\nDelete these keys from the config (or the --set) so that they come from the " << kind
     << ", or set them to its values";
  throw Error(os.str());
}

}  // namespace rt
