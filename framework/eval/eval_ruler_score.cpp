// The scoring half of `ringtrain eval --task ruler` (framework/eval/eval_ruler.h): text of tokens, string match,
// the greedy draft check, and the task x length table. No model.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "framework/eval/eval_ruler.h"

namespace rt {
namespace {

std::string lower_ascii(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

std::string length_label(int64_t n) {
  std::ostringstream s;
  if (n >= (1 << 20) && n % (1 << 20) == 0) s << n / (1 << 20) << "M";
  else if (n >= (1 << 10) && n % (1 << 10) == 0) s << n / (1 << 10) << "K";
  else s << n;
  return s.str();
}

std::string score_text(double s) {
  if (std::isnan(s)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

}  // namespace

std::string ruler_tokens_text(const std::vector<int32_t>& ids, const std::vector<std::string>& token_text) {
  std::string out;
  for (int32_t id : ids)
    if (id >= 0 && size_t(id) < token_text.size()) {
      out += token_text[size_t(id)];
    } else {
      out += '<';
      out += std::to_string(id);
      out += '>';
    }
  return out;
}

std::vector<bool> ruler_answers_found(const std::string& prediction, const std::vector<std::string>& answers) {
  const std::string pred = lower_ascii(prediction);
  std::vector<bool> found;
  for (const std::string& a : answers) found.push_back(pred.find(lower_ascii(a)) != std::string::npos);
  return found;
}

double ruler_case_score(const std::string& metric, const std::vector<bool>& found) {
  if (found.empty()) return 0;
  const auto hits = std::count(found.begin(), found.end(), true);
  if (metric == "part") return hits > 0 ? 100.0 : 0.0;
  return 100.0 * double(hits) / double(found.size());
}

bool ruler_score_final(const std::string& metric, const std::vector<bool>& found) {
  if (found.empty()) return false;
  const auto hits = std::count(found.begin(), found.end(), true);
  return metric == "part" ? hits > 0 : size_t(hits) == found.size();
}

std::vector<int32_t> ruler_accept_greedy(const std::vector<int32_t>& draft, const std::vector<int32_t>& choices) {
  std::vector<int32_t> taken;
  for (size_t j = 0; j < choices.size(); ++j) {
    taken.push_back(choices[j]);
    if (j >= draft.size() || choices[j] != draft[j]) break;  // greedy left the draft (or the draft ended)
  }
  return taken;
}

std::vector<int32_t> ruler_lookup_draft(const std::vector<int32_t>& context, int64_t max_len) {
  const int64_t L = int64_t(context.size());
  for (int64_t n = std::min<int64_t>(4, L - 1); n >= 1 && max_len > 0; --n) {
    // The latest start s < L - n with context[s, s + n) == the last n tokens.
    for (int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(context.begin() + s, context.begin() + s + n, context.end() - n)) continue;
      const int64_t from = s + n, to = std::min(L, from + max_len);
      return std::vector<int32_t>(context.begin() + from, context.begin() + to);
    }
  }
  return {};
}

RulerTable ruler_table(const std::vector<RulerCase>& cases, const std::vector<RulerResult>& results) {
  RulerTable t;
  for (const RulerCase& c : cases) {
    if (std::find(t.tasks.begin(), t.tasks.end(), c.task) == t.tasks.end()) t.tasks.push_back(c.task);
    if (std::find(t.lengths.begin(), t.lengths.end(), c.length) == t.lengths.end()) t.lengths.push_back(c.length);
  }
  std::sort(t.lengths.begin(), t.lengths.end());
  const size_t nt = t.tasks.size(), nl = t.lengths.size();
  std::vector<double> sum(nt * nl, 0.0);
  t.cases.assign(nt * nl, 0);
  std::vector<double> task_sum(nt, 0.0), length_sum(nl, 0.0), task_n(nt, 0.0), length_n(nl, 0.0);
  double all = 0;
  for (size_t k = 0; k < cases.size() && k < results.size(); ++k) {
    const size_t i = size_t(std::find(t.tasks.begin(), t.tasks.end(), cases[k].task) - t.tasks.begin());
    const size_t j = size_t(std::find(t.lengths.begin(), t.lengths.end(), cases[k].length) - t.lengths.begin());
    const double s = results[k].score;
    sum[i * nl + j] += s, ++t.cases[i * nl + j];
    task_sum[i] += s, task_n[i] += 1, length_sum[j] += s, length_n[j] += 1, all += s;
  }
  t.score.assign(nt * nl, NAN);
  for (size_t c = 0; c < nt * nl; ++c)
    if (t.cases[c] > 0) t.score[c] = sum[c] / double(t.cases[c]);
  for (size_t i = 0; i < nt; ++i) t.task_mean.push_back(task_n[i] > 0 ? task_sum[i] / task_n[i] : NAN);
  for (size_t j = 0; j < nl; ++j) t.length_mean.push_back(length_n[j] > 0 ? length_sum[j] / length_n[j] : NAN);
  const double n = std::min(cases.size(), results.size());
  t.mean = n > 0 ? all / n : NAN;
  return t;
}

std::string ruler_table_markdown(const RulerTable& t) {
  std::ostringstream s;
  s << "| task |";
  for (int64_t n : t.lengths) s << " " << length_label(n) << " |";
  s << " all |\n|---|";
  for (size_t j = 0; j <= t.lengths.size(); ++j) s << "---:|";
  s << "\n";
  const size_t nl = t.lengths.size();
  for (size_t i = 0; i < t.tasks.size(); ++i) {
    s << "| " << t.tasks[i] << " |";
    for (size_t j = 0; j < nl; ++j) s << " " << score_text(t.score[i * nl + j]) << " |";
    s << " " << score_text(t.task_mean[i]) << " |\n";
  }
  s << "| mean |";
  for (size_t j = 0; j < nl; ++j) s << " " << score_text(t.length_mean[j]) << " |";
  s << " " << score_text(t.mean) << " |\n";
  return s.str();
}

std::string ruler_table_csv(const RulerTable& t) {
  std::ostringstream s;
  s << "task,length,cases,score\n";
  const size_t nl = t.lengths.size();
  for (size_t i = 0; i < t.tasks.size(); ++i) {
    int64_t n = 0;
    for (size_t j = 0; j < nl; ++j) {
      n += t.cases[i * nl + j];
      if (t.cases[i * nl + j] > 0)
        s << t.tasks[i] << "," << t.lengths[j] << "," << t.cases[i * nl + j] << "," << score_text(t.score[i * nl + j])
          << "\n";
    }
    s << t.tasks[i] << ",all," << n << "," << score_text(t.task_mean[i]) << "\n";
  }
  return s.str();
}

}  // namespace rt
