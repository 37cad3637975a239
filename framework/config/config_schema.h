// The config schema as data: one FieldSpec per YAML key (internal to framework/config_*.cpp).
// Parsing, `--set`, the resolved YAML, the table and the hash all walk this one list, so a field added
// to config.h needs exactly one line in config_schema.cpp.
#pragma once
#include <string>
#include <vector>

#include "framework/config/config.h"

namespace rt {

// i32_or_auto: "auto" is stored as 0; cp_scheme: a CpSchemeSetting, spelled ring | gather | auto.
enum class FieldType { i32, u64, f32, f64, boolean, string, i32_or_auto, cp_scheme };

struct FieldSpec {
  const char* section;            // "model", ..., or "" for a top-level key (device)
  const char* name;               // the YAML key inside the section
  FieldType type;
  void* (*address)(Config&);      // where the value lives
  const char* help;               // one line, shown in the table
  std::string path() const { return section[0] ? std::string(section) + "." + name : std::string(name); }
};

const std::vector<FieldSpec>& config_fields();
const std::vector<std::string>& config_sections();
// nullptr when no field has this dotted path.
const FieldSpec* find_field(const std::string& path);
// "(did you mean 'model.n_head'?)" or "" when nothing is close.
std::string did_you_mean(const std::string& path);

// Parses `text` with the field's type into `config`. On failure returns false and sets `error` to a
// message naming the key, what was expected and what was given (without the location prefix).
bool set_field(Config& config, const FieldSpec& field, const std::string& text, std::string* error);
// Canonical text of the value: parses back to the same value (shortest round-trip for floats).
std::string field_text(const Config& config, const FieldSpec& field);
const char* field_type_name(FieldType type);

}  // namespace rt
