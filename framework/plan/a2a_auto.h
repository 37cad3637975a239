// parallel.cp_a2a: auto at start-up (DESIGN.md "All-to-all and the hybrid"): the config and its first training
// samples' document structure turned into parallel/schedule/a2a_choice.h's inputs, and the pick written into the config.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "parallel/schedule/a2a_choice.h"

namespace rt {

constexpr int kA2aAutoSamples = 4;  // training samples whose documents decide cp_a2a: auto

// The prediction per u for this config's model and grid on the given samples' document starts (T each; empty: one
// plain causal sample of data.seq_len tokens). The ring is priced at the layout the loader would run: balanced's
// best candidate with documents under auto or balanced, else the configured (or auto's) layout.
A2aChoice a2a_choice_for(const Config& config, const std::vector<std::vector<int64_t>>& doc_starts);

// Resolves parallel.cp_a2a: auto in place from the first kA2aAutoSamples training samples' documents (without
// documents: plain causal). Deterministic, so every rank computes the same u. Returns the start-up line (each
// candidate's predicted efficiency and the pick); "" when cp_a2a was not auto.
std::string resolve_cp_a2a_auto(Config& config, int samples = kA2aAutoSamples);

}  // namespace rt
