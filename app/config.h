// The run configuration: every TOML field pulse reads. The algorithm settings are the algorithms' own
// structs (rl::GrpoConfig, rl::OptimizerConfig, rl::SftConfig, rl::EvalConfig, rl::OuterConfig,
// sync::PatchOptions), whose member initializers are the defaults; the field table in app/config.cpp binds
// each TOML key to one member with its meaning, so a setting is declared once and reaches its use without
// copies. Each struct's validate() (the sections below: app/config_sections.cpp) is the one range rule of
// its keys; app/config.cpp adds only the rules across sections. Modes are enums parsed where the TOML is
// read. Values derived from other keys (total steps, seeds, model id) are set by finalize() in one place.
// Sections: model, tokenizer, data, sft, rl, optimizer, sync, transport, eval, run, multi.
// `pulse config --print-defaults` prints all of them as a valid TOML file.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "app/config_error.h"
#include "datasets/loaders.h"
#include "rl/eval.h"
#include "rl/grpo_config.h"
#include "rl/optimizer_config.h"
#include "rl/outer_config.h"
#include "rl/sft.h"
#include "sync/patch.h"
#include "sync/version_store.h"

namespace pulse::app {

/// splitmix64 of (seed, a, b): independent seeds for (run seed, purpose, step), so that no random stream
/// depends on what ran before it (resume reproduces an uninterrupted run).
uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

/// Purposes mixed into derive_seed.
enum SeedPurpose : uint64_t {
  kSeedInit = 1,
  kSeedSft = 2,
  kSeedRollout = 3,
  kSeedPrompts = 4,
  kSeedEval = 5
};

/// The settings structs' validate() functions below throw std::invalid_argument "KEY: PROBLEM" (KEY the
/// TOML key, "rl.group_size"; PROBLEM "must be >= 2 (got 1)"), as rl/setting_rules.h words them; load_config
/// turns that into a ConfigError naming the file and line (or the --set) that gave the key.

struct ModelSection {
  std::string
      config;  ///< HF config.json of a fresh model; "" = the embedded tiny Llama (ignored when path is set)
  std::string path;               ///< HF checkpoint folder to start from; "" = seeded init
  std::string dtype = "float32";  ///< compute dtype: "bfloat16" | "float32" (weights stay BF16 values)
  /// model.dtype is bfloat16 | float32.
  void validate() const;
};

struct TokenizerSection {
  std::string path;  ///< tokenizer file/folder; "" = train SentencePiece BPE into <run dir>/tokenizer.model
  int64_t vocab_size = 320;             ///< pieces of the trained tokenizer (only when path is "")
  std::string chat_template = "plain";  ///< PromptTemplate preset wrapping each question
  /// vocab_size 64..2^20; chat_template one of model::PromptTemplate::preset_names().
  void validate() const;
};

/// data.task: where the problems come from.
enum class DataTask {
  SyntheticMath,  ///< generated arithmetic (datasets/synthetic.h)
  SyntheticCode,  ///< generated Python functions with asserts
  Math,           ///< a MATH-style jsonl (data.path)
  Mbpp,           ///< an MBPP jsonl
  Gsm8k,          ///< a GSM8K jsonl
};

/// The TOML names of DataTask, in enum order.
inline constexpr std::array<const char*, 5> kDataTaskNames = {"synthetic_math", "synthetic_code", "math",
                                                              "mbpp", "gsm8k"};

/// The TOML name of `t` ("synthetic_math" | ... | "gsm8k").
inline const char* name_of(DataTask t) {
  return kDataTaskNames[static_cast<size_t>(t)];
}

/// math | mbpp | gsm8k: the tasks read from a dataset file.
inline bool reads_dataset_file(DataTask t) {
  return t == DataTask::Math || t == DataTask::Mbpp || t == DataTask::Gsm8k;
}

struct DataSection {
  DataTask task = DataTask::SyntheticMath;
  std::string path;                 ///< train jsonl for math | mbpp | gsm8k
  std::string eval_path;            ///< held-out jsonl; "" = split from the train problems
  int64_t n_problems = 4000;        ///< synthetic problems generated (train + held-out)
  int64_t max_level = 2;            ///< synthetic difficulty 1..5
  double demo_error_rate = 0;       ///< synthetic_code: share of SFT demonstrations that are wrong
  double held_out_fraction = 0.05;  ///< share of the problems kept for Pass@1 (when eval_path is "")
  int64_t seed = 7;                 ///< problem generation and split seed
  std::string eval_split = "all";   ///< mbpp: the held-out file's standard split (datasets/mbpp_split.h)
  int64_t mbpp_shots = 0;           ///< mbpp: few-shot exemplars per prompt (datasets/mbpp_fewshot.h)
  /// n_problems 2..10^7, max_level 1..5, demo_error_rate [0, 1] (> 0 only for synthetic_code),
  /// held_out_fraction (0, 0.9], seed >= 0, eval_split all | test | validation | train | prompt (not all
  /// only for mbpp), mbpp_shots 0..3 (> 0 only for mbpp), path or eval_path set for a dataset-file task.
  datasets::TextLimits limits;      ///< data.max_question_chars, max_answer_chars (refused at load)
  int64_t max_prompt_tokens = 4096;  ///< a problem whose templated prompt is longer is refused at setup
  void validate() const;
};

/// SFT warm start: the loop (rl/sft.h) and its own optimizer (AdamW, cosine to min_lr_ratio after warmup).
struct SftSection {
  rl::SftConfig loop;  ///< sft.steps, batch_size, max_len, micro_batch
  rl::OptimizerConfig optimizer = rl::sft_optimizer_defaults();  ///< sft.lr, warmup_steps, min_lr_ratio
  /// loop.validate(), optimizer.validate_settings("sft"), and sft.warmup_steps < sft.steps when steps > 0.
  void validate() const;
};

/// GRPO: the run loop's sizes, and the algorithm's own config (rl/grpo.h) whose `sampling` member is the
/// rollout sampler's distribution (rl.temperature, rl.top_p, rl.top_k, rl.max_new_tokens): the workers
/// sample with it and GRPO recomputes log-probs under it.
struct RlSection {
  int64_t steps = 80;             ///< GRPO steps
  int64_t prompts_per_step = 48;  ///< prompts per step, split among the workers
  int64_t group_size = 8;         ///< G: rollouts per prompt
  int64_t max_lag = 0;            ///< off-policy lag: versions a worker may be behind (0 = on-policy; 1 = one
                                  ///< rollout batch generated while the trainer steps)
  rl::GrpoConfig grpo;  ///< rl.eps_low, eps_high, scale_by_std, loss_agg, kl_coef, tis_cap, micro_batch, ...
  /// steps >= 0, prompts_per_step 1..2^20, group_size 2..2^16, max_lag 0..1, and grpo.validate().
  void validate() const;
};

/// PULSESync publishing: the codec options (sync/patch.h) and the version store's retention.
struct SyncSection {
  sync::PatchOptions patch;         ///< sync.values, zstd_level, threads (model_id = run.name)
  sync::RetentionPolicy retention;  ///< sync.anchor_every, keep_anchors
  bool store_on_disk = false;       ///< keep patches/anchors under <run dir>/sync (else memory)
  /// Dense baseline (`pulse bench wan`): every worker fetches the newest full anchor at every version
  /// instead of a patch, as a trainer without PULSESync ships its whole BF16 weights each step. Needs
  /// anchor_every = 1 (an anchor at every version). Never faster; for comparisons only.
  bool dense = false;
  /// patch.validate(); anchor_every and keep_anchors 1..2^63-1; dense needs
  /// anchor_every = 1.
  void validate() const;
};

/// transport.kind: how workers get the patches.
enum class TransportKind {
  Http,  ///< from the trainer's HTTP patch server
  Fs,    ///< through a shared folder (transport.dir)
};

/// The TOML names of TransportKind, in enum order.
inline constexpr std::array<const char*, 2> kTransportKindNames = {"http", "fs"};

/// The TOML name of `k` ("http" | "fs").
inline const char* name_of(TransportKind k) {
  return kTransportKindNames[static_cast<size_t>(k)];
}

struct TransportSection {
  TransportKind kind = TransportKind::Http;
  std::string dir;  ///< fs: the shared folder (NFS, object-store mount); "" = <run dir>/patches
  std::string host = "127.0.0.1";  ///< trainer bind address
  int64_t port = 29600;            ///< control port, fixed (--resume reuses it); patches on port+1; 0 = free
  std::string token_env = "PULSE_TOKEN";  ///< env var holding the bearer token
  std::string token_file;                 ///< or a file holding it; "" and unset env = a random token per run
  std::string tls_cert, tls_key;          ///< optional TLS on the patch server
  int64_t max_retries = 5;
  double timeout_s = 60;
  double lease_s = 30;  ///< a worker without a request (heartbeats: every lease_s/3) for this long is dropped
  double no_worker_timeout_s = 600;  ///< the run fails after this long with no live worker
  double register_wait_s = 600;      ///< how long a worker retries registering (trainer not up, run full)
  /// port 0..65534, max_retries 0..1000, timeout_s and lease_s (0, 86400], no_worker_timeout_s and
  /// register_wait_s (0, 10^7]; tls_cert and tls_key set together.
  void validate() const;
};

/// Held-out Pass@1 (rl/eval.h): greedy by default, seeded from derive_seed(run.seed, kSeedEval).
struct EvalSection {
  rl::EvalConfig pass_at_1;    ///< eval.batch_size, max_new_tokens, greedy, n_samples, k, temperature, top_p
  int64_t max_problems = 128;  ///< held-out problems used for Pass@1 (0 = all)
  bool before = true;          ///< Pass@1 before GRPO (after the SFT warm start)
  bool after = true;           ///< Pass@1 after GRPO
  /// max_problems >= 0, and pass_at_1.validate().
  void validate() const;
};

struct RunSection {
  std::string name = "default";
  std::string dir;      ///< run directory; "" = runs/<name>-<timestamp>
  int64_t seed = 1234;  ///< model init, SFT batches, sampling: every RNG is derived from (seed, step)
  int64_t workers = 2;  ///< inference workers (threads in `pulse run`)
  int64_t checkpoint_every = 10;  ///< GRPO steps between checkpoints (0 = only at the end)
  int64_t threads = 1;            ///< LibTorch intra-op threads per role (0 = all cores)
  std::string device = "cpu";     ///< cpu | cuda | auto: where model and RL run (app/device.h)
  double max_memory_gb = 0;       ///< refuse a run estimated to need more (GB = 1e9 bytes); 0 = no cap
  /// name non-empty without '/', seed >= 0, workers 1..256, checkpoint_every >= 0, threads 0..1024,
  /// device cpu | cuda | auto (cuda only where usable: app/device.h cuda_unavailable_reason),
  /// max_memory_gb [0, 1e9].
  void validate() const;
};

/// The whole configuration. Plain data; load_config() fills and validates it.
struct Config {
  ModelSection model;
  TokenizerSection tokenizer;
  DataSection data;
  SftSection sft;
  RlSection rl;
  pulse::rl::OptimizerConfig optimizer;  ///< GRPO's optimizer (total_steps = rl.steps, derived)
  SyncSection sync;
  TransportSection transport;
  EvalSection eval;
  RunSection run;
  /// Multi-trainer runs (rl/diloco.h): launched once per node with torchrun's environment (RANK,
  /// WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or by `pulse launch --nproc N`.
  pulse::rl::OuterConfig multi;
};

/// Reads `path` (TOML) over the defaults, then applies `overrides` ("section.key=value", as from --set),
/// then validates. Throws ConfigError naming the file (or "--set") and key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Parses TOML text (source_name used in messages) over the defaults, applies overrides, validates.
Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});

/// Applies one "section.key=value" override. Throws ConfigError naming the key.
void apply_override(Config& config, const std::string& assignment);

/// Sets the values derived from other keys (optimizer.total_steps = rl.steps, the SFT optimizer's
/// total_steps = sft.steps, the SFT and eval seeds from run.seed, patch.model_id = run.name). parse_config
/// calls it; call it again after editing a Config by hand.
void finalize(Config& config);

/// Every section's validate() and the rules across sections. Throws ConfigError naming `source` and the key.
void validate(const Config& config, const std::string& source);

/// A valid TOML text of `config`, one commented line per field (what --print-defaults and the run
/// directory's config.toml hold).
std::string to_toml(const Config& config);

/// All keys as "section.key", in print order.
std::vector<std::string> config_keys();

}  // namespace pulse::app
