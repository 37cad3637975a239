// `ringtrain eval --task ruler` (framework/eval/eval_ruler.h): reading the cases, greedy generation on the grid,
// the result files.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "framework/base/run_errors.h"
#include "framework/eval/case_dir.h"
#include "framework/eval/eval_ruler.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

const char* const kMaker = "launch/make_ruler.py";
// The longest prompt-lookup draft: each drafted position costs a host argmax over the vocabulary (V x C), so a
// wrong draft must stay cheap; 8 tokens a forward already cut a copying answer's forwards eightfold.
constexpr int64_t kLookupDraftMax = 8;

std::vector<std::string> read_token_text(const fs::path& path, int64_t vocab) {
  const nlohmann::json j = read_case_json(path, "each token's text", kMaker);
  const std::string where = path.string();
  RT_CHECK(case_field<std::string>(j, "encoding", where, kMaker) == "hex",
           where << ": encoding is not \"hex\"; rebuild the cases with " << kMaker);
  const auto hex = case_field<std::vector<std::string>>(j, "tokens", where, kMaker);
  RT_CHECK(int64_t(hex.size()) == vocab, where << " has " << hex.size() << " tokens, meta.json's vocab_size "
                                               << vocab << "; rebuild the cases with " << kMaker);
  std::vector<std::string> text;
  text.reserve(hex.size());
  for (const std::string& h : hex) {
    RT_CHECK(h.size() % 2 == 0 && h.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
             where << ": '" << h << "' is not hex bytes; rebuild the cases with " << kMaker);
    std::string bytes;
    for (size_t i = 0; i < h.size(); i += 2) bytes += char(std::stoi(h.substr(i, 2), nullptr, 16));
    text.push_back(std::move(bytes));
  }
  return text;
}

// A case's window: the prompt, the tokens chosen so far and the draft, padded past them with the last one (causal:
// the padding changes nothing before it); targets (any id) mark the positions whose argmax is asked, from the last
// chosen position to the draft's last. Returns the first asked position.
int64_t fill_window(Window& w, const RulerCase& c, const std::vector<int32_t>& chosen,
                    const std::vector<int32_t>& draft) {
  std::vector<int32_t> seq = c.prompt;
  seq.insert(seq.end(), chosen.begin(), chosen.end());
  const int64_t first = int64_t(seq.size()) - 1;
  seq.insert(seq.end(), draft.begin(), draft.end());
  std::copy(seq.begin(), seq.end(), w.tokens.begin());
  std::fill(w.tokens.begin() + int64_t(seq.size()), w.tokens.end(), seq.back());
  for (size_t p = size_t(first); p < seq.size(); ++p) w.targets[p] = 0;
  return first;
}

}  // namespace

// The id of the largest logit of one final hidden row (C) against the host's LM head (V, C): the lowest on ties.
int32_t ruler_host_argmax(const float* hidden, const HostTensor& lm_head) {
  const int64_t V = lm_head.shape[0], C = lm_head.shape[1];
  int64_t best = 0;
  double best_logit = -INFINITY;
  for (int64_t v = 0; v < V; ++v) {
    const float* w = lm_head.values.data() + v * C;
    double acc = 0;
    for (int64_t c = 0; c < C; ++c) acc += double(hidden[c]) * double(w[c]);
    if (acc > best_logit) best_logit = acc, best = v;
  }
  return int32_t(best);
}

// ruler_host_argmax of every row of rows (n, C) into out (n), on up to `threads` host threads (each row is V x C
// multiply-adds: a 32K x 768 head takes ~10 ms a row on one core; a forward asks up to batch x 9 rows, more on the
// first). Rows are split only where each thread gets at least 2^26 multiply-adds.
void ruler_host_argmax_rows(const std::vector<float>& rows, const HostTensor& lm_head, std::vector<int32_t>& out,
                            int threads) {
  const int64_t C = lm_head.shape[1], n = int64_t(out.size());
  const int64_t per_row = lm_head.shape[0] * C;
  const int64_t t_count = std::clamp<int64_t>(std::min<int64_t>(n, n * per_row >> 26), 1, std::max(threads, 1));
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) out[size_t(r)] = ruler_host_argmax(rows.data() + r * C, lm_head);
  };
  if (t_count == 1) return run(0, n);
  std::vector<std::thread> workers;
  for (int64_t t = 0; t < t_count; ++t) workers.emplace_back(run, n * t / t_count, n * (t + 1) / t_count);
  for (std::thread& w : workers) w.join();
}

