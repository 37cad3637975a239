// `ringtrain eval --task needle` (framework/eval/eval_tasks.h): teacher-forced passkey / needle cases.
// A case of L <= seq_len tokens becomes one window: its tokens, padded to seq_len with its last token (causal
// attention: the padding changes nothing before it), with targets only at the answer: the token before each
// answer token predicts it. One forward scores a batch of cases on the configured grid.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/eval/case_dir.h"
#include "framework/eval/eval_tasks.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

const char* const kMaker = "launch/make_needles.py";

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  return case_field<T>(j, key, where, kMaker);
}

}  // namespace

NeedleCases read_needle_cases(const Config& config, const std::string& dir) {
  NeedleCases out;
  const fs::path root(dir);
  const nlohmann::json meta = read_case_json(root / "meta.json", "the cases' tokenizer and vocabulary", kMaker);
  const std::string where = (root / "meta.json").string();
  RT_CHECK(case_format(meta) != "ringtrain-ruler", "--cases " << dir << " holds RULER-style cases (" << where
           << "); run them with --task ruler, or write needle cases with " << kMaker);
  const std::string theirs = field<std::string>(meta, "tokenizer", where);
  const int64_t vocab = field<int64_t>(meta, "vocab_size", where);
  out.note = check_case_tokenizer(config, dir, theirs, vocab, kMaker, "needle");
  const int64_t V = config.model.vocab_size;
  std::ifstream lines(root / "cases.jsonl");
  RT_CHECK(lines.good(), "--cases: cannot read '" << (root / "cases.jsonl").string() << "'; point --cases at a "
                                                  "directory written by launch/make_needles.py");
  const int64_t T = config.data.seq_len;
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = (root / "cases.jsonl").string() + " line " + std::to_string(n);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    RT_CHECK(!j.is_discarded() && j.is_object(), at << " is not a JSON object; rebuild the cases");
    NeedleCase c;
    c.id = field<int64_t>(j, "id", at);
    c.length = field<int64_t>(j, "length", at);
    c.depth = field<double>(j, "depth", at);
    c.answer_begin = field<int64_t>(j, "answer_begin", at);
    c.answer_end = field<int64_t>(j, "answer_end", at);
    c.kind = j.value("kind", "needle");
    RT_CHECK(c.length <= T, at << ": case " << c.id << " has " << c.length << " tokens, longer than the trained "
             "length data.seq_len=" << T << "; rebuild the cases with --max-length " << T << " or lower");
    RT_CHECK(1 <= c.answer_begin && c.answer_begin < c.answer_end && c.answer_end <= c.length,
             at << ": the answer span [" << c.answer_begin << ", " << c.answer_end << ") is not inside the case's "
             << c.length << " tokens after its first; rebuild the cases");
    const fs::path file = root / field<std::string>(j, "file", at);
    std::ifstream in(file, std::ios::binary);
    RT_CHECK(in.good(), at << ": cannot read the token file '" << file.string() << "'");
    c.tokens.resize(size_t(c.length));  // (length) int32 little-endian
    in.read(reinterpret_cast<char*>(c.tokens.data()), std::streamsize(c.tokens.size() * sizeof(int32_t)));
    RT_CHECK(in.gcount() == std::streamsize(c.tokens.size() * sizeof(int32_t)) && in.peek() == EOF,
             at << ": '" << file.string() << "' does not hold exactly " << c.length << " int32 tokens");
    for (int32_t t : c.tokens)
      RT_CHECK(t >= 0 && t < V, at << ": token " << t << " in '" << file.string() << "' is outside the model's "
                                   << "vocabulary [0, " << V << "); rebuild the cases with the model's tokenizer");
    out.cases.push_back(std::move(c));
  }
  RT_CHECK(!out.cases.empty(), "--cases " << dir << ": cases.jsonl lists no case; rebuild with launch/make_needles.py");
  return out;
}

