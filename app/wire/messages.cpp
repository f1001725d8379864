#include "app/wire/messages.h"

namespace pulse::app::detail {

using nlohmann::json;

/// j[key] into dst; a missing key or a wrong type throws MessageError naming the field.
template <typename T>
void get_field(const json& j, const char* key, T& dst) {
  if (!j.is_object()) throw MessageError(std::string("expected an object with field '") + key + "'");
  auto it = j.find(key);
  if (it == j.end()) throw MessageError(std::string("field '") + key + "' is missing");
  try {
    it->get_to(dst);
  } catch (const MessageError& e) {
    throw MessageError(std::string("field '") + key + "': " + e.what());
  } catch (const json::exception& e) {
    std::string what = e.what();
    // nlohmann prefixes "[json.exception.type_error.302] "; keep the plain words.
    auto close = what.find("] ");
    throw MessageError(std::string("field '") + key +
                       "': " + (close == std::string::npos ? what : what.substr(close + 2)));
  }
}

/// Optional field: left as is when absent.
template <typename T>
void get_optional(const json& j, const char* key, T& dst) {
  if (j.is_object() && j.contains(key)) get_field(j, key, dst);
}

}  // namespace pulse::app::detail

namespace pulse::datasets {
using nlohmann::json;
using pulse::app::MessageError;
using pulse::app::detail::get_field;
void to_json(json& j, const Problem& p) {
  j = json{{"id", p.id},
           {"kind", p.kind == TaskKind::Code ? "code" : "math"},
           {"question", p.question},
           {"answer", p.answer},
           {"solution", p.solution},
           {"subject", p.subject},
           {"level", p.level},
           {"tests", p.tests},
           {"test_setup_code", p.test_setup_code}};
}

void from_json(const json& j, Problem& p) {
  std::string kind;
  get_field(j, "id", p.id);
  get_field(j, "kind", kind);
  if (kind != "code" && kind != "math")
    throw MessageError("field 'kind': expected code or math, got '" + kind + "'");
  p.kind = kind == "code" ? TaskKind::Code : TaskKind::Math;
  get_field(j, "question", p.question);
  get_field(j, "answer", p.answer);
  get_field(j, "solution", p.solution);
  get_field(j, "subject", p.subject);
  get_field(j, "level", p.level);
  get_field(j, "tests", p.tests);
  get_field(j, "test_setup_code", p.test_setup_code);
}

}  // namespace pulse::datasets

namespace pulse::rl {
using nlohmann::json;
using pulse::app::MessageError;
using pulse::app::detail::get_field;
void to_json(json& j, const Rollout& r) {
  // float -> double (exact) on the wire, double -> float back: bit-identical log-probs.
  j = json{{"problem_index", r.problem_index},
           {"group", r.group},
           {"prompt_ids", r.prompt_ids},
           {"response_ids", r.response_ids},
           {"sampler_logprobs", r.sampler_logprobs},
           {"reward", r.reward},
           {"reward_reason", r.reward_reason},
           {"truncated", r.truncated},
           {"infrastructure_error", r.infrastructure_error},
           {"policy_version", r.policy_version}};
}

void from_json(const json& j, Rollout& r) {
  get_field(j, "problem_index", r.problem_index);
  get_field(j, "group", r.group);
  get_field(j, "prompt_ids", r.prompt_ids);
  get_field(j, "response_ids", r.response_ids);
  get_field(j, "sampler_logprobs", r.sampler_logprobs);
  get_field(j, "reward", r.reward);
  get_field(j, "reward_reason", r.reward_reason);
  get_field(j, "truncated", r.truncated);
  get_field(j, "infrastructure_error", r.infrastructure_error);
  get_field(j, "policy_version", r.policy_version);
  if (r.sampler_logprobs.size() != r.response_ids.size())
    throw MessageError("rollout: " + std::to_string(r.sampler_logprobs.size()) + " sampler_logprobs for " +
                       std::to_string(r.response_ids.size()) + " response_ids");
}

}  // namespace pulse::rl

namespace pulse::model {
using nlohmann::json;
using pulse::app::detail::get_field;
void to_json(json& j, const SamplingParams& s) {
  j = json{{"max_new_tokens", s.max_new_tokens},
           {"temperature", s.temperature},
           {"top_p", s.top_p},
           {"top_k", s.top_k},
           {"stop_token_ids", s.stop_token_ids},
           {"stop_strings", s.stop_strings}};
}

void from_json(const json& j, SamplingParams& s) {
  get_field(j, "max_new_tokens", s.max_new_tokens);
  get_field(j, "temperature", s.temperature);
  get_field(j, "top_p", s.top_p);
  get_field(j, "top_k", s.top_k);
  get_field(j, "stop_token_ids", s.stop_token_ids);
  get_field(j, "stop_strings", s.stop_strings);
}

}  // namespace pulse::model