RulerCases read_ruler_cases(const Config& config, const std::string& dir) {
  RulerCases out;
  const fs::path root(dir);
  const nlohmann::json meta = read_case_json(root / "meta.json", "the cases' tokenizer and vocabulary", kMaker);
  const std::string where = (root / "meta.json").string();
  const std::string format = case_format(meta);
  RT_CHECK(format == "ringtrain-ruler", "--cases " << dir << " holds no RULER-style cases (" << where << " has format '"
           << format << "'); write them with " << kMaker
           << (format == "ringtrain-needles" ? " (needle cases go to --task needle)" : ""));
  const std::string theirs = case_field<std::string>(meta, "tokenizer", where, kMaker);
  const int64_t vocab = case_field<int64_t>(meta, "vocab_size", where, kMaker);
  out.note = check_case_tokenizer(config, dir, theirs, vocab, kMaker, "ruler");
  out.token_text = read_token_text(root / "token_text.json", vocab);
  std::ifstream lines(root / "cases.jsonl");
  RT_CHECK(lines.good(), "--cases: cannot read '" << (root / "cases.jsonl").string() << "'; point --cases at a "
                         "directory written by " << kMaker);
  const int64_t T = config.data.seq_len, V = config.model.vocab_size;
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = (root / "cases.jsonl").string() + " line " + std::to_string(n);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    RT_CHECK(!j.is_discarded() && j.is_object(), at << " is not a JSON object; rebuild the cases with " << kMaker);
    RulerCase c;
    c.id = case_field<int64_t>(j, "id", at, kMaker);
    c.task = case_field<std::string>(j, "task", at, kMaker);
    c.length = case_field<int64_t>(j, "length", at, kMaker);
    const int64_t P = case_field<int64_t>(j, "prompt_tokens", at, kMaker);
    const int64_t G = case_field<int64_t>(j, "gold_tokens", at, kMaker);
    c.max_new_tokens = case_field<int64_t>(j, "max_new_tokens", at, kMaker);
    c.answers = case_field<std::vector<std::string>>(j, "answers", at, kMaker);
    c.metric = j.contains("metric") ? case_field<std::string>(j, "metric", at, kMaker) : "all";
    RT_CHECK(c.length <= T, at << ": case " << c.id << " (" << c.task << ") has length " << c.length << ", longer "
             "than the trained length data.seq_len=" << T << "; rebuild the cases with --max-length " << T
             << " or lower");
    RT_CHECK(P >= 1 && c.max_new_tokens >= 1 && P <= c.length && c.max_new_tokens <= c.length - P,
             at << ": prompt_tokens " << P << " + max_new_tokens " << c.max_new_tokens << " must fit the case's "
             "length " << c.length << " (prompt >= 1, max_new_tokens >= 1); rebuild the cases with " << kMaker);
    RT_CHECK(G >= 0 && G <= c.length, at << ": gold_tokens " << G << " is outside [0, length " << c.length << "]; "
             "rebuild the cases with " << kMaker);
    RT_CHECK(c.metric == "all" || c.metric == "part", at << ": metric '" << c.metric << "' is not all or part");
    RT_CHECK(!c.answers.empty() && std::none_of(c.answers.begin(), c.answers.end(),
                                                [](const std::string& a) { return a.empty(); }),
             at << ": no answers to look for, or an empty one (found in any text); rebuild the cases with " << kMaker);
    const fs::path file = root / case_field<std::string>(j, "file", at, kMaker);
    std::ifstream in(file, std::ios::binary);
    RT_CHECK(in.good(), at << ": cannot read the token file '" << file.string() << "'");
    std::vector<int32_t> tokens(size_t(P + G));  // (P + G) int32 little-endian: the prompt, then the gold answer
    in.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(tokens.size() * sizeof(int32_t)));
    RT_CHECK(in.gcount() == std::streamsize(tokens.size() * sizeof(int32_t)) && in.peek() == EOF,
             at << ": '" << file.string() << "' does not hold exactly " << P + G << " int32 tokens");
    for (int32_t t : tokens)
      RT_CHECK(t >= 0 && t < V, at << ": token " << t << " in '" << file.string() << "' is outside the model's "
                                   << "vocabulary [0, " << V << "); rebuild the cases with the model's tokenizer");
    c.prompt.assign(tokens.begin(), tokens.begin() + P);
    c.gold.assign(tokens.begin() + P, tokens.end());
    out.cases.push_back(std::move(c));
  }
  RT_CHECK(!out.cases.empty(), "--cases " << dir << ": cases.jsonl lists no case; rebuild with " << kMaker);
  return out;
}