std::vector<NeedleScore> score_needles(Model& model, const Config& config, const LoaderRank& rank,
                                       const std::vector<NeedleCase>& cases, const HostTensor& lm_head,
                                       bool print_progress) {
  const int64_t T = config.data.seq_len, C = model.shape().C, V = model.shape().V;
  RT_CHECK(lm_head.shape.size() == 2 && lm_head.shape[0] == V && lm_head.shape[1] == C,
           "needle: the LM head " << lm_head.name << " is not (" << V << ", " << C << ")");
  std::vector<Window> windows;
  for (const NeedleCase& c : cases) {
    Window w;
    w.tokens.assign(c.tokens.begin(), c.tokens.end());
    w.tokens.resize(size_t(T), c.tokens.back());  // (T) padded past the case
    w.targets.assign(size_t(T), -1);              // (T) only the answer's tokens
    for (int64_t p = c.answer_begin; p < c.answer_end; ++p) w.targets[size_t(p - 1)] = c.tokens[size_t(p)];
    windows.push_back(std::move(w));
  }
  std::unique_ptr<DataLoader> loader = make_windows_loader(config, rank, std::move(windows));
  const uint64_t B = uint64_t(config.train.batch_size), B_local = B / uint64_t(rank.dp);
  const uint64_t batches = (cases.size() + B - 1) / B;
  std::vector<double> sums(3 * cases.size(), 0.0);  // (3, cases): answer tokens, argmax hits, log-prob sum
  std::vector<float> hidden(static_cast<size_t>(C));  // (C) one token's final hidden state
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last_print = start;
  for (uint64_t b = 0; b < batches; ++b) {
    const Batch batch = loader->next();
    const double count = model.global_target_count(batch);
    const std::vector<float> losses = model.step(batch, count, /*want_grad=*/false);  // (B_local * T_local)
    const Tensor final_hidden = model.final_hidden();                                 // (B_local * T_local, C)
    for (size_t i = 0; i < losses.size(); ++i) {
      if (batch.targets[i] < 0) continue;
      const uint64_t k = b * B + uint64_t(rank.dp_rank) * B_local + i / size_t(batch.tokens_per_rank);
      copy_cast(Tensor(hidden.data(), DType::f32, Device::cpu(), {1, C}),
                final_hidden.slice(int64_t(i), int64_t(i) + 1));
      int64_t best = 0;
      double best_logit = -INFINITY;
      for (int64_t v = 0; v < V; ++v) {
        const float* w = lm_head.values.data() + v * C;
        double acc = 0;
        for (int64_t c = 0; c < C; ++c) acc += double(hidden[size_t(c)]) * double(w[c]);
        if (acc > best_logit) best_logit = acc, best = v;
      }
      sums[k] += 1;
      sums[cases.size() + k] += best == batch.targets[i] ? 1 : 0;
      sums[2 * cases.size() + k] -= double(losses[i]);
    }
    const auto now = clock::now();
    if (print_progress && (std::chrono::duration<double>(now - last_print).count() >= 5 || b + 1 == batches)) {
      last_print = now;
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double eta = elapsed / double(b + 1) * double(batches - b - 1);
      std::fprintf(stderr, "needle: %llu/%zu cases, %.0f s elapsed, ETA %.0f s\n",
                  (unsigned long long)std::min<uint64_t>((b + 1) * B, cases.size()), cases.size(), elapsed, eta);
      std::fflush(stdout);
    }
  }
  model.dp_cp_comm().all_reduce_sum(sums.data(), int(sums.size()));
  std::vector<NeedleScore> scores(cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    scores[k].answer_tokens = int64_t(sums[k]);
    scores[k].argmax_hits = int64_t(sums[cases.size() + k]);
    scores[k].logprob_sum = sums[2 * cases.size() + k];
  }
  return scores;
}

void write_needle_scores(const std::vector<NeedleCase>& cases, const std::vector<NeedleScore>& scores,
                         const std::string& out, const std::string& checkpoint, OutputFiles& outputs) {
  std::string jsonl;
  for (size_t k = 0; k < cases.size(); ++k) {
    const NeedleCase& c = cases[k];
    const NeedleScore& s = scores[k];
    const double n = double(std::max<int64_t>(s.answer_tokens, 1));
    const nlohmann::json j = {{"id", c.id}, {"kind", c.kind}, {"length", c.length}, {"depth", c.depth},
                              {"answer_tokens", s.answer_tokens}, {"argmax_hits", s.argmax_hits},
                              {"accuracy", double(s.argmax_hits) / n}, {"exact", s.argmax_hits == s.answer_tokens},
                              {"mean_logprob", s.logprob_sum / n}, {"checkpoint", checkpoint}};
    jsonl += j.dump() + "\n";
  }
  outputs.write_text("--out", out, jsonl);
}

}  // namespace rt