namespace pulse::app {
using detail::get_field;
using detail::get_optional;
using nlohmann::json;

void to_json(json& j, const WorkerSettings& s) {
  j = json{{"group_size", s.group_size},
           {"sampling", s.sampling},
           {"seed", s.seed},
           {"chat_template", s.chat_template},
           {"dtype", s.dtype},
           {"device", s.device},
           {"dense", s.dense}};
}

void from_json(const json& j, WorkerSettings& s) {
  get_field(j, "group_size", s.group_size);
  get_field(j, "sampling", s.sampling);
  get_field(j, "seed", s.seed);
  get_field(j, "chat_template", s.chat_template);
  get_field(j, "dtype", s.dtype);
  get_optional(j, "device", s.device);
  get_optional(j, "dense", s.dense);
}

void to_json(json& j, const RegisterReply& r) {
  j = json{{"index", r.index},       {"worker_id", r.worker_id},       {"key", r.key},
           {"lease_s", r.lease_s},   {"patch_url", r.patch_url},       {"patch_dir", r.patch_dir},
           {"settings", r.settings}, {"model_config", r.model_config}, {"tokenizer_name", r.tokenizer_name}};
}

void from_json(const json& j, RegisterReply& r) {
  get_field(j, "index", r.index);
  get_field(j, "worker_id", r.worker_id);
  get_field(j, "key", r.key);
  get_field(j, "lease_s", r.lease_s);
  if (!(r.lease_s > 0)) throw MessageError("field 'lease_s': must be > 0");
  get_field(j, "patch_url", r.patch_url);
  get_field(j, "patch_dir", r.patch_dir);
  get_field(j, "settings", r.settings);
  get_field(j, "model_config", r.model_config);
  get_field(j, "tokenizer_name", r.tokenizer_name);
}

const char* job_kind_name(JobKind kind) {
  switch (kind) {
    case JobKind::Sync:
      return "sync";
    case JobKind::Generate:
      return "generate";
    default:
      return "stop";
  }
}

void to_json(json& j, const JobWork& w) {
  j = json{{"share", w.share}, {"problems", w.problems}, {"step_seed", w.step_seed}};
}

void from_json(const json& j, JobWork& w) {
  get_field(j, "share", w.share);
  get_field(j, "problems", w.problems);
  get_field(j, "step_seed", w.step_seed);
}

void to_json(json& j, const Job& job) {
  j = json{{"seq", job.seq},
           {"kind", job_kind_name(job.kind)},
           {"version", job.version},
           {"step", job.step},
           {"work", job.work}};
}

void from_json(const json& j, Job& job) {
  std::string kind;
  get_field(j, "seq", job.seq);
  get_field(j, "kind", kind);
  if (kind == "sync") {
    job.kind = JobKind::Sync;
  } else if (kind == "generate") {
    job.kind = JobKind::Generate;
  } else if (kind == "stop") {
    job.kind = JobKind::Stop;
  } else {
    throw MessageError("field 'kind': expected sync, generate or stop, got '" + kind + "'");
  }
  get_field(j, "version", job.version);
  get_field(j, "step", job.step);
  get_field(j, "work", job.work);
}

void to_json(json& j, const SyncReport& s) {
  j = json{{"from", s.from},         {"to", s.to},
           {"bytes", s.bytes},       {"fetch_ms", s.fetch_ms},
           {"apply_ms", s.apply_ms}, {"total_ms", s.total_ms},
           {"load_ms", s.load_ms},   {"used_anchor", s.used_anchor},
           {"rejected", s.rejected}, {"prefetched", s.prefetched},
           {"load", s.load},         {"load_reason", s.load_reason}};
}

void from_json(const json& j, SyncReport& s) {
  get_field(j, "from", s.from);
  get_field(j, "to", s.to);
  get_field(j, "bytes", s.bytes);
  get_field(j, "fetch_ms", s.fetch_ms);
  get_field(j, "apply_ms", s.apply_ms);
  get_field(j, "total_ms", s.total_ms);
  get_field(j, "load_ms", s.load_ms);
  get_field(j, "used_anchor", s.used_anchor);
  get_field(j, "rejected", s.rejected);
  get_field(j, "prefetched", s.prefetched);
  get_optional(j, "load", s.load);
  get_optional(j, "load_reason", s.load_reason);
}

void to_json(json& j, const WorkerReport& r) {
  j = json{{"worker", r.worker},           {"seq", r.seq},      {"version", r.version},
           {"root_hash", r.root_hash},     {"sync", r.sync},    {"rollouts", r.rollouts},
           {"generate_ms", r.generate_ms}, {"tokens", r.tokens}};
  if (!r.worker_id.empty()) j["worker_id"] = r.worker_id;
  if (r.share >= 0) j["share"] = r.share;
  if (!r.error.empty()) j["error"] = r.error;
}

void from_json(const json& j, WorkerReport& r) {
  get_field(j, "worker", r.worker);
  get_field(j, "seq", r.seq);
  get_optional(j, "worker_id", r.worker_id);
  get_optional(j, "share", r.share);
  get_optional(j, "error", r.error);
  if (!r.error.empty()) return;  // a failed job carries no results
  get_field(j, "version", r.version);
  get_field(j, "root_hash", r.root_hash);
  get_field(j, "sync", r.sync);
  get_field(j, "rollouts", r.rollouts);
  get_field(j, "generate_ms", r.generate_ms);
  get_field(j, "tokens", r.tokens);
}

rl::RolloutConfig rollout_config(const WorkerSettings& settings, int grade_threads) {
  rl::RolloutConfig rc;
  rc.group_size = settings.group_size;
  rc.sampling = settings.sampling;
  rc.seed = settings.seed;
  rc.grade_threads = grade_threads;
  return rc;
}

}  // namespace pulse::app
