// import-hf and export-hf: Hugging Face directory <-> ringtrain checkpoint.
#include "framework/hf/hf_commands.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "framework/checkpoint/checkpoint.h"
#include "framework/base/checkpoint_io.h"
#include "framework/base/run_errors.h"
#include "framework/hf/hf_format.h"
#include "framework/hf/init_from.h"
#include "framework/model/model.h"
#include "framework/config/rope_scaling.h"
#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

// The files an export carries over from the HF directory the weights came from.
bool is_side_file(const std::string& name) {
  const bool tokenizer_json = name.rfind("tokenizer", 0) == 0 && name.size() > 5 &&
                              name.compare(name.size() - 5, 5, ".json") == 0;
  return tokenizer_json || name == "tokenizer.model" || name == "special_tokens_map.json" ||
         name == "generation_config.json";
}

// Anything the input checks throw is a refusal of the user's input (exit 2, README "When things go wrong");
// an output that cannot be written (a full disk) is exit 2 too (write_new_directory).
template <class Body>
auto refusing(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const RunError&) {
    throw;
  } catch (const Error& e) {
    throw RunError(kExitUsage, e.what());
  }
}

// --out as the directory it names: "X/", "X/." and "./X" become "X". Refuses "", ".", "/" and paths ending in
// "..", which name no new directory, before anything is read or written.
std::string normalised_out_dir(const std::string& out) {
  if (out.empty()) throw RunError(kExitUsage, "--out is empty; give the directory to create, e.g. --out ckpt/imported");
  fs::path p = fs::path(out).lexically_normal();
  if (!p.empty() && !p.has_filename()) p = p.parent_path();  // "X/" -> "X"
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw RunError(kExitUsage, "--out '" + out + "' names no new directory; give the directory to create, e.g. "
                               "--out ckpt/imported");
  return p.string();
}

// overwrite (--overwrite): an existing directory may be replaced (once the new one is complete), never the input
// itself, nor a file.
void require_new_dir(const std::string& dir, bool overwrite, const std::string& input) {
  std::error_code ec;
  if (fs::exists(dir, ec) && fs::equivalent(dir, input, ec))
    throw Error("--out '" + dir + "' is the input itself; choose another directory");
  if (fs::exists(dir, ec) && !(overwrite && fs::is_directory(dir, ec)))
    throw Error("--out '" + dir + "' already exists" +
                std::string(fs::is_directory(dir, ec) ? "; choose a new directory, or pass --overwrite to replace it "
                                                        "(nothing is overwritten without it)"
                                                      : " and is a file; choose a directory path"));
  for (fs::path up = fs::path(dir).parent_path(); !up.empty(); up = up.parent_path()) {
    if (fs::is_directory(up, ec)) break;
    if (fs::exists(up, ec))
      throw Error("--out '" + dir + "': '" + up.string() + "' is a file, not a directory; choose another --out");
    if (up == up.parent_path()) break;
  }
}

}  // namespace

int import_hf_main(const std::string& hf_dir, const std::string& out, const std::string& device, bool overwrite) {
  const std::string out_dir = normalised_out_dir(out);
  const HfModelInfo info = refusing([&] {
    require_new_dir(out_dir, overwrite, hf_dir);
    if (device != "auto" && device != "cpu" && device != "cuda")
      throw Error("--device '" + device + "' must be auto, cpu or cuda (the device the model will train on)");
    HfModelInfo read = read_hf_config(hf_dir);
    (void)rope_frequencies(read.model);  // the scaling parameters are usable
    return read;
  });
  const ModelConfig& m = info.model;
  const bool cuda = device == "cuda" || (device == "auto" && cuda_available());
  if (cuda && m.head_dim() != 64 && m.head_dim() != 128)
    throw RunError(kExitUsage, "Hugging Face model '" + hf_dir + "': head_dim = hidden_size / num_attention_heads = " +
                                   std::to_string(m.head_dim()) + ", but the CUDA attention kernels take head dims 64 "
                                   "and 128; train it on the CPU (import with --device cpu) or pick another model");
  std::printf("import-hf: %s (%s, %d layers, d_model %d, %d heads / %d KV heads, vocab %d, %s embeddings, dtype %s)\n",
              hf_dir.c_str(), info.architecture.c_str(), m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.vocab_size,
              m.tied_embeddings ? "tied" : "untied", info.dtype.empty() ? "?" : info.dtype.c_str());
  std::printf("import-hf: RoPE base %g, scaling %s, source context %lld\n", double(m.rope_base),
              rope_scaling_text(m.rope_scaling).c_str(), (long long)info.max_position_embeddings);
  std::fflush(stdout);
  const std::vector<HostTensor> weights = refusing([&] { return read_hf_weights(hf_dir, m); });
  std::map<std::string, std::string> meta = model_metadata(m);
  std::error_code ec;
  meta["hf_source"] = fs::absolute(hf_dir, ec).lexically_normal().string();
  meta["hf_architecture"] = info.architecture;
  meta["context_length"] = std::to_string(info.max_position_embeddings);
  Config c;
  c.model = m;
  TrainState state;
  state.step = 0;
  state.rng_state = "none";
  state.config_hash = model_config_hash(c);
  save_weights_checkpoint(out_dir, weights, state, meta, overwrite);
  std::printf("import-hf: wrote %s (%lld parameters, step 0, no optimizer state); train from it with "
              "train.init_from: %s\n",
              out_dir.c_str(), (long long)count_parameters(m), out_dir.c_str());
  return 0;
}

