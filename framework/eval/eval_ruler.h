// `ringtrain eval --task ruler --cases DIR` (DESIGN.md "Eval tasks", README "RULER-style checks"): the prompts
// launch/make_ruler.py wrote (single needle, multi-key, multi-value, variable tracking, frequent words), answered by
// greedy generation on the configured grid and scored by string match, as RULER scores them.
//
// Generation: each forward runs config.train.batch_size cases as windows of data.seq_len on the model's grid (dp,
// cp ring / all-to-all / hybrid, tp): a case's window is its prompt, the tokens chosen so far and a draft (first the
// case's expected answer; later what followed the last tokens where they occur earlier: ruler_lookup_draft),
// padded. The argmax at the last chosen position and after every draft token is read (each on the rank holding it,
// all-reduced over dp x cp); the draft's tokens are taken while they equal the argmax, then the argmax that differs:
// exactly the tokens greedy decoding picks, the whole answer in one forward when the model answers as expected,
// one token per forward at worst. A case stops at max_new_tokens, at the data's EOT token
// (resolved_eot_token), or once the score cannot change (metric all: every answer found; part: any). Its window
// slot then takes the next case.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/base/host_tensor.h"
#include "framework/base/output_files.h"
#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/eval/eval_tasks.h"
#include "framework/model/model.h"

namespace rt {

struct RulerCase {
  int64_t id = 0;
  std::string task;                  // niah_single | niah_multikey | niah_multivalue | vt | fwe (any name is kept)
  int64_t length = 0;                // the case's budget: prompt + max_new_tokens <= length <= data.seq_len
  std::vector<int32_t> prompt;       // (prompt_tokens)
  std::vector<int32_t> gold;         // (gold_tokens) the expected answer's tokens: the draft, never the result
  int64_t max_new_tokens = 0;
  std::vector<std::string> answers;  // the strings to find in the generated text
  std::string metric = "all";        // all: the share of answers found; part: 1 when any is
};
struct RulerCases {
  std::vector<RulerCase> cases;
  std::vector<std::string> token_text;  // (vocab) each token id's bytes, as text
  std::string note;                     // "" or why the tokenizer could not be checked
};
// Reads DIR/meta.json, DIR/token_text.json, DIR/cases.jsonl and each case's token file, and refuses (naming the
// file, the field and the fix) as read_needle_cases does: another tokenizer than the config's data, a vocabulary
// larger than model.vocab_size, a token outside it, a case longer than data.seq_len (the limit named); also a case
// whose prompt + max_new_tokens exceeds its length, or an unknown metric.
RulerCases read_ruler_cases(const Config& config, const std::string& dir);

// ---- scoring (eval_ruler_score.cpp; no model) ----
// The text of `ids`: their token_text joined (an id outside the table reads as "<id>").
std::string ruler_tokens_text(const std::vector<int32_t>& ids, const std::vector<std::string>& token_text);
// Whether each answer occurs in `prediction`, ignoring ASCII case (RULER lower-cases both).
std::vector<bool> ruler_answers_found(const std::string& prediction, const std::vector<std::string>& answers);
// 0..100: all = 100 x found / answers (RULER's string_match_all), part = 100 when any is found (string_match_part).
double ruler_case_score(const std::string& metric, const std::vector<bool>& found);
// No later token can change the score: every answer found (all), or one (part).
bool ruler_score_final(const std::string& metric, const std::vector<bool>& found);
// Greedy decoding checked against a draft: choices[j] is the argmax after the context plus draft[0, j)
// (draft.size() + 1 of them, or fewer when the draft is cut). Returns the tokens greedy decoding picks from them: the
// draft while it equals the choices, then the first choice that differs (or the choice after a draft taken whole).
std::vector<int32_t> ruler_accept_greedy(const std::vector<int32_t>& draft, const std::vector<int32_t>& choices);
// A draft from the context itself (prompt lookup): the tokens that followed the latest earlier occurrence of the
// context's last n tokens (the longest n <= 4 that occurs before), at most max_len of them; empty when none occurs.
// Models answering from their prompt repeat it, so a wrong answer is also checked many tokens per forward.
std::vector<int32_t> ruler_lookup_draft(const std::vector<int32_t>& context, int64_t max_len);

struct RulerResult {
  std::vector<int32_t> new_ids;  // the generated tokens
  std::string prediction;        // their text
  std::vector<bool> found;       // (answers)
  double score = 0;              // 0..100
  std::string stop;              // answers | max_new_tokens | eos
  int64_t forwards = 0;          // forwards the case took part in
};
// Scores of a task x length table: mean case score per cell, per task (all lengths) and per length (all tasks).
struct RulerTable {
  std::vector<std::string> tasks;  // in the cases' order
  std::vector<int64_t> lengths;    // ascending
  std::vector<double> score;       // (tasks, lengths) mean 0..100, NaN where no case
  std::vector<int64_t> cases;      // (tasks, lengths)
  std::vector<double> task_mean, length_mean;
  double mean = 0;
};
RulerTable ruler_table(const std::vector<RulerCase>& cases, const std::vector<RulerResult>& results);
std::string ruler_table_markdown(const RulerTable& t);  // | task | 1K | 2K | ... | all |, one row per task + mean
std::string ruler_table_csv(const RulerTable& t);       // task,length,cases,score (length "all" for the means)

// ---- generation (eval_ruler.cpp) ----
// The id of the largest logit of one final hidden row (C) against the host's LM head (V, C): the lowest on ties.
int32_t ruler_host_argmax(const float* hidden, const HostTensor& lm_head);
// ruler_host_argmax of every row of rows (n, C) into out (n), on up to `threads` host threads (split only where
// each thread gets at least 2^26 multiply-adds).
void ruler_host_argmax_rows(const std::vector<float>& rows, const HostTensor& lm_head, std::vector<int32_t>& out,
                            int threads);
// Greedy answers to every case on the model's grid (see above). lm_head: the full (V, C) head weight (the tied
// embedding when tied). eos: the token that ends a case (-1: none). Prints progress with an ETA to stderr on rank 0
// every few seconds when print_progress. Collective; every rank returns every result.
std::vector<RulerResult> generate_ruler(Model& model, const Config& config, const LoaderRank& rank,
                                        const RulerCases& cases, const HostTensor& lm_head, int64_t eos,
                                        bool print_progress);
// The table's files beside --out: out with .md and with .csv for .jsonl.
std::string ruler_table_md_path(const std::string& out);
std::string ruler_table_csv_path(const std::string& out);
// `out` (.jsonl: one case a line: id, task, length, prompt_tokens, max_new_tokens, new_ids, prediction, answers,
// found, score, metric, stop, forwards, checkpoint) and the table's .md and .csv, to temporaries of `outputs`
// (renamed together by its commit). Returns the table.
RulerTable write_ruler_results(const RulerCases& cases, const std::vector<RulerResult>& results,
                               const std::string& out, const std::string& checkpoint, OutputFiles& outputs);
// The whole task on a loaded model: read (refusals agreed on by every rank, exit 2), generate, write on rank 0 and
// commit `outputs`, print the table to stdout. Returns the exit code.
int ruler_task(Model& model, const Config& config, const LoaderRank& rank, const HostTensor& lm_head,
               const EvalTaskArgs& task, const std::string& checkpoint, bool rank0, OutputFiles& outputs);

}  // namespace rt
