#include "app/wire/messages.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace pulse::app::detail {

using nlohmann::json;

template <typename T>
struct is_vector : std::false_type {};
template <typename U>
struct is_vector<std::vector<U>> : std::true_type {};

/// One JSON value into dst. Integers are taken only when they fit T exactly: nlohmann would wrap 2^32+5
/// into an int32 5 and truncate 5.7 to 5; a value that does not fit throws MessageError with the value and
/// T's range. Lists are read item by item, an item's problem named by its index.
template <typename T>
void get_value(const json& v, T& dst) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using Lim = std::numeric_limits<T>;
    const std::string range = "[" + std::to_string(Lim::min()) + ", " + std::to_string(Lim::max()) + "]";
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(Lim::max()))
        throw MessageError(std::to_string(u) + " is outside the integer range " + range);
      dst = static_cast<T>(u);
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if ((Lim::is_signed && i < static_cast<int64_t>(Lim::min())) || (!Lim::is_signed && i < 0) ||
          (Lim::is_signed && i > static_cast<int64_t>(Lim::max())))
        throw MessageError(std::to_string(i) + " is outside the integer range " + range);
      dst = static_cast<T>(i);
    } else {
      const std::string shown = v.dump();
      throw MessageError("must be an integer in " + range + ", got " + shown.substr(0, 40));
    }
  } else if constexpr (is_vector<T>::value && !std::is_same_v<T, std::vector<bool>>) {
    if (!v.is_array()) throw MessageError(std::string("type must be array, but is ") + v.type_name());
    T out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      try {
        get_value(v[i], out[i]);
      } catch (const MessageError& e) {
        throw MessageError("item " + std::to_string(i) + ": " + e.what());
      } catch (const json::exception& e) {
        const std::string what = e.what();
        const auto close = what.find("] ");
        throw MessageError("item " + std::to_string(i) + ": " +
                           (close == std::string::npos ? what : what.substr(close + 2)));
      }
    }
    dst = std::move(out);
  } else {
    v.get_to(dst);
  }
}

/// j[key] into dst (get_value); a missing key or a wrong type throws MessageError naming the field.
template <typename T>
void get_field(const json& j, const char* key, T& dst) {
  if (!j.is_object()) throw MessageError(std::string("expected an object with field '") + key + "'");
  auto it = j.find(key);
  if (it == j.end()) throw MessageError(std::string("field '") + key + "' is missing");
  try {
    get_value(*it, dst);
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
           {"stop_strings", s.stop_strings},
           {"decode", name_of(s.decode)}};
}

void from_json(const json& j, SamplingParams& s) {
  get_field(j, "max_new_tokens", s.max_new_tokens);
  get_field(j, "temperature", s.temperature);
  get_field(j, "top_p", s.top_p);
  get_field(j, "top_k", s.top_k);
  get_field(j, "stop_token_ids", s.stop_token_ids);
  get_field(j, "stop_strings", s.stop_strings);
  // Absent (an older trainer): auto. Unknown names are refused with the accepted ones.
  if (j.contains("decode")) {
    const auto mode =
        j.at("decode").is_string() ? decode_mode_named(j.at("decode").get<std::string>()) : std::nullopt;
    if (!mode)
      throw pulse::app::MessageError("sampling.decode: must be one of auto, eager, static, cuda_graph (got " +
                                     j.at("decode").dump() + ")");
    s.decode = *mode;
  }
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