std::vector<RulerResult> generate_ruler(Model& model, const Config& config, const LoaderRank& rank,
                                        const RulerCases& read, const HostTensor& lm_head, int64_t eos,
                                        bool print_progress) {
  const std::vector<RulerCase>& cases = read.cases;
  const int64_t T = config.data.seq_len, C = model.shape().C, V = model.shape().V;
  RT_CHECK(lm_head.shape.size() == 2 && lm_head.shape[0] == V && lm_head.shape[1] == C,
           "ruler: the LM head " << lm_head.name << " is not (" << V << ", " << C << ")");
  const int64_t B = config.train.batch_size, B_local = B / rank.dp;
  int64_t span = 1;  // the most argmax positions one case needs per forward: its longest draft + 1
  for (const RulerCase& c : cases) span = std::max(span, c.max_new_tokens + 1);
  std::vector<RulerResult> results(cases.size());
  std::vector<std::vector<int32_t>> draft(cases.size());
  std::vector<int64_t> slot_case(size_t(B), -1);  // (B) the case in each window slot, -1: none
  std::vector<double> choice(size_t(B * span));   // (B, span) argmax + 1 at each asked position (0: not asked)
  // Host threads for the argmax: this host's cores over the job's ranks (they may share it), at most 16.
  const int threads = int(std::clamp<int64_t>(int64_t(std::thread::hardware_concurrency()) /
                                                  std::max<int64_t>(1, int64_t(rank.dp) * rank.cp * config.parallel.tp),
                                              1, 16));
  size_t next = 0, done = 0;
  int64_t forwards = 0;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last_print = start;
  while (done < cases.size()) {
    std::vector<Window> windows(static_cast<size_t>(B));
    std::vector<int64_t> first(size_t(B), 0), asked(size_t(B), 0);  // (B) first asked position, how many
    for (int64_t s = 0; s < B; ++s) {
      if (slot_case[size_t(s)] < 0 && next < cases.size()) {
        slot_case[size_t(s)] = int64_t(next);
        draft[next] = cases[next].gold;
        draft[next].resize(std::min(draft[next].size(), size_t(cases[next].max_new_tokens)));
        ++next;
      }
      Window& w = windows[size_t(s)];
      w.tokens.assign(size_t(T), 0);    // (T)
      w.targets.assign(size_t(T), -1);  // (T) marks the positions whose argmax is asked
      const int64_t k = slot_case[size_t(s)];
      if (k < 0) continue;
      first[size_t(s)] = fill_window(w, cases[size_t(k)], results[size_t(k)].new_ids, draft[size_t(k)]);
      asked[size_t(s)] = int64_t(draft[size_t(k)].size()) + 1;
      ++results[size_t(k)].forwards;
    }
    std::unique_ptr<DataLoader> loader = make_windows_loader(config, rank, std::move(windows));
    const Batch batch = loader->next();
    model.step(batch, std::max(1.0, model.global_target_count(batch)), /*want_grad=*/false);
    ++forwards;
    const Tensor final_hidden = model.final_hidden();  // (B_local * T_local, C)
    std::fill(choice.begin(), choice.end(), 0.0);
    std::vector<size_t> at;   // (rows) the asked rows' places in `choice`
    std::vector<float> rows;  // (rows, C) their final hidden states
    for (size_t i = 0; i < batch.targets.size(); ++i) {
      if (batch.targets[i] < 0) continue;
      const int64_t s = int64_t(rank.dp_rank) * B_local + int64_t(i) / batch.tokens_per_rank;
      const int64_t j = int64_t(batch.window_positions[i]) - first[size_t(s)];
      at.push_back(size_t(s * span + j));
      rows.resize(at.size() * size_t(C));
      copy_cast(Tensor(rows.data() + (at.size() - 1) * size_t(C), DType::f32, Device::cpu(), {1, C}),
                final_hidden.slice(int64_t(i), int64_t(i) + 1));
    }
    std::vector<int32_t> argmax(at.size());  // (rows)
    ruler_host_argmax_rows(rows, lm_head, argmax, threads);
    for (size_t r = 0; r < at.size(); ++r) choice[at[r]] = double(argmax[r] + 1);
    model.dp_cp_comm().all_reduce_sum(choice.data(), int(choice.size()));
    for (int64_t s = 0; s < B; ++s) {
      const int64_t k = slot_case[size_t(s)];
      if (k < 0) continue;
      const RulerCase& c = cases[size_t(k)];
      RulerResult& r = results[size_t(k)];
      std::vector<int32_t> choices;
      for (int64_t j = 0; j < asked[size_t(s)]; ++j) {
        const double v = choice[size_t(s * span + j)];
        RT_CHECK(v >= 1, "ruler: no rank chose the token at position " << first[size_t(s)] + j << " of case " << c.id);
        choices.push_back(int32_t(v - 1));
      }
      // The draft is used once: taken whole (and the choice after it), or left at the first choice that differs.
      const std::vector<int32_t> taken = ruler_accept_greedy(draft[size_t(k)], choices);
      for (int32_t t : taken) {
        if (r.stop.empty()) {
          r.new_ids.push_back(t);
          if (eos >= 0 && t == eos) r.stop = "eos";
          else if (ruler_score_final(c.metric, ruler_answers_found(ruler_tokens_text(r.new_ids, read.token_text),
                                                                   c.answers)))
            r.stop = "answers";
          else if (int64_t(r.new_ids.size()) >= c.max_new_tokens) r.stop = "max_new_tokens";
        }
      }
      if (r.stop.empty()) {  // the next draft: what followed the last tokens earlier in the prompt and answer
        std::vector<int32_t> context = c.prompt;
        context.insert(context.end(), r.new_ids.begin(), r.new_ids.end());
        draft[size_t(k)] = ruler_lookup_draft(
            context, std::min(kLookupDraftMax, c.max_new_tokens - int64_t(r.new_ids.size())));
      }
      if (!r.stop.empty()) {
        r.prediction = ruler_tokens_text(r.new_ids, read.token_text);
        r.found = ruler_answers_found(r.prediction, c.answers);
        r.score = ruler_case_score(c.metric, r.found);
        slot_case[size_t(s)] = -1;
        ++done;
      }
    }
    const auto now = clock::now();
    if (print_progress && (std::chrono::duration<double>(now - last_print).count() >= 5 || done == cases.size())) {
      last_print = now;
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double eta = done > 0 ? elapsed / double(done) * double(cases.size() - done) : NAN;
      const std::string eta_text = std::isnan(eta) ? "?" : std::to_string(int64_t(eta + 0.5)) + " s";
      std::fprintf(stderr, "ruler: %zu/%zu cases, %lld forwards, %.0f s elapsed, ETA %s\n", done, cases.size(),
                   (long long)forwards, elapsed, eta_text.c_str());
      std::fflush(stderr);
    }
  }
  return results;
}

}  // namespace rt

