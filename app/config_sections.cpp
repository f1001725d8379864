// The one range rule of each key of the app's own sections (app/config.h); the algorithm structs'
// rules are theirs (rl/grpo_config.cpp, rl/optimizer_config.cpp, rl/outer_config.cpp, rl/sft.cpp,
// rl/eval.cpp, sync/patch_options.cpp). Every message starts with the TOML key (rl/setting_rules.h).
#include <algorithm>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/device.h"
#include "model/chat_template.h"
#include "rl/setting_rules.h"

namespace pulse::app {

using namespace rl::rules;

namespace {

/// A string setting that must be one of `allowed`: "must be one of a, b (got 'x')".
void one_of(const std::string& key, const std::string& v, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  fail(key, "must be one of " + list + " (got '" + v + "')");
}

/// A uint64 setting written as a TOML integer (int64): at least `lo`, below 2^63.
void count_in(const std::string& key, uint64_t v, uint64_t lo) {
  if (v < lo) fail(key, "must be >= " + std::to_string(lo) + " (got " + std::to_string(v) + ")");
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(key, "must be < 2^63");
}

}  // namespace

void ModelSection::validate() const {
  one_of("model.dtype", dtype, {"bfloat16", "float32"});
}

void TokenizerSection::validate() const {
  int_in("tokenizer.vocab_size", vocab_size, 64, 1 << 20);
  one_of("tokenizer.chat_template", chat_template, model::PromptTemplate::preset_names());
}

void DataSection::validate() const {
  int_in("data.n_problems", n_problems, 2, 10'000'000);
  int_in("data.max_level", max_level, 1, 5);
  real_in("data.demo_error_rate", demo_error_rate, 0.0, 1.0);
  if (demo_error_rate > 0 && task != DataTask::SyntheticCode)
    fail("data.demo_error_rate",
         std::string("applies to data.task = \"synthetic_code\" only (task is '") + name_of(task) + "')");
  real_in("data.held_out_fraction", held_out_fraction, 0.0, 0.9, Ends::OpenLow);
  int_in("data.seed", seed, 0, kMaxInt);
  one_of("data.eval_split", eval_split, {"all", "test", "validation", "train", "prompt"});
  if (eval_split != "all" && task != DataTask::Mbpp)
    fail("data.eval_split", "must be all unless data.task = mbpp (got '" + eval_split + "')");
  int_in("data.mbpp_shots", mbpp_shots, 0, 3);
  int_in("data.max_question_chars", limits.max_question_chars, 1, kMaxInt);
  int_in("data.max_answer_chars", limits.max_answer_chars, 1, kMaxInt);
  int_in("data.max_prompt_tokens", max_prompt_tokens, 1, int64_t{1} << 24);
  if (mbpp_shots > 0 && task != DataTask::Mbpp)
    fail("data.mbpp_shots", "must be 0 unless data.task = mbpp (got " + std::to_string(mbpp_shots) + ")");
  if (reads_dataset_file(task) && path.empty() && eval_path.empty())
    fail("data.path", std::string("must name a jsonl file for task '") + name_of(task) + "'");
}

void SftSection::validate() const {
  loop.validate();
  optimizer.validate_settings("sft");
  if (loop.steps > 0 && optimizer.warmup_steps >= loop.steps)
    fail("sft.warmup_steps", "must be < sft.steps (" + std::to_string(loop.steps) +
                                 ") (the SFT schedule is cosine after warmup)");
}

void RlSection::validate() const {
  int_in("rl.steps", steps, 0, kMaxInt);
  int_in("rl.prompts_per_step", prompts_per_step, 1, 1 << 20);
  int_in("rl.group_size", group_size, 2, 1 << 16);
  int_in("rl.max_lag", max_lag, 0, 1);
  grpo.validate();
}

void SyncSection::validate() const {
  patch.validate();
  count_in("sync.anchor_every", retention.anchor_every, 1);
  count_in("sync.keep_anchors", retention.keep_anchors, 1);
  if (dense && retention.anchor_every != 1)
    fail("sync.dense", "needs sync.anchor_every = 1 (an anchor at every version), got " +
                           std::to_string(retention.anchor_every));
}

void TransportSection::validate() const {
  int_in("transport.port", port, 0, 65534);
  int_in("transport.max_retries", max_retries, 0, 1000);
  real_in("transport.timeout_s", timeout_s, 0.0, 86400.0, Ends::OpenLow);
  real_in("transport.lease_s", lease_s, 0.0, 86400.0, Ends::OpenLow);
  real_in("transport.no_worker_timeout_s", no_worker_timeout_s, 0.0, 1e7, Ends::OpenLow);
  real_in("transport.register_wait_s", register_wait_s, 0.0, 1e7, Ends::OpenLow);
  if (tls_cert.empty() != tls_key.empty())
    fail("transport.tls_cert", "and transport.tls_key must be set together");
}

void EvalSection::validate() const {
  int_in("eval.max_problems", max_problems, 0, kMaxInt);
  pass_at_1.validate();
}

void RunSection::validate() const {
  if (name.empty()) fail("run.name", "must not be empty");
  if (name.find('/') != std::string::npos) fail("run.name", "must not contain '/'");
  int_in("run.seed", seed, 0, kMaxInt);
  int_in("run.workers", workers, 1, 256);
  int_in("run.checkpoint_every", checkpoint_every, 0, kMaxInt);
  int_in("run.threads", threads, 0, 1024);
  real_in("run.max_memory_gb", max_memory_gb, 0.0, 1e9);
  one_of("run.device", device, {std::begin(kDeviceSettings), std::end(kDeviceSettings)});
  if (device == "cuda") {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) fail("run.device", "= \"cuda\" cannot be used: " + why);
  }
}

}  // namespace pulse::app