int export_hf_main(const std::string& checkpoint_dir, const std::string& out, const std::string& dtype,
                   uint64_t shard_bytes, std::optional<int64_t> max_positions, bool overwrite) {
  const std::string out_dir = normalised_out_dir(out);
  if (max_positions && *max_positions <= 0)
    throw RunError(kExitUsage, "--max-position-embeddings " + std::to_string(*max_positions) +
                                   " must be > 0 (the context the exported model is meant for); leave it out to "
                                   "use the context the checkpoint was trained at");
  const LoadedCheckpoint ckpt = refusing([&] {
    if (dtype != "bf16" && dtype != "fp32") throw Error("--dtype '" + dtype + "' must be bf16 or fp32");
    require_new_dir(out_dir, overwrite, checkpoint_dir);
    return load_checkpoint(checkpoint_dir);
  });
  const ModelConfig m = refusing([&] { return model_config_from_metadata(ckpt.metadata, checkpoint_dir); });
  int64_t context = max_positions.value_or(0);
  if (!max_positions) {
    const auto it = ckpt.metadata.find("context_length");
    if (it != ckpt.metadata.end()) context = std::atoll(it->second.c_str());
  }
  if (context <= 0)
    throw RunError(kExitUsage, "checkpoint '" + checkpoint_dir + "' does not record the context it was trained at; "
                               "pass --max-position-embeddings N");
  std::string hf_source;
  if (auto it = ckpt.metadata.find("hf_source"); it != ckpt.metadata.end()) hf_source = it->second;
  nlohmann::json source_config;
  if (!hf_source.empty() && fs::is_regular_file(fs::path(hf_source) / "config.json")) {
    std::ifstream in(fs::path(hf_source) / "config.json");
    try {
      source_config = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception&) {
      source_config = nullptr;
    }
  }
  const bool bf16 = dtype == "bf16";
  const nlohmann::json config = refusing([&] { return hf_config_json(m, context, bf16, source_config); });

  std::error_code ec;
  const bool source_present = !hf_source.empty() && fs::is_directory(hf_source, ec);
  if (!hf_source.empty() && !source_present)
    std::printf("export-hf: warning: the source directory %s is gone; no tokenizer files copied\n", hf_source.c_str());
  int copied = 0;
  write_new_directory(out_dir, "--out", [&](const std::string& tmp_dir) {
    const fs::path tmp(tmp_dir);
    write_file_durably((tmp / "config.json").string(), config.dump(2) + "\n");
    write_hf_weights(tmp.string(), ckpt.model, bf16, shard_bytes);
    if (!source_present) return;
    for (const auto& entry : fs::directory_iterator(hf_source, ec)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file() || !is_side_file(name)) continue;
      fs::copy_file(entry.path(), tmp / name, fs::copy_options::overwrite_existing, ec);
      if (ec) throw Error("cannot copy '" + entry.path().string() + "': " + ec.message());
      ++copied;
    }
  }, overwrite);
  std::printf("export-hf: wrote %s (LlamaForCausalLM, %s, max_position_embeddings %lld, RoPE base %g, scaling %s, "
              "%d tokenizer/generation files from %s)\n",
              out_dir.c_str(), dtype.c_str(), (long long)context, double(m.rope_base),
              rope_scaling_text(m.rope_scaling).c_str(), copied, hf_source.empty() ? "no HF source" : hf_source.c_str());
  return 0;
}

}  // namespace rt
