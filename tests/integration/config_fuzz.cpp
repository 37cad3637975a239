// A seeded, time-bounded fuzz of the config: configs/tiny.yaml mutated one way at a time (a key deleted, a value
// of the wrong type, zero, negative, huge, NaN or infinite numbers, an unknown key or section, a bad enum, a
// section replaced by junk) and run through `ringtrain plan` (the config load, its validation and a measuring
// pass over the model it describes). Each case must end with exit 0 or 2 within its time limit (no signal, no
// hang), and an exit 2 must print its error once, naming the key the mutation touched, with no source location.
//   RT_FUZZ_SEED (default 31), RT_FUZZ_CASES (default 140), RT_FUZZ_CASE_LIMIT_S (default 20).
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/mpi/process_runner.h"

namespace {

namespace fs = std::filesystem;

struct Mutation {
  std::string what;  // for the failure message
  std::string key;   // the dotted key an error must name ("" when the mutation may be valid and names nothing)
  YAML::Node config;
};

struct Leaf {
  std::string section, key;
  YAML::Node value;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::vector<Leaf> leaves_of(const YAML::Node& root) {
  std::vector<Leaf> out;
  for (const auto& section : root) {
    const std::string s = section.first.as<std::string>();
    if (section.second.IsMap())
      for (const auto& kv : section.second) out.push_back({s, kv.first.as<std::string>(), kv.second});
    else
      out.push_back({"", s, section.second});
  }
  return out;
}

YAML::Node parse(const std::string& text) { return YAML::Load(text); }

// One mutation of `base` drawn from `rng`.
Mutation mutate(const YAML::Node& base, std::mt19937_64& rng, int index) {
  YAML::Node c = YAML::Clone(base);
  const std::vector<Leaf> leaves = leaves_of(c);
  const Leaf& leaf = leaves[rng() % leaves.size()];
  const std::string dotted = leaf.section.empty() ? leaf.key : leaf.section + "." + leaf.key;
  auto set = [&](const YAML::Node& v) {
    if (leaf.section.empty()) c[leaf.key] = v;
    else c[leaf.section][leaf.key] = v;
  };
  static const std::vector<std::string> numbers = {"0", "-1", "-2147483648", "2147483648", "1e30", "-1e30",
                                                   ".nan", ".inf", "-.inf", "1.5", "99999999", "0.0"};
  static const std::vector<std::string> wrong_types = {"not_a_number", "[1, 2]", "{a: 1}", "true", "''", "~",
                                                       "[]", "{}", "'12abc'", "0x10"};
  switch (rng() % 8) {
    case 0: {  // delete a key: the default takes its place, or the error names the key
      if (leaf.section.empty()) c.remove(leaf.key);
      else c[leaf.section].remove(leaf.key);
      return {"delete " + dotted, "", c};
    }
    case 1: case 2: {  // a number out of range
      const std::string v = numbers[rng() % numbers.size()];
      set(parse(v));
      return {dotted + ": " + v, dotted, c};
    }
    case 3: {  // a value of the wrong type
      const std::string v = wrong_types[rng() % wrong_types.size()];
      set(parse(v));
      return {dotted + ": " + v, dotted, c};
    }
    case 4: {  // a bad enum or string
      const std::string v = "bogus_" + std::to_string(index);
      set(YAML::Node(v));
      return {dotted + ": " + v, dotted, c};
    }
    case 5: {  // an unknown key in a section, or an unknown section
      const std::string name = "zz_unknown_" + std::to_string(index);
      if (!leaf.section.empty() && rng() % 2 == 0) {
        c[leaf.section][name] = 1;
        return {"add " + leaf.section + "." + name, leaf.section + "." + name, c};
      }
      c[name] = parse("{a: 1}");
      return {"add section " + name, name, c};
    }
    case 6: {  // a section replaced by junk
      const std::string section = leaf.section.empty() ? leaf.key : leaf.section;
      static const std::vector<std::string> junk = {"5", "[1, 2, 3]", "just_text", "{nested: {deeper: [1, {x: y}]}}"};
      const std::string v = junk[rng() % junk.size()];
      c[section] = parse(v);
      return {section + " replaced by " + v, section, c};
    }
    default: {  // nested junk inside a leaf
      set(parse("{nested: [1, {deeper: .nan}]}"));
      return {dotted + ": nested junk", dotted, c};
    }
  }
}

struct Outcome {
  Mutation mutation;
  rt::test::ProcessResult result;
};

TEST(ConfigFuzz, EveryMutationOfTinyEndsWith0Or2AndNamesItsKey) {
  const int seed = env_int("RT_FUZZ_SEED", 31), cases = env_int("RT_FUZZ_CASES", 140);
  const int limit_s = env_int("RT_FUZZ_CASE_LIMIT_S", 20);
  const YAML::Node base = YAML::LoadFile(std::string(RT_SOURCE_DIR) + "/configs/tiny.yaml");
  const fs::path dir = fs::temp_directory_path() / ("rt_config_fuzz_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  rt::test::scrub_mpi_environment();
  std::mt19937_64 rng{static_cast<uint64_t>(seed)};
  std::vector<Outcome> outcomes;
  for (int i = 0; i < cases; ++i) outcomes.push_back({mutate(base, rng, i), {}});
  // Two at a time (CI has two cores); each in a directory of its own (a run_dir is never created by plan).
  auto run = [&](size_t i) {
    const fs::path file = dir / ("case_" + std::to_string(i) + ".yaml");
    YAML::Emitter out;
    out << outcomes[i].mutation.config;
    std::ofstream(file) << out.c_str() << "\n";
    outcomes[i].result = rt::test::run_command("cd '" + dir.string() + "' && OMPI_ALLOW_RUN_AS_ROOT=1 "
                                               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -s KILL " +
                                               std::to_string(limit_s) + " '" + RINGTRAIN_BINARY + "' plan '" +
                                               file.string() + "' 2>&1");
  };
  for (size_t i = 0; i < outcomes.size(); i += 2) {
    std::thread second;
    if (i + 1 < outcomes.size()) second = std::thread(run, i + 1);
    run(i);
    if (second.joinable()) second.join();
  }
  int refused = 0;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Mutation& m = outcomes[i].mutation;
    const rt::test::ProcessResult& r = outcomes[i].result;
    const std::string where = "case " + std::to_string(i) + " (seed " + std::to_string(seed) + "): " + m.what;
    if (r.exit_code == 128 + 9) {
      ADD_FAILURE() << where << ": no answer within " << limit_s << " s\n" << r.output;
      continue;
    }
    if (r.exit_code != 0 && r.exit_code != 2) {
      ADD_FAILURE() << where << ": exit " << r.exit_code << " (only 0 or 2 may end a config's plan)\n" << r.output;
      continue;
    }
    if (r.exit_code == 0) continue;
    ++refused;
    size_t errors = 0;
    const std::string mark = "ringtrain: error";
    for (size_t at = r.output.find(mark); at != std::string::npos; at = r.output.find(mark, at + 1)) ++errors;
    EXPECT_EQ(errors, 1u) << where << ": the error must be printed once\n" << r.output;
    if (!m.key.empty()) {
      EXPECT_NE(r.output.find(m.key), std::string::npos) << where << ": the error must name " << m.key << "\n"
                                                         << r.output;
    }
    EXPECT_FALSE(std::regex_search(r.output, std::regex(R"(\.(cpp|h):[0-9]+\])")))
        << where << ": a source location in a user's error\n" << r.output;
  }
  // The fuzz must exercise refusals, not only accepted configs.
  EXPECT_GE(refused, cases / 2) << "only " << refused << " of " << cases << " mutations were refused";
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
