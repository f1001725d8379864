// Supervised warm start (rl/sft.h).
#include "rl/sft.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "rl/optimizer.h"
#include "rl/rollout.h"
#include "rl/sequence_batch.h"
#include "rl/setting_rules.h"

namespace pulse::rl {

void SftConfig::validate() const {
  using namespace rules;
  int_in("sft.steps", steps, 0, kMaxInt);
  int_in("sft.batch_size", batch_size, 1, 1 << 20);
  int_in("sft.micro_batch", micro_batch, 0, 1 << 20);
  int_in("sft.max_len", max_len, 8, 1 << 20);
}

OptimizerConfig sft_optimizer_defaults() {
  OptimizerConfig c;
  c.lr = 2e-3;
  c.schedule = LrSchedule::Cosine;
  c.warmup_steps = 20;
  c.grad_clip = 1.0;
  c.min_lr_ratio = 0.1;
  return c;
}

std::string sft_target(const Problem& p) {
  if (p.kind == TaskKind::Code)
    return "```python\n" + (p.demonstration.empty() ? p.solution : p.demonstration) + "\n```";
  if (p.solution.empty()) return "\\boxed{" + p.answer + "}";
  if (p.solution.find("\\boxed") == std::string::npos && !p.answer.empty()) {
    return p.solution + " The answer is \\boxed{" + p.answer + "}.";
  }
  return p.solution;
}

namespace {
struct Example {
  std::vector<int32_t> prompt, response;
};

Example make_example(const model::Tokenizer& tok, const model::PromptTemplate& tmpl, const Problem& p,
                     int64_t max_len) {
  Example ex;
  ex.prompt = encode_prompt(tok, tmpl, p.question);
  ex.response = tok.encode(sft_target(p), /*add_bos=*/false, /*parse_special=*/false);
  if (tok.eos_id() >= 0) ex.response.push_back(tok.eos_id());  // the model must learn to stop
  const size_t cap = static_cast<size_t>(std::max<int64_t>(2, max_len));
  if (ex.prompt.size() + 1 > cap) {  // keep the end of an overlong prompt and one response token
    ex.prompt.erase(ex.prompt.begin(), ex.prompt.end() - static_cast<std::ptrdiff_t>(cap - 1));
  }
  if (ex.prompt.size() + ex.response.size() > cap) ex.response.resize(cap - ex.prompt.size());
  return ex;
}
}  // namespace

SftStats sft_train(model::TransformerImpl& model, MasterAdam& opt, const model::Tokenizer& tok,
                   const model::PromptTemplate& tmpl, const std::vector<Problem>& problems,
                   const SftConfig& cfg, const std::function<void(int64_t step, double loss)>& on_step) {
  if (problems.empty()) throw std::invalid_argument("sft_train: no problems");
  if (cfg.batch_size < 1 || cfg.max_len < 2 || cfg.steps < 0) {
    throw std::invalid_argument("sft_train: need sft.batch_size >= 1, sft.max_len >= 2, sft.steps >= 0");
  }
  const int64_t micro = cfg.micro_batch > 0 ? cfg.micro_batch : cfg.batch_size;
  std::vector<Example> examples;
  examples.reserve(problems.size());
  for (const auto& p : problems) examples.push_back(make_example(tok, tmpl, p, cfg.max_len));

  // Epochs of seeded shuffles.
  std::vector<size_t> order(examples.size());
  size_t cursor = order.size();
  uint64_t epoch = 0;
  auto next_index = [&]() {
    if (cursor == order.size()) {
      std::iota(order.begin(), order.end(), size_t{0});
      std::mt19937_64 rng(cfg.seed * 0x9e3779b97f4a7c15ull + epoch++);
      std::shuffle(order.begin(), order.end(), rng);
      cursor = 0;
    }
    return order[cursor++];
  };

  model.train();
  SftStats stats;
  const at::Device device = model.device();
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    std::vector<size_t> batch;
    double tokens = 0;
    for (int64_t i = 0; i < cfg.batch_size; ++i) {
      batch.push_back(next_index());
      tokens += static_cast<double>(examples[batch.back()].response.size());
    }
    std::sort(batch.begin(), batch.end(), [&](size_t a, size_t b) {
      return examples[a].prompt.size() + examples[a].response.size() <
             examples[b].prompt.size() + examples[b].response.size();
    });
    opt.zero_grad();
    double loss_sum = 0;
    for (size_t s = 0; s < batch.size(); s += static_cast<size_t>(micro)) {
      std::vector<const std::vector<int32_t>*> prompts, responses;
      for (size_t k = s; k < std::min(batch.size(), s + static_cast<size_t>(micro)); ++k) {
        prompts.push_back(&examples[batch[k]].prompt);
        responses.push_back(&examples[batch[k]].response);
      }
      const SequenceBatch sb = make_sequence_batch(prompts, responses, device);
      const at::Tensor lp = response_logprobs(model, sb, model::SamplingParams{});
      // Cross-entropy summed over response tokens, divided by the batch's response tokens.
      const at::Tensor loss =
          -(torch::where(sb.response_mask > 0, lp, torch::zeros({}, lp.options())) * sb.response_mask).sum() /
          tokens;
      loss.backward();
      opt.accumulate_grads();
      loss_sum += loss.item<double>();
    }
    opt.step();
    if (step == 1) stats.first_loss = loss_sum;
    stats.last_loss = loss_sum;
    stats.steps = step;
    if (on_step) on_step(step, loss_sum);
  }
  return stats;
}

}  // namespace pulse::rl