namespace rt {

std::string ruler_table_md_path(const std::string& out) { return out.substr(0, out.size() - 6) + ".md"; }
std::string ruler_table_csv_path(const std::string& out) { return out.substr(0, out.size() - 6) + ".csv"; }

RulerTable write_ruler_results(const RulerCases& read, const std::vector<RulerResult>& results,
                               const std::string& out, const std::string& checkpoint, OutputFiles& outputs) {
  std::string jsonl;
  for (size_t k = 0; k < read.cases.size(); ++k) {
    const RulerCase& c = read.cases[k];
    const RulerResult& r = results[k];
    const nlohmann::json j = {{"id", c.id}, {"task", c.task}, {"length", c.length},
                              {"prompt_tokens", int64_t(c.prompt.size())}, {"max_new_tokens", c.max_new_tokens},
                              {"new_ids", r.new_ids}, {"prediction", r.prediction}, {"answers", c.answers},
                              {"found", r.found}, {"score", r.score}, {"metric", c.metric}, {"stop", r.stop},
                              {"forwards", r.forwards}, {"checkpoint", checkpoint}};
    // A prediction need not be valid UTF-8 (bytes, a token cut inside a character): replaced, not refused.
    jsonl += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  const RulerTable table = ruler_table(read.cases, results);
  outputs.write_text("--out", out, jsonl);
  outputs.write_text("--out", ruler_table_md_path(out), ruler_table_markdown(table));
  outputs.write_text("--out", ruler_table_csv_path(out), ruler_table_csv(table));
  return table;
}

int ruler_task(Model& model, const Config& config, const LoaderRank& rank, const HostTensor& lm_head,
               const EvalTaskArgs& task, const std::string& checkpoint, bool rank0, OutputFiles& outputs) {
  RulerCases read;
  int64_t eos = -1;
  agree_on([&] {
    read = read_ruler_cases(config, task.cases);
    eos = resolved_eot_token(config);
  }, kExitUsage);
  if (rank0) {
    if (!read.note.empty()) std::fprintf(stderr, "warning: %s\n", read.note.c_str());
    const ParallelConfig& g = config.parallel;
    std::fprintf(stderr, "ruler: %zu cases from %s, %d windows per forward on dp=%d cp=%d cp_a2a=%d tp=%d, greedy%s\n",
                 read.cases.size(), task.cases.c_str(), config.train.batch_size, g.dp, g.cp, g.cp_a2a, g.tp,
                 eos >= 0 ? (", stopping at the EOT token " + std::to_string(eos)).c_str() : "");
  }
  const std::vector<RulerResult> results = generate_ruler(model, config, rank, read, lm_head, eos, rank0);
  if (!rank0) return 0;
  const RulerTable table = write_ruler_results(read, results, task.out, checkpoint, outputs);
  outputs.commit();
  std::printf("ruler %s: string-match score (0-100) by task and length\n%s", checkpoint.c_str(),
              ruler_table_markdown(table).c_str());
  std::printf("ruler: wrote %s, %s and %s (heatmap: python3 launch/plot_ruler.py %s --out ruler.png)\n",
              task.out.c_str(), ruler_table_md_path(task.out).c_str(), ruler_table_csv_path(task.out).c_str(),
              task.out.c_str());
  return 0;
}

}  // namespace rt
