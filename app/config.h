// The run configuration: every TOML field pulse reads, its default, meaning and unit, validated in ONE
// place (app/config.cpp). Sections: model, tokenizer, data, sft, rl, optimizer, sync, transport, eval, run.
// `pulse config --print-defaults` prints all of them as a valid TOML file.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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
  double held_out_fraction = 0.05;      ///< share of the problems kept for Pass@1 (when eval_path is "")
  int64_t seed = 7;                     ///< problem generation and split seed
};

struct SftSection {
  int64_t steps = 200;      ///< SFT warm-start optimizer steps (0 = none)
  int64_t batch_size = 32;  ///< sequences per SFT step
  int64_t max_len = 96;     ///< tokens per sequence (prompt + target), longer ones are cut
  double lr = 2e-3;         ///< SFT learning rate (AdamW, cosine to 10%)
  int64_t warmup_steps = 20;
};

struct RlSection {
  int64_t steps = 80;             ///< GRPO steps
  int64_t prompts_per_step = 48;  ///< prompts per step, split among the workers
  int64_t group_size = 8;         ///< G: rollouts per prompt
  int64_t max_new_tokens = 40;    ///< response length cap (tokens)
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  double eps_low = 0.2;                 ///< PPO clip below 1
  double eps_high = 0.28;               ///< clip-higher above 1 (DAPO)
  bool scale_by_std = true;             ///< divide advantages by the group std (false = Dr. GRPO)
  std::string loss_agg = "token_mean";  ///< token_mean | seq_mean | constant
  double kl_coef = 0.0;                 ///< KL penalty to the reference (0 = no reference model)
  double tis_cap = 2.0;                 ///< truncated importance sampling cap (0 = off)
  int64_t micro_batch = 32;             ///< rollouts per forward/backward
  int64_t max_lag = 0;  ///< off-policy lag: versions a worker may be behind (0 = on-policy; 1 = one
                        ///< rollout batch generated while the trainer steps)
};

struct OptimizerSection {
  std::string name = "adamw";
  double lr = 3e-5;
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.0;
  double grad_clip = 1.0;             ///< global L2 norm, 0 = off
  std::string schedule = "constant";  ///< constant | linear_warmup | cosine
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;
};

struct SyncSection {
  std::string values = "absolute";  ///< absolute | delta
  int64_t zstd_level = 3;           ///< 0..22 (0 = no compression)
  int64_t anchor_every = 10;        ///< full snapshot every N versions
  int64_t keep_anchors = 2;
  int64_t threads = 1;         ///< codec threads (0 = all)
  bool store_on_disk = false;  ///< keep patches/anchors under <run dir>/sync (else memory)
};

struct TransportSection {
  std::string kind = "http";  ///< http: patches from the trainer's HTTP server; fs: through a shared folder
  std::string dir;            ///< fs: the shared folder (NFS, object-store mount); "" = <run dir>/patches
  std::string host = "127.0.0.1";  ///< trainer bind address
  int64_t port = 0;                ///< control port (0 = pick a free one); patches use port+1 or a free one
  std::string token_env = "PULSE_TOKEN";  ///< env var holding the bearer token
  std::string token_file;                 ///< or a file holding it; "" and unset env = a random token per run
  std::string tls_cert, tls_key;          ///< optional TLS on the patch server
  int64_t max_retries = 5;
  double timeout_s = 60;
};

struct EvalSection {
  int64_t max_problems = 128;  ///< held-out problems used for Pass@1 (0 = all)
  int64_t batch_size = 64;
  int64_t max_new_tokens = 40;
  bool before = true;  ///< Pass@1 before GRPO (after the SFT warm start)
  bool after = true;   ///< Pass@1 after GRPO
};

struct RunSection {
  std::string name = "default";
  std::string dir;      ///< run directory; "" = runs/<name>-<timestamp>
  int64_t seed = 1234;  ///< model init, SFT batches, sampling: every RNG is derived from (seed, step)
  int64_t workers = 2;  ///< inference workers (threads in `pulse run`)
  int64_t checkpoint_every = 10;  ///< GRPO steps between checkpoints (0 = only at the end)
  int64_t threads = 1;            ///< LibTorch intra-op threads per role (0 = all cores)
};

/// The whole configuration. Plain data; load_config() fills and validates it.
struct Config {
  ModelSection model;
  TokenizerSection tokenizer;
  DataSection data;
  SftSection sft;
  RlSection rl;
  OptimizerSection optimizer;
  SyncSection sync;
  TransportSection transport;
  EvalSection eval;
  RunSection run;
};

/// Reads `path` (TOML) over the defaults, then applies `overrides` ("section.key=value", as from --set),
/// then validates. Throws ConfigError naming the file (or "--set") and key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Parses TOML text (source_name used in messages) over the defaults, applies overrides, validates.
Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});

/// Applies one "section.key=value" override. Throws ConfigError naming the key.
void apply_override(Config& config, const std::string& assignment);

/// Checks every field's range and the cross-field rules. Throws ConfigError naming `source` and the key.
void validate(const Config& config, const std::string& source);

/// A valid TOML text of `config`, one commented line per field (what --print-defaults and the run
/// directory's config.toml hold).
std::string to_toml(const Config& config);

/// All keys as "section.key", in print order.
std::vector<std::string> config_keys();

}  // namespace pulse::app
