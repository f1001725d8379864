// Padded vocabularies (model::SamplingParams::vocab_limit): a model with more embedding rows than its
// tokenizer has ids never samples those rows (greedy, temperature, top-k, top-p), and GRPO scores the
// rollouts under the same masked distribution the sampler drew from. Before the rule, a sampled id past
// the tokenizer ended the run ("SentencePiece decode: id 360 out of range").
#include "tests/torch_catch.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "model/chat_template.h"
#include "model/generate.h"
#include "model/sampling.h"
#include "model/transformer.h"
#include "rl/rollout.h"
#include "rl/sequence_batch.h"
#include "rl_test_util.h"

using namespace pulse;

namespace {

/// (temperature, top_p, top_k) of every sampler path: greedy, plain, top-k, top-p, both.
const std::vector<std::tuple<double, double, int64_t>> kSamplers = {
    {0.0, 1.0, 0}, {1.0, 1.0, 0}, {0.7, 1.0, 8}, {1.0, 0.9, 0}, {1.3, 0.5, 3}};

}  // namespace

TEST_CASE("sample_tokens never draws the rows of a padded vocabulary past the tokenizer",
          "[rl][sampling][vocab]") {
  torch::manual_seed(11);
  const int64_t B = 2048, V = 64, ids = 50;
  // The 14 padded rows get the largest logits: unmasked they would take most draws.
  auto logits = torch::randn({B, V});
  logits.narrow(1, ids, V - ids).add_(6.0);
  std::vector<uint64_t> seeds(B), steps(B, 0);
  for (int64_t b = 0; b < B; ++b) seeds[b] = 1000 + static_cast<uint64_t>(b);
  for (const auto& [T, p, k] : kSamplers) {
    INFO("T " << T << " top_p " << p << " top_k " << k);
    model::SamplingParams sp;
    sp.temperature = T;
    sp.top_p = p;
    sp.top_k = k;
    // Without the limit the padded rows are drawn (what ended runs before).
    CHECK(std::get<0>(model::sample_tokens(logits, sp, seeds, steps)).ge(ids).any().item<bool>());
    sp.vocab_limit = ids;
    const auto [tok, lp] = model::sample_tokens(logits, sp, seeds, steps);
    CHECK(tok.lt(ids).all().item<bool>());
    CHECK(tok.max().item<int64_t>() < ids);
    // The distribution itself: -inf on every padded row, the tokenizer's ids carry all the mass, and the
    // reported log-prob is that distribution's.
    const auto logp = model::sampling_log_probs(logits, sp);
    CHECK(logp.narrow(1, ids, V - ids).isneginf().all().item<bool>());
    CHECK(logp.logsumexp(-1).abs().max().item<double>() < 1e-5);
    CHECK(torch::allclose(lp, logp.gather(1, tok.unsqueeze(1)).squeeze(1)));
    // Greedy picks the best tokenizer id, not the best row.
    if (T == 0) CHECK(torch::equal(tok, logits.narrow(1, 0, ids).argmax(-1)));
  }
  // A limit at or past the rows, or 0, changes nothing.
  model::SamplingParams sp;
  const auto plain = model::sampling_log_probs(logits, sp);
  for (int64_t limit : {V, V + 5}) {
    sp.vocab_limit = limit;
    CHECK(torch::equal(model::sampling_log_probs(logits, sp), plain));
  }
  sp.vocab_limit = -1;
  CHECK_THROWS_AS(model::sampling_log_probs(logits, sp), std::invalid_argument);
}

TEST_CASE(
    "rollouts of a model with more rows than tokenizer ids hold only tokenizer ids, and GRPO's "
    "log-probs match the sampler's",
    "[rl][sampling][vocab]") {
  // Qwen2.5's layout in small: 128 embedding rows for a 99-id tokenizer, an untrained model with sharp
  // logits (LM head x 15), so the 29 padded rows would take ~a quarter of the draws.
  const test::CharTokenizer tok;
  auto cfg = test::tiny_llama(128);
  cfg.tie_word_embeddings = false;
  torch::manual_seed(5);
  model::Transformer m(cfg, torch::kFloat32);
  {
    torch::NoGradGuard no_grad;
    m->lm_head->weight.mul_(15.0);
  }
  std::vector<rl::Problem> problems(3);
  for (size_t i = 0; i < problems.size(); ++i) {
    problems[i].question = "What is " + std::to_string(i) + " + 1?";
    problems[i].answer = std::to_string(i + 1);
  }
  const model::PromptTemplate tmpl;
  for (const auto& [T, p, k] : kSamplers) {
    INFO("T " << T << " top_p " << p << " top_k " << k);
    rl::RolloutConfig rc;
    rc.group_size = T == 0 ? 1 : 8;
    rc.sampling.temperature = T;
    rc.sampling.top_p = p;
    rc.sampling.top_k = k;
    rc.sampling.max_new_tokens = 16;
    rc.grade_threads = 1;
    // collect_rollouts takes the limit from the tokenizer (99) whatever rc.sampling says.
    const auto rollouts = rl::collect_rollouts(*m, tok, tmpl, problems, rc, {0, 1, 2}, 7);
    int64_t tokens = 0;
    for (const auto& r : rollouts)
      for (int32_t id : r.response_ids) {
        CHECK(id < tok.vocab_size());
        ++tokens;
      }
    CHECK(tokens > 20);

    // The trainer's recomputation under the run's rule (vocab_limit = the tokenizer's ids) agrees with the
    // sampler token by token; without the rule it would not (the padded rows' mass is missing there).
    std::vector<const std::vector<int32_t>*> prompts, responses;
    for (const auto& r : rollouts) {
      prompts.push_back(&r.prompt_ids);
      responses.push_back(&r.response_ids);
    }
    const auto batch = rl::make_sequence_batch(prompts, responses, m->device());
    torch::NoGradGuard no_grad;
    model::SamplingParams score = rc.sampling;
    score.vocab_limit = tok.vocab_size();
    const auto lp = rl::response_logprobs(*m, batch, score);
    score.vocab_limit = 0;
    const auto unmasked = rl::response_logprobs(*m, batch, score);
    const int64_t R = batch.targets.size(1);
    double max_diff = 0, max_unmasked_diff = 0;
    for (size_t b = 0; b < rollouts.size(); ++b) {
      const auto& r = rollouts[b];
      const int64_t n = static_cast<int64_t>(r.response_ids.size());
      for (int64_t t = 0; t < n; ++t) {
        const double s = r.sampler_logprobs[static_cast<size_t>(t)];
        max_diff = std::max(max_diff, std::abs(lp[static_cast<int64_t>(b)][R - n + t].item<double>() - s));
        const double u = unmasked[static_cast<int64_t>(b)][R - n + t].item<double>();
        if (std::isfinite(u)) max_unmasked_diff = std::max(max_unmasked_diff, std::abs(u - s));
      }
    }
    CHECK(max_diff < 1e-4);
    CHECK(max_unmasked_diff > 1e-3);
  }
}
