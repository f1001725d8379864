// The run configuration: every TOML field pulse reads, validated in ONE place (app/config.cpp). The
// algorithm settings are the algorithms' own structs (rl::GrpoConfig, rl::OptimizerConfig, rl::SftConfig,
// model::SamplingParams, rl::EvalConfig, sync::PatchOptions), whose member initializers are the defaults;
// the field table in app/config.cpp binds each TOML key to one member, with its meaning and range, so a
// setting is declared once and reaches its use without copies. Values derived from other keys (total
// steps, seeds, model id) are set by finalize() in one place.
// Sections: model, tokenizer, data, sft, rl, optimizer, sync, transport, eval, run, multi.
// `pulse config --print-defaults` prints all of them as a valid TOML file.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "rl/eval.h"
#include "rl/grpo_config.h"
#include "rl/optimizer_config.h"
#include "rl/outer_config.h"
#include "rl/sft.h"
#include "sync/patch.h"
#include "sync/version_store.h"

namespace pulse::app {

/// A config that cannot be used: unknown key, wrong type, out-of-range value. what() names the file
/// (or "--set") and the key, e.g. "configs/x.toml: unknown key 'rl.grup_size' (did you mean 'group_size'?)".
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ModelSection {
  std::string
      config;  ///< HF config.json of a fresh model; "" = the embedded tiny Llama (ignored when path is set)
  std::string path;               ///< HF checkpoint folder to start from; "" = seeded init
  std::string dtype = "float32";  ///< compute dtype: "bfloat16" | "float32" (weights stay BF16 values)
};

struct TokenizerSection {
  std::string path;  ///< tokenizer file/folder; "" = train SentencePiece BPE into <run dir>/tokenizer.model
  int64_t vocab_size = 320;             ///< pieces of the trained tokenizer (only when path is "")
  std::string chat_template = "plain";  ///< PromptTemplate preset wrapping each question
};

struct DataSection {
  std::string task = "synthetic_math";  ///< synthetic_math | synthetic_code | math | mbpp | gsm8k
  std::string path;                     ///< train jsonl for math | mbpp | gsm8k
  std::string eval_path;                ///< held-out jsonl; "" = split from the train problems
  int64_t n_problems = 4000;            ///< synthetic problems generated (train + held-out)
  int64_t max_level = 2;                ///< synthetic difficulty 1..5
  double demo_error_rate = 0;           ///< synthetic_code: share of SFT demonstrations that are wrong
  double held_out_fraction = 0.05;      ///< share of the problems kept for Pass@1 (when eval_path is "")
  int64_t seed = 7;                     ///< problem generation and split seed
  std::string eval_split = "all";       ///< mbpp: the held-out file's standard split (datasets/mbpp_split.h)
  int64_t mbpp_shots = 0;               ///< mbpp: few-shot exemplars per prompt (datasets/mbpp_fewshot.h)
};

/// SFT warm start: the loop (rl/sft.h) and its own optimizer (AdamW, cosine to min_lr_ratio after warmup).
struct SftSection {
  rl::SftConfig loop;  ///< sft.steps, batch_size, max_len, micro_batch
  rl::OptimizerConfig optimizer = rl::sft_optimizer_defaults();  ///< sft.lr, warmup_steps, min_lr_ratio
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
};

struct TransportSection {
  std::string kind = "http";  ///< http: patches from the trainer's HTTP server; fs: through a shared folder
  std::string dir;            ///< fs: the shared folder (NFS, object-store mount); "" = <run dir>/patches
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
};

/// Held-out Pass@1 (rl/eval.h): greedy by default, seeded from derive_seed(run.seed, kSeedEval).
struct EvalSection {
  rl::EvalConfig pass_at_1;    ///< eval.batch_size, max_new_tokens, greedy, n_samples, k, temperature, top_p
  int64_t max_problems = 128;  ///< held-out problems used for Pass@1 (0 = all)
  bool before = true;          ///< Pass@1 before GRPO (after the SFT warm start)
  bool after = true;           ///< Pass@1 after GRPO
};

struct RunSection {
  std::string name = "default";
  std::string dir;      ///< run directory; "" = runs/<name>-<timestamp>
  int64_t seed = 1234;  ///< model init, SFT batches, sampling: every RNG is derived from (seed, step)
  int64_t workers = 2;  ///< inference workers (threads in `pulse run`)
  int64_t checkpoint_every = 10;  ///< GRPO steps between checkpoints (0 = only at the end)
  int64_t threads = 1;            ///< LibTorch intra-op threads per role (0 = all cores)
  std::string device = "cpu";     ///< cpu | cuda | auto: where model and RL run (app/device.h)
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

/// Checks every field's range and the cross-field rules. Throws ConfigError naming `source` and the key.
void validate(const Config& config, const std::string& source);

/// A valid TOML text of `config`, one commented line per field (what --print-defaults and the run
/// directory's config.toml hold).
std::string to_toml(const Config& config);

/// All keys as "section.key", in print order.
std::vector<std::string> config_keys();

}  // namespace pulse::app
