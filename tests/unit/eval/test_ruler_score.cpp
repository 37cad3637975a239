// The scoring half of `ringtrain eval --task ruler` (framework/eval/eval_ruler.h) on hand-worked cases: token
// text, RULER's string_match_all / string_match_part, the greedy draft check, the task x length table.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "framework/eval/eval_ruler.h"

namespace rt {
namespace {

std::vector<std::string> byte_table() {
  std::vector<std::string> t;
  for (int i = 0; i < 256; ++i) t.push_back(std::string(1, char(i)));
  return t;
}

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(int32_t(c));
  return ids;
}

TEST(RulerScore, TokenTextJoinsEachTokensText) {
  EXPECT_EQ(ruler_tokens_text(bytes_of(" 1234567."), byte_table()), " 1234567.");
  const std::vector<std::string> copy = {"[0]", "[1]", "[2]"};
  EXPECT_EQ(ruler_tokens_text({2, 0, 1}, copy), "[2][0][1]");
  EXPECT_EQ(ruler_tokens_text({1, 7}, copy), "[1]<7>");  // an id outside the table is named, not dropped
}

TEST(RulerScore, StringMatchAllIsTheShareOfAnswersFoundIgnoringCase) {
  // RULER: sum(ref.lower() in pred.lower() for ref in refs) / len(refs) * 100.
  const std::string pred = " The special magic numbers are 1234567, 7654321 and QRYAQ.";
  const std::vector<std::string> refs = {"1234567", "qryaq", "7654321", "2222222"};
  const std::vector<bool> found = ruler_answers_found(pred, refs);
  EXPECT_EQ(found, (std::vector<bool>{true, true, true, false}));
  EXPECT_DOUBLE_EQ(ruler_case_score("all", found), 75.0);
  EXPECT_FALSE(ruler_score_final("all", found));
  EXPECT_DOUBLE_EQ(ruler_case_score("all", ruler_answers_found("nothing here", refs)), 0.0);
  EXPECT_DOUBLE_EQ(ruler_case_score("all", ruler_answers_found("1234567 7654321 2222222 QryAq", refs)), 100.0);
  EXPECT_TRUE(ruler_score_final("all", ruler_answers_found("1234567 7654321 2222222 QryAq", refs)));
  // A number inside a longer one still matches (RULER matches substrings, nothing more).
  EXPECT_DOUBLE_EQ(ruler_case_score("all", ruler_answers_found("91234567", {"1234567"})), 100.0);
}

TEST(RulerScore, StringMatchPartIsFullWhenAnyAnswerIsFound) {
  const std::vector<std::string> refs = {"Paris", "the capital of France"};
  EXPECT_DOUBLE_EQ(ruler_case_score("part", ruler_answers_found("it is paris.", refs)), 100.0);
  EXPECT_TRUE(ruler_score_final("part", ruler_answers_found("it is paris.", refs)));
  EXPECT_DOUBLE_EQ(ruler_case_score("part", ruler_answers_found("it is lyon.", refs)), 0.0);
  EXPECT_FALSE(ruler_score_final("part", ruler_answers_found("it is lyon.", refs)));
}

TEST(RulerScore, AcceptGreedyTakesTheDraftWhileItEqualsTheChoices) {
  EXPECT_EQ(ruler_accept_greedy({1, 2, 3}, {1, 2, 3, 4}), (std::vector<int32_t>{1, 2, 3, 4}));  // whole + next
  EXPECT_EQ(ruler_accept_greedy({1, 2, 3}, {1, 5, 3, 4}), (std::vector<int32_t>{1, 5}));        // left at 2nd
  EXPECT_EQ(ruler_accept_greedy({1, 2, 3}, {7, 2, 3, 4}), (std::vector<int32_t>{7}));
  EXPECT_EQ(ruler_accept_greedy({}, {9}), (std::vector<int32_t>{9}));  // no draft: one greedy token
}

TEST(RulerScore, LookupDraftIsWhatFollowedTheLatestEarlierOccurrence) {
  // Context ... 5 6 7 | 9 ... 5 6 7 | 8 ... 5 6 7: the latest earlier "5 6 7" is followed by 8, 1, 5.
  const std::vector<int32_t> ctx = {5, 6, 7, 9, 2, 5, 6, 7, 8, 1, 5, 6, 7};
  EXPECT_EQ(ruler_lookup_draft(ctx, 3), (std::vector<int32_t>{8, 1, 5}));
  EXPECT_EQ(ruler_lookup_draft(ctx, 100), (std::vector<int32_t>{8, 1, 5, 6, 7}));  // up to the context's end
  EXPECT_EQ(ruler_lookup_draft(ctx, 0), (std::vector<int32_t>{}));
  // Only the last token occurs earlier: what followed it.
  EXPECT_EQ(ruler_lookup_draft({4, 3, 1, 2, 9, 3}, 2), (std::vector<int32_t>{1, 2}));
  // The longest suffix wins over a later shorter match: "2 3" occurs at 0, "3" alone later at 4.
  EXPECT_EQ(ruler_lookup_draft({2, 3, 7, 0, 3, 1, 2, 3}, 1), (std::vector<int32_t>{7}));
  EXPECT_EQ(ruler_lookup_draft({1, 2, 3}, 4), (std::vector<int32_t>{}));  // 3 never occurred before
  EXPECT_EQ(ruler_lookup_draft({}, 4), (std::vector<int32_t>{}));
  EXPECT_EQ(ruler_lookup_draft({6, 6, 6}, 4), (std::vector<int32_t>{6}));  // "6 6" at 0 is followed by 6
}

// The draft check gives exactly greedy decoding: a deterministic "model" (next token = a hash of the context)
// decoded token by token, against the same model decoded with drafts that are right for a while, then wrong.
TEST(RulerScore, DraftCheckedDecodingEqualsPlainGreedy) {
  auto next_token = [](const std::vector<int32_t>& context) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : context) h = (h ^ uint64_t(t)) * 1099511628211ull;
    return int32_t(h % 7 == 0 ? 3 : (h >> 7) % 11);
  };
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<int32_t> prompt = {int32_t(rng() % 11), int32_t(rng() % 11)};
    const size_t max_new = 1 + rng() % 12;
    std::vector<int32_t> greedy, context = prompt;
    while (greedy.size() < max_new) {
      greedy.push_back(next_token(context));
      context.push_back(greedy.back());
    }
    // The draft: greedy's first `right` tokens, then random ones.
    const size_t right = rng() % (max_new + 1);
    std::vector<int32_t> draft(greedy.begin(), greedy.begin() + int64_t(right));
    while (draft.size() < max_new) draft.push_back(int32_t(rng() % 11));
    std::vector<int32_t> got;
    int forwards = 0;
    while (got.size() < max_new) {
      std::vector<int32_t> choices, ctx = prompt;  // the argmax at the last chosen position and after each draft
      ctx.insert(ctx.end(), got.begin(), got.end());
      for (size_t j = 0; j <= draft.size(); ++j) {
        choices.push_back(next_token(ctx));
        if (j < draft.size()) ctx.push_back(draft[j]);
      }
      for (int32_t t : ruler_accept_greedy(draft, choices))
        if (got.size() < max_new) got.push_back(t);
      draft.clear();
      ++forwards;
    }
    ASSERT_EQ(got, greedy) << "trial " << trial;
    // With prompt-lookup drafts after the first (as generate_ruler drafts), still greedy.
    std::vector<int32_t> looked, d = std::vector<int32_t>(greedy.begin(), greedy.begin() + int64_t(right));
    while (looked.size() < max_new) {
      std::vector<int32_t> choices, ctx = prompt;
      ctx.insert(ctx.end(), looked.begin(), looked.end());
      for (size_t j = 0; j <= d.size(); ++j) {
        choices.push_back(next_token(ctx));
        if (j < d.size()) ctx.push_back(d[j]);
      }
      for (int32_t t : ruler_accept_greedy(d, choices))
        if (looked.size() < max_new) looked.push_back(t);
      std::vector<int32_t> now = prompt;
      now.insert(now.end(), looked.begin(), looked.end());
      d = ruler_lookup_draft(now, int64_t(max_new - std::min(max_new, looked.size())));
    }
    ASSERT_EQ(looked, greedy) << "trial " << trial << " (lookup drafts)";
    if (right == max_new) {
      EXPECT_EQ(forwards, 1) << "a right draft is taken in one forward";
    }
  }
}

