// The tasks of `ringtrain eval` beside the plain held-out loss (framework/eval/trainer_eval.cpp):
//   loss-by-position: the mean held-out loss in log-spaced position buckets ("is the far context used?");
//   needle:           teacher-forced passkey / needle cases (launch/make_needles.py) scored with one forward each;
//   ruler:            RULER-style cases (launch/make_ruler.py) answered by greedy generation, scored by string
//                     match (framework/eval/eval_ruler.h).
// All run on the configured grid (dp, cp ring / all-to-all / hybrid, tp, packed documents): each rank scores the
// tokens it holds, by the positions the loader gives it, and the sums are all-reduced over dp x cp (the tp ranks
// of a group hold the same tokens and losses).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/base/host_tensor.h"
#include "framework/base/output_files.h"
#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/run/train_step.h"

namespace rt {

// What `ringtrain eval --task ...` was asked (framework/main.cpp).
struct EvalTaskArgs {
  std::string task = "loss";     // loss | loss-by-position | needle | ruler
  std::string by = "window";     // loss-by-position: window | document (position in the target's document)
  std::string out;               // loss-by-position, needle: the .jsonl to write (loss-by-position: also .csv)
  std::string cases;             // needle, ruler: the directory launch/make_needles.py / make_ruler.py wrote
  bool overwrite = false;        // --overwrite: replace existing outputs (framework/base/output_files.h)
};
// "" or the refusal of an inconsistent request (a task without --out, --cases without needle, ...), naming the option.
std::string check_eval_task_args(const EvalTaskArgs& args);

// ---- loss by position ----
// A target's position is the position of the token that predicts it (0 = the first token of the window, or of
// its document with by=document). Buckets [0, 1), [1, 2), [2, 4), ..., [2^k, seq_len): log-spaced, the last one
// ending at seq_len.
std::vector<int64_t> position_bucket_edges(int64_t seq_len);  // (buckets + 1) ascending, from 0 to seq_len
struct PositionLosses {
  std::vector<int64_t> edges;          // (buckets + 1)
  std::vector<double> sum, count;      // (buckets) summed losses and targets
  LossTally total;                     // the same targets, as `ringtrain eval` sums them
};
// The plan's windows (as evaluate() reads them), bucketed by_document or by window position. Collective.
PositionLosses loss_by_position(Model& model, DataLoader& eval_loader, const EvalPlan& plan, int64_t seq_len,
                                bool by_document);
// The CSV loss-by-position writes beside its --out: out with .csv for .jsonl.
std::string position_losses_csv_path(const std::string& out);
// Writes `out` (.jsonl, one bucket a line: checkpoint, by, lo, hi, targets, mean_loss) and the same rows as CSV
// beside it to temporaries of `outputs` (renamed together by its commit). Buckets without targets are left out.
void write_position_losses(const PositionLosses& p, const std::string& out, const std::string& checkpoint,
                           const std::string& by, OutputFiles& outputs);

// ---- needles ----
struct NeedleCase {
  int64_t id = 0;
  int64_t length = 0;                 // tokens of the case
  double depth = 0;                   // where the needle sits in the haystack, 0..1
  int64_t answer_begin = 0, answer_end = 0;  // the answer's token positions [begin, end) in the case
  std::string kind;                   // passkey | needle | copy
  std::vector<int32_t> tokens;        // (length)
};
// Reads DIR/meta.json, DIR/cases.jsonl and each case's token file, and refuses (naming the file, the field and
// the fix): another tokenizer than the config's data (meta.json's "tokenizer" against data.source copy / bytes /
// the shards' meta.json tokenizer_sha256), a vocabulary larger than model.vocab_size, a token outside it, a case
// longer than data.seq_len (the limit named), an answer span outside its case.
struct NeedleCases {
  std::vector<NeedleCase> cases;
  std::string note;  // "" or why the tokenizer could not be checked (shards without a meta.json beside them)
};
NeedleCases read_needle_cases(const Config& config, const std::string& dir);
struct NeedleScore {
  int64_t answer_tokens = 0;
  int64_t argmax_hits = 0;   // answer tokens whose argmax prediction is the answer token
  double logprob_sum = 0;    // summed log-probabilities of the answer tokens
};
// Scores every case with one forward on the model's grid (config.train.batch_size cases per forward) and prints
// progress with an ETA on rank 0 every few seconds. lm_head: the full (V, C) head weight (the tied embedding
// when tied) for the answer tokens' argmax. Collective; every rank returns every case's score.
std::vector<NeedleScore> score_needles(Model& model, const Config& config, const LoaderRank& rank,
                                       const std::vector<NeedleCase>& cases, const HostTensor& lm_head,
                                       bool print_progress);
// One line a case: id, kind, length, depth, answer_tokens, argmax_hits, accuracy, exact (all hits),
// mean_logprob, checkpoint. To a temporary of `outputs` (renamed by its commit).
void write_needle_scores(const std::vector<NeedleCase>& cases, const std::vector<NeedleScore>& scores,
                         const std::string& out, const std::string& checkpoint, OutputFiles& outputs);

}  // namespace rt
