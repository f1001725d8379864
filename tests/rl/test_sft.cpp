// SFT warm start, rollout collection and evaluation on synthetic arithmetic with a tiny model.
#include "tests/torch_catch.h"

#include "datasets/synthetic.h"
#include "model/chat_template.h"
#include "model/transformer.h"
#include "rl/eval.h"
#include "rl/grader.h"
#include "rl/optimizer.h"
#include "rl/rollout.h"
#include "rl/sft.h"
#include "rl_test_util.h"

using namespace pulse;

TEST_CASE("sft_target formats the reference so the grader accepts it", "[sft]") {
  rl::Problem p;
  p.answer = "7";
  CHECK(rl::sft_target(p) == "\\boxed{7}");
  p.solution = "3+4=7. \\boxed{7}";
  CHECK(rl::sft_target(p) == "3+4=7. \\boxed{7}");
  p.solution = "Natalia sold 48/2 = 24 clips.";  // GSM8K-style: no boxed answer in the text
  CHECK(rl::sft_target(p) == "Natalia sold 48/2 = 24 clips. The answer is \\boxed{7}.");
  CHECK(rl::grade(p, rl::sft_target(p)).score == 1.0);
  rl::Problem c;
  c.kind = rl::TaskKind::Code;
  c.solution = "def f(x):\n    return x";
  CHECK(rl::sft_target(c) == "```python\ndef f(x):\n    return x\n```");
  c.demonstration = "def f(x):\n    return -x";  // a weak teacher's program is what SFT imitates
  CHECK(rl::sft_target(c) == "```python\ndef f(x):\n    return -x\n```");
}

TEST_CASE("SFT makes a from-scratch tiny model earn reward, rollouts and eval are reproducible",
          "[sft][eval]") {
  const auto problems = datasets::synthetic_math(600, 3, 1);  // level 1: a+b
  const auto tok = std::make_unique<test::CharTokenizer>();
  const auto tmpl = model::PromptTemplate::preset("plain");
  torch::manual_seed(42);
  model::Transformer m(test::tiny_llama(tok->vocab_size()), torch::kFloat32);
  rl::OptimizerConfig oc;
  oc.lr = 3e-3;
  rl::MasterAdam opt(*m, oc);
  rl::SftConfig sc;
  sc.steps = 150;
  sc.batch_size = 16;
  sc.max_len = 64;
  int64_t calls = 0;
  const auto st = rl::sft_train(*m, opt, *tok, tmpl, problems, sc, [&](int64_t, double) { ++calls; });
  INFO("SFT loss " << st.first_loss << " -> " << st.last_loss);
  CHECK(calls == 150);
  CHECK(st.steps == 150);
  CHECK(st.last_loss < 0.5 * st.first_loss);

  const std::vector<rl::Problem> held(problems.begin() + 500, problems.end());
  rl::EvalConfig ec;
  ec.sampling.max_new_tokens = 24;
  ec.batch_size = 50;
  const auto rep = rl::evaluate(*m, *tok, tmpl, held, ec);
  INFO(rep.table());
  CHECK(rep.problems == 100);
  CHECK(rep.pass_at_1 > 0.0);
  REQUIRE(rep.by_level.count("Level 1") == 1);
  CHECK(rep.by_level.at("Level 1").second == 100);
  CHECK(rep.by_level.at("Level 1").first == Approx(rep.pass_at_1 * 100));
  CHECK(rep.by_subject.at("synthetic").second == 100);

  // Sampled pass@k >= pass@1 on the same samples.
  ec.greedy = false;
  ec.n_samples = 4;
  ec.k = 2;
  const auto rep4 =
      rl::evaluate(*m, *tok, tmpl, std::vector<rl::Problem>(held.begin(), held.begin() + 20), ec);
  CHECK(rep4.by_level.at("Level 1").second == 80);
  CHECK(rep4.pass_at_k >= rep4.pass_at_1);

  // Rollouts: G per problem, grouped, reproducible from the seeds, graded, EOS-terminated unless truncated.
  rl::RolloutConfig rc;
  rc.group_size = 4;
  rc.sampling.max_new_tokens = 24;
  rc.seed = 9;
  rc.policy_version = 3;
  const std::vector<int64_t> idx = {0, 5, 7};
  const auto a = rl::collect_rollouts(*m, *tok, tmpl, problems, rc, idx, 11);
  const auto b = rl::collect_rollouts(*m, *tok, tmpl, problems, rc, {7}, 11);
  REQUIRE(a.size() == 12);
  double reward_sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].group == static_cast<int64_t>(i / 4));
    CHECK(a[i].problem_index == idx[i / 4]);
    CHECK(a[i].policy_version == 3);
    CHECK(a[i].sampler_logprobs.size() == a[i].response_ids.size());
    CHECK(a[i].truncated == (a[i].response_ids.back() != tok->eos_id()));
    const auto g = rl::grade(problems[a[i].problem_index], tok->decode(a[i].response_ids, true));
    CHECK(a[i].reward == g.score);
    reward_sum += a[i].reward;
  }
  CHECK(reward_sum > 0);
  for (size_t g = 0; g < 4; ++g) CHECK(b[g].response_ids == a[8 + g].response_ids);  // batch-independent
}