// The argmax of rows against the LM head, threaded or not, equals the argmax of each row's logits worked out here;
// ties go to the lowest id.
TEST(RulerScore, HostArgmaxRowsMatchesEachRowsLogits) {
  const int64_t V = 3000, C = 64, n = 700;  // 700 x 3000 x 64 multiply-adds: 2 threads' worth
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  HostTensor head{"lm_head.weight", {V, C}, std::vector<float>(size_t(V * C))};
  for (float& w : head.values) w = normal(rng);
  std::vector<float> rows(size_t(n * C));  // (n, C)
  for (float& x : rows) x = normal(rng);
  std::vector<int32_t> expected(static_cast<size_t>(n));  // (n)
  for (int64_t r = 0; r < n; ++r) {
    double best = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      double logit = 0;
      for (int64_t c = 0; c < C; ++c) logit += double(rows[size_t(r * C + c)]) * double(head.values[size_t(v * C + c)]);
      if (logit > best) best = logit, expected[size_t(r)] = int32_t(v);
    }
  }
  for (int threads : {1, 2, 4}) {
    std::vector<int32_t> got(size_t(n), -1);
    ruler_host_argmax_rows(rows, head, got, threads);
    EXPECT_EQ(got, expected) << threads << " threads";
  }
  // A tie: rows of zeros give every id the logit 0, and the lowest id wins.
  std::vector<int32_t> zero(1, -1);
  ruler_host_argmax_rows(std::vector<float>(size_t(C), 0.f), head, zero, 2);
  EXPECT_EQ(zero[0], 0);
}

