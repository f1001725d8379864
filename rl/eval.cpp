// Pass@1 / pass@k evaluation (rl/eval.h).
#include "rl/eval.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "rl/grader.h"
#include "rl/rollout.h"
#include "rl/setting_rules.h"

namespace pulse::rl {

void EvalConfig::validate() const {
  using namespace rules;
  int_in("eval.batch_size", batch_size, 1, 1 << 20);
  int_in("eval.max_new_tokens", sampling.max_new_tokens, 1, 1 << 20);
  int_in("eval.n_samples", n_samples, 1, 1 << 20);
  if (k < 1 || k > n_samples)
    fail("eval.k",
         "must be in 1..eval.n_samples (" + std::to_string(n_samples) + ") (got " + std::to_string(k) + ")");
  real_in("eval.temperature", sampling.temperature, 0.0, 100.0, Ends::OpenLow);
  real_in("eval.top_p", sampling.top_p, 0.0, 1.0, Ends::OpenLow);
}

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n < 1 || c < 0 || c > n || k < 1 || k > n) {
    throw std::invalid_argument("pass_at_k: need 0 <= c <= n and 1 <= k <= n (n=" + std::to_string(n) +
                                ", c=" + std::to_string(c) + ", k=" + std::to_string(k) + ")");
  }
  if (n - c < k) return 1.0;  // every k-subset holds a correct sample
  // C(n-c,k)/C(n,k) = prod_{i=n-c+1}^{n} (1 - k/i): no large binomials.
  double prod = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) prod *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - prod;
}

nlohmann::json EvalReport::to_json() const {
  auto table_json = [](const std::map<std::string, std::pair<int64_t, int64_t>>& m) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [name, ct] : m) j[name] = {{"correct", ct.first}, {"total", ct.second}};
    return j;
  };
  return {{"pass_at_1", pass_at_1},
          {"pass_at_k", pass_at_k},
          {"k", k},
          {"n", n_samples},
          {"problems", problems},
          {"infrastructure_errors", infrastructure_errors},
          {"by_subject", table_json(by_subject)},
          {"by_level", table_json(by_level)}};
}

std::string EvalReport::table() const {
  std::ostringstream out;
  char line[256];
  auto section = [&](const char* title, const std::map<std::string, std::pair<int64_t, int64_t>>& m) {
    std::snprintf(line, sizeof line, "%-28s %8s %8s %8s\n", title, "correct", "total", "acc");
    out << line;
    for (const auto& [name, ct] : m) {
      const double acc = ct.second > 0 ? static_cast<double>(ct.first) / static_cast<double>(ct.second) : 0.0;
      std::snprintf(line, sizeof line, "%-28s %8lld %8lld %8.4f\n", name.c_str(),
                    static_cast<long long>(ct.first), static_cast<long long>(ct.second), acc);
      out << line;
    }
  };
  std::snprintf(line, sizeof line, "problems %lld, n=%lld: pass@1 %.4f", static_cast<long long>(problems),
                static_cast<long long>(n_samples), pass_at_1);
  out << line;
  if (k != 1) {  // pass@1 is already there
    std::snprintf(line, sizeof line, ", pass@%lld %.4f", static_cast<long long>(k), pass_at_k);
    out << line;
  }
  out << "\n";
  section("subject", by_subject);
  section("level", by_level);
  return out.str();
}

EvalReport evaluate(model::TransformerImpl& model, const model::Tokenizer& tok,
                    const model::PromptTemplate& tmpl, const std::vector<Problem>& problems,
                    const EvalConfig& cfg) {
  const int64_t n = cfg.greedy ? 1 : cfg.n_samples;
  const int64_t k = cfg.greedy ? 1 : cfg.k;
  if (n < 1 || k < 1 || k > n) throw std::invalid_argument("eval: need 1 <= eval.k <= eval.n_samples");
  if (cfg.batch_size < 1) throw std::invalid_argument("eval: eval.batch_size must be >= 1");
  model::SamplingParams sampling = cfg.sampling;
  sampling.vocab_limit = tok.vocab_size();  // a padded vocabulary's extra rows are never sampled
  if (cfg.greedy) sampling.temperature = 0.0;
  if (tok.eos_id() >= 0 && std::find(sampling.stop_token_ids.begin(), sampling.stop_token_ids.end(),
                                     tok.eos_id()) == sampling.stop_token_ids.end()) {
    sampling.stop_token_ids.push_back(tok.eos_id());
  }

  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(problems.size());
  for (const auto& p : problems) prompts.push_back(encode_prompt(tok, tmpl, p.question));
  const int64_t total = static_cast<int64_t>(problems.size()) * n;
  std::vector<std::string> texts(static_cast<size_t>(total));
  std::vector<const Problem*> graded(static_cast<size_t>(total));
  for (int64_t start = 0; start < total; start += cfg.batch_size) {
    std::vector<model::GenerationRequest> reqs;
    for (int64_t r = start; r < std::min(total, start + cfg.batch_size); ++r) {
      const int64_t p = r / n, s = r % n;
      reqs.push_back({prompts[static_cast<size_t>(p)], rollout_seed(cfg.seed, 0, p, s)});
      graded[static_cast<size_t>(r)] = &problems[static_cast<size_t>(p)];
    }
    auto res = model::generate(model, reqs, sampling, &tok);
    for (size_t i = 0; i < res.size(); ++i) {
      texts[static_cast<size_t>(start) + i] = tok.decode(res[i].token_ids, /*skip_special=*/true);
    }
  }
  const std::vector<RewardResult> rewards = grade_batch(graded, texts, cfg.grade_threads);

  EvalReport rep;
  rep.problems = static_cast<int64_t>(problems.size());
  rep.n_samples = n;
  rep.k = k;
  double sum1 = 0, sumk = 0;
  for (size_t p = 0; p < problems.size(); ++p) {
    int64_t c = 0;
    for (int64_t s = 0; s < n; ++s) {
      const RewardResult& r = rewards[p * static_cast<size_t>(n) + static_cast<size_t>(s)];
      rep.infrastructure_errors += r.infrastructure_error ? 1 : 0;
      c += (!r.infrastructure_error && r.score > 0.5) ? 1 : 0;
    }
    sum1 += static_cast<double>(c) / static_cast<double>(n);
    sumk += pass_at_k(n, c, k);
    const std::string subject = problems[p].subject.empty() ? "(none)" : problems[p].subject;
    const std::string level = problems[p].level > 0 ? "Level " + std::to_string(problems[p].level) : "?";
    for (auto* m : {&rep.by_subject[subject], &rep.by_level[level]}) {
      m->first += c;
      m->second += n;
    }
  }
  if (!problems.empty()) {
    rep.pass_at_1 = sum1 / static_cast<double>(problems.size());
    rep.pass_at_k = sumk / static_cast<double>(problems.size());
  }
  return rep;
}

}  // namespace pulse::rl
