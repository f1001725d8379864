// The typed messages of the trainer <-> inference worker control channel (app/wire/control.h), each with ONE
// JSON (de)serializer. Weights never travel here (they go as PULSESync patches, sync/transport_http.h).
//
//   worker -> POST /v1/register {"worker": name}     -> RegisterReply (slot, id, lease key, lease_s)
//   worker -> GET  /v1/job?after=SEQ&worker=KEY       -> Job (the shares of the work this worker holds)
//   worker -> POST /v1/report?worker=KEY WorkerReport -> {} (one report per share, or one for a sync)
//   worker -> POST /v1/heartbeat?worker=KEY           -> {} (renews the lease; 410 once dropped)
//
// Parsing: every from_json below throws MessageError naming the message and the field ("worker report:
// field 'version': type must be number, but is null"), never a bare nlohmann exception.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/problem.h"
#include "model/generate.h"
#include "rl/rollout.h"

// Serializers of types that live in other folders; declared in their own namespaces for nlohmann's ADL.
namespace pulse::datasets {
void to_json(nlohmann::json& j, const Problem& p);
void from_json(const nlohmann::json& j, Problem& p);
}  // namespace pulse::datasets
namespace pulse::rl {
/// Lossless: float log-probs survive the round trip bit for bit.
void to_json(nlohmann::json& j, const Rollout& r);
void from_json(const nlohmann::json& j, Rollout& r);
}  // namespace pulse::rl
namespace pulse::model {
void to_json(nlohmann::json& j, const SamplingParams& s);
void from_json(const nlohmann::json& j, SamplingParams& s);
}  // namespace pulse::model