TEST(RulerScore, TableMeansEachTaskAndLength) {
  std::vector<RulerCase> cases;
  std::vector<RulerResult> results;
  auto add = [&](const std::string& task, int64_t length, double score) {
    RulerCase c;
    c.task = task, c.length = length;
    cases.push_back(c);
    RulerResult r;
    r.score = score;
    results.push_back(r);
  };
  add("vt", 2048, 100), add("vt", 1024, 50), add("vt", 1024, 0), add("fwe", 2048, 40);
  const RulerTable t = ruler_table(cases, results);
  ASSERT_EQ(t.tasks, (std::vector<std::string>{"vt", "fwe"}));
  ASSERT_EQ(t.lengths, (std::vector<int64_t>{1024, 2048}));
  EXPECT_DOUBLE_EQ(t.score[0], 25.0);   // vt at 1K: (50 + 0) / 2
  EXPECT_DOUBLE_EQ(t.score[1], 100.0);  // vt at 2K
  EXPECT_TRUE(std::isnan(t.score[2]));  // fwe at 1K: no case
  EXPECT_DOUBLE_EQ(t.score[3], 40.0);
  EXPECT_EQ(t.cases, (std::vector<int64_t>{2, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(t.task_mean[0], 50.0);    // (100 + 50 + 0) / 3
  EXPECT_DOUBLE_EQ(t.length_mean[1], 70.0);  // (100 + 40) / 2
  EXPECT_DOUBLE_EQ(t.mean, 47.5);
  EXPECT_EQ(ruler_table_markdown(t),
            "| task | 1K | 2K | all |\n|---|---:|---:|---:|\n| vt | 25.0 | 100.0 | 50.0 |\n"
            "| fwe | - | 40.0 | 40.0 |\n| mean | 25.0 | 70.0 | 47.5 |\n");
  EXPECT_EQ(ruler_table_csv(t), "task,length,cases,score\nvt,1024,2,25.0\nvt,2048,1,100.0\nvt,all,3,50.0\n"
                                "fwe,2048,1,40.0\nfwe,all,1,40.0\n");
}

}  // namespace
}  // namespace rt