namespace pulse::app {

/// A control-channel message that is not what its type requires. what() names the message and field.
struct MessageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The rollout settings every worker samples with (part of the register answer). `sampling` is the
/// trainer's rl::GrpoConfig::sampling itself, so that workers sample from the distribution GRPO recomputes.
struct WorkerSettings {
  int64_t group_size = 8;          ///< G: rollouts per prompt
  model::SamplingParams sampling;  ///< temperature, top_p, top_k, max_new_tokens (stop ids: the tokenizer's)
  uint64_t seed = 0;               ///< run seed, mixed into every request seed
  std::string chat_template = "plain";
  std::string dtype = "float32";  ///< the worker's compute dtype
  std::string device = "cpu";     ///< run.device, resolved by each worker (app/device.h); absent = cpu
  bool dense = false;             ///< sync.dense: fetch the full anchor every version; absent = false
};

/// The /v1/register answer: who the worker is in this run and what it needs to start.
struct RegisterReply {
  int64_t index = -1;          ///< this member's slot: a number the trainer never hands out twice
  std::string worker_id;       ///< its id: the name it asked for, else "w<index>"
  std::string key;             ///< lease key sent with every later request (?worker=KEY); per registration
  double lease_s = 30;         ///< the member is dropped after this long without a request (heartbeat)
  std::string patch_url;       ///< PULSESync server ("http://127.0.0.1:PORT")
  std::string patch_dir;       ///< transport.kind = fs: the shared patch folder ("" = use patch_url)
  WorkerSettings settings;     ///< how to sample
  std::string model_config;    ///< HF config.json text of the model
  std::string tokenizer_name;  ///< file name of the tokenizer served at /v1/tokenizer
};

enum class JobKind { Sync, Generate, Stop };
const char* job_kind_name(JobKind kind);

/// One share of a generate job: a fixed slice of the step's prompts (run.workers shares per step, whoever
/// samples them). Rollout seeds depend on the position inside the share, never on the worker.
struct JobWork {
  int64_t share = 0;                  ///< which slice of the step's prompts (0 .. run.workers-1)
  std::vector<rl::Problem> problems;  ///< the prompts (rollout problem_index is into this list)
  uint64_t step_seed = 0;             ///< derive_seed(run.seed, kSeedRollout, step)
};

/// A job as one worker sees it: sync to `version`, then (generate) sample and grade each share in `work`.
/// `seq` grows on every post and every reassignment (a member polls with the last seq it saw).
struct Job {
  uint64_t seq = 0;
  JobKind kind = JobKind::Sync;
  uint64_t version = 0;       ///< the weights version to sync to first
  int64_t step = 0;           ///< GRPO step the job belongs to (-1 for stop)
  std::vector<JobWork> work;  ///< the shares this member holds and has not reported (empty: sync only)
};

/// What a worker's PULSESync did for a job (sync::WorkerReplica::SyncStats + model load + prefetch).
struct SyncReport {
  uint64_t from = 0, to = 0, bytes = 0;
  double fetch_ms = 0, apply_ms = 0, total_ms = 0, load_ms = 0;
  bool used_anchor = false;
  uint64_t rejected = 0;    ///< patches the replica refused (then repaired from an anchor)
  bool prefetched = false;  ///< the patch came from the background prefetch
  /// How the model's parameters were brought to the new version (app/worker/device_weights.h
  /// weight_load_name): "device_patch" (the sync's patches applied on the GPU), "full_copy" (every tensor
  /// copied from the replica) or "none". Optional on the wire (absent = "none").
  std::string load = "none";
  std::string load_reason;  ///< why a full copy (e.g. "the model's parameters are on cpu"); optional
};

/// A worker's answer to one job.
struct WorkerReport {
  int64_t worker = -1;    ///< the member's slot (RegisterReply::index)
  std::string worker_id;  ///< its id (set by the control server from its member table; optional on the wire)
  int64_t share = -1;     ///< the share these rollouts are for; -1 = a sync-only report (optional)
  uint64_t seq = 0;       ///< the job answered
  uint64_t version = 0;   ///< the version the worker holds after the sync
  std::string root_hash;  ///< its root hash (hex), compared with the trainer's
  SyncReport sync;
  std::vector<rl::Rollout> rollouts;  ///< generate jobs
  double generate_ms = 0;
  int64_t tokens = 0;  ///< response tokens generated
  std::string error;   ///< non-empty: the job failed on the worker (the trainer aborts with it)
};

void to_json(nlohmann::json& j, const WorkerSettings& s);
void from_json(const nlohmann::json& j, WorkerSettings& s);
void to_json(nlohmann::json& j, const RegisterReply& r);
void from_json(const nlohmann::json& j, RegisterReply& r);
void to_json(nlohmann::json& j, const JobWork& w);
void from_json(const nlohmann::json& j, JobWork& w);
void to_json(nlohmann::json& j, const Job& job);
void from_json(const nlohmann::json& j, Job& job);
void to_json(nlohmann::json& j, const SyncReport& s);
void from_json(const nlohmann::json& j, SyncReport& s);
void to_json(nlohmann::json& j, const WorkerReport& r);
void from_json(const nlohmann::json& j, WorkerReport& r);

/// Parses `text` (or a json value) as message type T; throws MessageError "<what>: <field problem>".
template <typename T>
T parse_message(const nlohmann::json& j, const std::string& what) {
  try {
    return j.get<T>();
  } catch (const MessageError& e) {  // a field's problem: prefix the message it belongs to
    throw MessageError(what + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    // Plain words: drop nlohmann's "[json.exception.type_error.302] " prefix.
    const std::string text = e.what();
    const auto close = text.find("] ");
    throw MessageError(what + ": " + (close == std::string::npos ? text : text.substr(close + 2)));
  }
}
template <typename T>
T parse_message_text(const std::string& text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw MessageError(what + ": not JSON");
  return parse_message<T>(j, what);
}

/// The rollout settings a worker uses, from the settings the trainer sent (the one place they meet
/// rl::RolloutConfig). grade_threads is the worker's own choice.
rl::RolloutConfig rollout_config(const WorkerSettings& settings, int grade_threads);

}  // namespace pulse::app
