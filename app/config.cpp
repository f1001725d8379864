// One table of fields (section, key, pointer, doc, range) drives parsing, --set, validation and printing,
// so that a field cannot be read without being validated or printed.
#include "app/config.h"

#include "app/device.h"
#include "app/setup.h"
#include "datasets/mbpp_fewshot.h"
#include "model/chat_template.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>
#include <variant>

namespace pulse::app {
namespace {

/// Where a key's value lives: a member of Config or of an algorithm struct inside it. ValueMode and
/// LocoValues are read and written as their names ("absolute" | "delta", "fp32" | "ulp").
using FieldPtr = std::variant<std::string*, int64_t*, double*, bool*, int*, uint64_t*, sync::ValueMode*,
                              sync::LocoValues*>;

/// One TOML field. `check` returns "" when the value is fine, else what is wrong ("must be >= 1").
struct Field {
  std::string section, key, doc;
  FieldPtr ptr;
  std::function<std::string()> check;
};

template <typename Int>
std::function<std::string()> int_range(const Int* v, int64_t lo, int64_t hi) {
  return [v, lo, hi]() -> std::string {
    const int64_t x = static_cast<int64_t>(*v);
    if (x < lo) return "must be >= " + std::to_string(lo) + " (got " + std::to_string(x) + ")";
    if (x > hi) return "must be <= " + std::to_string(hi) + " (got " + std::to_string(x) + ")";
    return "";
  };
}

/// uint64 fields are written as TOML integers (int64); values above 2^63 are out of range.
std::function<std::string()> uint_range(const uint64_t* v, uint64_t lo) {
  return [v, lo]() -> std::string {
    if (*v < lo) return "must be >= " + std::to_string(lo) + " (got " + std::to_string(*v) + ")";
    if (*v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return "must be < 2^63";
    return "";
  };
}

const char* value_mode_name(sync::ValueMode m) {
  return m == sync::ValueMode::Delta ? "delta" : "absolute";
}
bool value_mode_from(const std::string& s, sync::ValueMode* m) {
  if (s == "absolute") return *m = sync::ValueMode::Absolute, true;
  if (s == "delta") return *m = sync::ValueMode::Delta, true;
  return false;
}

bool loco_values_text(const std::string& s, sync::LocoValues* v) {
  return sync::loco_values_from(s.c_str(), v);
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

std::string fmt_double(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  std::string s = buf;
  // Shortest text that reads back to the same double, for readable configs.
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (std::strtod(buf, nullptr) == x) {
      s = buf;
      break;
    }
  }
  // %g writes 60 as "6e+01"; from 1 up, plain decimals read better (a learning rate keeps "3e-06").
  if (s.find_first_of("eE") != std::string::npos && std::fabs(x) >= 1 && std::fabs(x) < 1e15) {
    for (int prec = 0; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*f", prec, x);
      if (std::strtod(buf, nullptr) == x) {
        s = buf;
        break;
      }
    }
  }
  if (s.find_first_of(".eEni") == std::string::npos) s += ".0";
  return s;
}

std::function<std::string()> real_range(const double* v, double lo, double hi, bool lo_open = false) {
  return [v, lo, hi, lo_open]() -> std::string {
    if (!std::isfinite(*v)) return "must be a finite number";
    if (lo_open ? *v <= lo : *v < lo)
      return std::string("must be ") + (lo_open ? "> " : ">= ") + fmt_double(lo) + " (got " + fmt_double(*v) +
             ")";
    if (*v > hi) return "must be <= " + fmt_double(hi) + " (got " + fmt_double(*v) + ")";
    return "";
  };
}

std::function<std::string()> one_of(const std::string* v, std::vector<std::string> allowed) {
  return [v, allowed]() -> std::string {
    if (std::find(allowed.begin(), allowed.end(), *v) != allowed.end()) return "";
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return "must be one of " + list + " (got '" + *v + "')";
  };
}

std::function<std::string()> any() {
  return [] { return std::string(); };
}

constexpr int64_t kMaxI = std::numeric_limits<int64_t>::max();

/// Collects the field table; one function per section below.
struct FieldTable {
  std::vector<Field> f;
  void add(const char* s, const char* k, FieldPtr p, const char* doc, std::function<std::string()> chk) {
    f.push_back(Field{s, k, doc, p, std::move(chk)});
  }
};

void model_fields(FieldTable& t, Config& c) {
  // model
  t.add("model", "config", &c.model.config,
        "HF config.json of a fresh model; \"\" = the embedded tiny Llama (configs/tiny-llama.json)", any());
  t.add("model", "path", &c.model.path, "HF checkpoint folder to start from; \"\" = seeded init from config",
        any());
  t.add("model", "dtype", &c.model.dtype,
        "compute dtype: bfloat16 | float32 (weights always hold BF16 values)",
        one_of(&c.model.dtype, {"bfloat16", "float32"}));
}

void tokenizer_fields(FieldTable& t, Config& c) {
  // tokenizer
  t.add("tokenizer", "path", &c.tokenizer.path,
        "tokenizer file or folder; \"\" = train SentencePiece BPE into <run dir>/tokenizer.model", any());
  t.add("tokenizer", "vocab_size", &c.tokenizer.vocab_size, "pieces of the trained tokenizer (path = \"\")",
        int_range(&c.tokenizer.vocab_size, 64, 1 << 20));
  t.add("tokenizer", "chat_template", &c.tokenizer.chat_template,
        "prompt template preset: plain | chatml | llama2 (model/chat_template.h)",
        one_of(&c.tokenizer.chat_template, model::PromptTemplate::preset_names()));
}

void data_fields(FieldTable& t, Config& c) {
  // data
  t.add("data", "task", &c.data.task, "synthetic_math | synthetic_code | math | mbpp | gsm8k",
        one_of(&c.data.task, {"synthetic_math", "synthetic_code", "math", "mbpp", "gsm8k"}));
  t.add("data", "path", &c.data.path, "train jsonl for math | mbpp | gsm8k", any());
  t.add("data", "eval_path", &c.data.eval_path, "held-out jsonl; \"\" = split from the train problems",
        any());
  t.add("data", "n_problems", &c.data.n_problems, "synthetic problems generated (train + held-out)",
        int_range(&c.data.n_problems, 2, 10'000'000));
  t.add("data", "max_level", &c.data.max_level, "synthetic difficulty 1..5",
        int_range(&c.data.max_level, 1, 5));
  t.add("data", "demo_error_rate", &c.data.demo_error_rate,
        "synthetic_code: share of SFT demonstrations replaced by a plausible wrong program (a weak "
        "teacher; the RL reward has to find the correct one)",
        real_range(&c.data.demo_error_rate, 0.0, 1.0));
  t.add("data", "held_out_fraction", &c.data.held_out_fraction,
        "share kept for Pass@1 (when eval_path = \"\")",
        real_range(&c.data.held_out_fraction, 0.0, 0.9, true));
  t.add("data", "seed", &c.data.seed, "problem generation and split seed", int_range(&c.data.seed, 0, kMaxI));
  t.add("data", "eval_split", &c.data.eval_split,
        "task mbpp: the held-out file's standard split by task_id: all | test (11-510) | validation "
        "(511-600) | train (601-974) | prompt (1-10); other tasks: all",
        [&c]() -> std::string {
          std::string bad = one_of(&c.data.eval_split, {"all", "test", "validation", "train", "prompt"})();
          if (bad.empty() && c.data.eval_split != "all" && c.data.task != "mbpp")
            bad = "must be all unless data.task = mbpp (got '" + c.data.eval_split + "')";
          return bad;
        });
  t.add("data", "mbpp_shots", &c.data.mbpp_shots,
        "task mbpp: exemplars (MBPP task_ids 2, 3, 4) before each prompt in the paper's few-shot "
        "[BEGIN]/[DONE] format, for base models (use chat_template = plain); 0 = the bare prompt",
        [&c]() -> std::string {
          std::string bad = int_range(&c.data.mbpp_shots, 0, 3)();
          if (bad.empty() && c.data.mbpp_shots > 0 && c.data.task != "mbpp")
            bad = "must be 0 unless data.task = mbpp (got " + std::to_string(c.data.mbpp_shots) + ")";
          return bad;
        });
}

void sft_fields(FieldTable& t, Config& c) {
  // sft: the loop (rl::SftConfig) and its optimizer (rl::OptimizerConfig, cosine)
  rl::SftConfig& sft = c.sft.loop;
  rl::OptimizerConfig& sft_opt = c.sft.optimizer;
  t.add("sft", "steps", &sft.steps,
        "SFT warm-start optimizer steps (0 = none; skipped when model.path is set)",
        int_range(&sft.steps, 0, kMaxI));
  t.add("sft", "batch_size", &sft.batch_size, "sequences per SFT step",
        int_range(&sft.batch_size, 1, 1 << 20));
  t.add("sft", "micro_batch", &sft.micro_batch, "sequences per SFT forward/backward (0 = batch_size)",
        int_range(&sft.micro_batch, 0, 1 << 20));
  t.add("sft", "max_len", &sft.max_len, "tokens per SFT sequence (prompt + target)",
        int_range(&sft.max_len, 8, 1 << 20));
  t.add("sft", "lr", &sft_opt.lr, "SFT learning rate (AdamW, cosine to sft.min_lr_ratio after warmup)",
        real_range(&sft_opt.lr, 0.0, 1.0, true));
  t.add("sft", "warmup_steps", &sft_opt.warmup_steps, "SFT linear warmup steps",
        int_range(&sft_opt.warmup_steps, 0, kMaxI));
  t.add("sft", "min_lr_ratio", &sft_opt.min_lr_ratio, "SFT cosine floor as a share of sft.lr",
        real_range(&sft_opt.min_lr_ratio, 0.0, 1.0));
  t.add("sft", "grad_clip", &sft_opt.grad_clip, "SFT global L2 gradient norm clip (0 = off)",
        real_range(&sft_opt.grad_clip, 0.0, 1e9));
}

void rl_fields(FieldTable& t, Config& c) {
  // rl: the loop sizes, the sampler's distribution (model::SamplingParams) and GRPO (rl::GrpoConfig)
  rl::GrpoConfig& g = c.rl.grpo;
  model::SamplingParams& sp = g.sampling;
  t.add("rl", "steps", &c.rl.steps, "GRPO steps", int_range(&c.rl.steps, 0, kMaxI));
  t.add("rl", "prompts_per_step", &c.rl.prompts_per_step, "prompts per step, split among the workers",
        int_range(&c.rl.prompts_per_step, 1, 1 << 20));
  t.add("rl", "group_size", &c.rl.group_size, "G: rollouts per prompt",
        int_range(&c.rl.group_size, 2, 1 << 16));
  t.add("rl", "max_new_tokens", &sp.max_new_tokens, "response length cap (tokens)",
        int_range(&sp.max_new_tokens, 1, 1 << 20));
  t.add("rl", "temperature", &sp.temperature,
        "sampling temperature (GRPO recomputes log-probs under the same distribution)",
        real_range(&sp.temperature, 0.0, 100.0, true));
  t.add("rl", "top_p", &sp.top_p, "nucleus sampling mass", real_range(&sp.top_p, 0.0, 1.0, true));
  t.add("rl", "top_k", &sp.top_k, "top-k sampling (0 = off)", int_range(&sp.top_k, 0, 1 << 24));
  t.add("rl", "eps_low", &g.eps_low, "PPO ratio clip below 1", real_range(&g.eps_low, 0.0, 1.0));
  t.add("rl", "eps_high", &g.eps_high, "ratio clip above 1 (DAPO clip-higher)",
        real_range(&g.eps_high, 0.0, 10.0));
  t.add("rl", "scale_by_std", &g.scale_by_std, "divide advantages by the group std (false = Dr. GRPO)",
        any());
  t.add("rl", "adv_eps", &g.adv_eps, "added to the group std before dividing",
        real_range(&g.adv_eps, 0.0, 1.0));
  t.add("rl", "loss_agg", &g.loss_agg, "token_mean | seq_mean | constant",
        one_of(&g.loss_agg, {"token_mean", "seq_mean", "constant"}));
  t.add("rl", "constant_normalizer", &g.constant_normalizer,
        "loss_agg = constant: tokens per sequence normalizer",
        real_range(&g.constant_normalizer, 0.0, 1e9, true));
  t.add("rl", "kl_coef", &g.kl_coef, "k3 KL penalty to the frozen initial policy (0 = no reference model)",
        real_range(&g.kl_coef, 0.0, 100.0));
  t.add("rl", "tis_cap", &g.tis_cap, "truncated importance sampling cap (0 = off)",
        real_range(&g.tis_cap, 0.0, 1e6));
  t.add("rl", "micro_batch", &g.micro_batch, "rollouts per forward/backward",
        int_range(&g.micro_batch, 1, 1 << 20));
  t.add("rl", "mask_truncated", &g.mask_truncated,
        "drop responses that hit max_new_tokens from the loss (DAPO overlong filtering)", any());
  t.add("rl", "max_lag", &c.rl.max_lag,
        "off-policy lag in versions: 0 = on-policy; 1 = the workers sample step s+1 at version s while the "
        "trainer takes step s (TIS corrects the gap)",
        int_range(&c.rl.max_lag, 0, 1));
}

void optimizer_fields(FieldTable& t, Config& c) {
  // optimizer (rl::OptimizerConfig of GRPO)
  rl::OptimizerConfig& o = c.optimizer;
  t.add("optimizer", "name", &o.name, "adam | adamw", one_of(&o.name, {"adam", "adamw"}));
  t.add("optimizer", "lr", &o.lr, "GRPO learning rate", real_range(&o.lr, 0.0, 1.0, true));
  t.add("optimizer", "beta1", &o.beta1, "Adam beta1", real_range(&o.beta1, 0.0, 0.999999));
  t.add("optimizer", "beta2", &o.beta2, "Adam beta2", real_range(&o.beta2, 0.0, 0.999999999));
  t.add("optimizer", "eps", &o.eps, "Adam epsilon", real_range(&o.eps, 0.0, 1.0, true));
  t.add("optimizer", "weight_decay", &o.weight_decay, "decoupled weight decay (adamw)",
        real_range(&o.weight_decay, 0.0, 1.0));
  t.add("optimizer", "grad_clip", &o.grad_clip, "global L2 gradient norm clip (0 = off)",
        real_range(&o.grad_clip, 0.0, 1e9));
  t.add("optimizer", "schedule", &o.schedule, "constant | linear_warmup | cosine",
        one_of(&o.schedule, {"constant", "linear_warmup", "cosine"}));
  t.add("optimizer", "warmup_steps", &o.warmup_steps, "linear warmup steps",
        int_range(&o.warmup_steps, 0, kMaxI));
  t.add("optimizer", "min_lr_ratio", &o.min_lr_ratio, "cosine floor as a share of lr",
        real_range(&o.min_lr_ratio, 0.0, 1.0));
}

void sync_fields(FieldTable& t, Config& c) {
  // sync (sync::PatchOptions, sync::RetentionPolicy)
  sync::PatchOptions& po = c.sync.patch;
  t.add("sync", "values", &po.values, "patch values: absolute | delta", any());
  t.add("sync", "zstd_level", &po.zstd_level, "zstd level 0..22 (0 = none)",
        int_range(&po.zstd_level, 0, 22));
  t.add("sync", "anchor_every", &c.sync.retention.anchor_every, "full snapshot every N versions",
        uint_range(&c.sync.retention.anchor_every, 1));
  t.add("sync", "keep_anchors", &c.sync.retention.keep_anchors, "anchors retained",
        uint_range(&c.sync.retention.keep_anchors, 1));
  t.add("sync", "threads", &po.threads, "codec threads (0 = all cores)", int_range(&po.threads, 0, 1024));
  t.add("sync", "store_on_disk", &c.sync.store_on_disk, "keep patches/anchors under <run dir>/sync", any());
}

void transport_fields(FieldTable& t, Config& c) {
  // transport
  t.add("transport", "kind", &c.transport.kind,
        "http: patches from the trainer's HTTP server | fs: through a shared folder (transport.dir)",
        one_of(&c.transport.kind, {"http", "fs"}));
  t.add("transport", "dir", &c.transport.dir, "fs: shared patch folder; \"\" = <run dir>/patches", any());
  t.add("transport", "host", &c.transport.host, "trainer bind address", any());
  t.add("transport", "port", &c.transport.port,
        "control port of `pulse trainer` (fixed, reused by --resume); patches use port+1; 0 = free ports",
        int_range(&c.transport.port, 0, 65534));
  t.add("transport", "token_env", &c.transport.token_env, "env var holding the bearer token", any());
  t.add("transport", "token_file", &c.transport.token_file,
        "file whose first line is the token; with neither set, `pulse run` makes a random one (its workers "
        "are in-process) and `pulse trainer` accepts anyone (with a warning)",
        any());
  t.add("transport", "tls_cert", &c.transport.tls_cert,
        "PEM certificate for TLS on the patch server (optional)", any());
  t.add("transport", "tls_key", &c.transport.tls_key, "PEM key for TLS on the patch server (optional)",
        any());
  t.add("transport", "max_retries", &c.transport.max_retries, "client retries with backoff",
        int_range(&c.transport.max_retries, 0, 1000));
  t.add("transport", "timeout_s", &c.transport.timeout_s, "client timeout per request (seconds)",
        real_range(&c.transport.timeout_s, 0.0, 86400.0, true));
  t.add("transport", "lease_s", &c.transport.lease_s,
        "a worker silent this long (s; heartbeats every lease_s/3) is dropped, its prompts reassigned",
        real_range(&c.transport.lease_s, 0.0, 86400.0, true));
  t.add("transport", "no_worker_timeout_s", &c.transport.no_worker_timeout_s,
        "the run fails after this long (seconds) with no live worker",
        real_range(&c.transport.no_worker_timeout_s, 0.0, 1e7, true));
  t.add("transport", "register_wait_s", &c.transport.register_wait_s,
        "how long a worker retries registering (trainer not up yet, run full), seconds",
        real_range(&c.transport.register_wait_s, 0.0, 1e7, true));
}

void eval_fields(FieldTable& t, Config& c) {
  // eval
  t.add("eval", "max_problems", &c.eval.max_problems, "held-out problems for Pass@1 (0 = all)",
        int_range(&c.eval.max_problems, 0, kMaxI));
  t.add("eval", "batch_size", &c.eval.pass_at_1.batch_size, "prompts per generation batch",
        int_range(&c.eval.pass_at_1.batch_size, 1, 1 << 20));
  t.add("eval", "max_new_tokens", &c.eval.pass_at_1.sampling.max_new_tokens, "response length cap (tokens)",
        int_range(&c.eval.pass_at_1.sampling.max_new_tokens, 1, 1 << 20));
  rl::EvalConfig& e = c.eval.pass_at_1;
  t.add("eval", "greedy", &e.greedy,
        "greedy decoding, one sample per problem (false: eval.n_samples sampled)", any());
  t.add("eval", "n_samples", &e.n_samples, "n: samples per problem when not greedy",
        int_range(&e.n_samples, 1, 1 << 20));
  t.add("eval", "k", &e.k, "k of pass@k (unbiased estimator, Chen et al. 2021), 1 <= k <= n_samples",
        [&e]() -> std::string {
          if (e.k < 1 || e.k > e.n_samples)
            return "must be in 1..eval.n_samples (" + std::to_string(e.n_samples) + ") (got " +
                   std::to_string(e.k) + ")";
          return "";
        });
  t.add("eval", "temperature", &e.sampling.temperature, "sampling temperature when not greedy",
        real_range(&e.sampling.temperature, 0.0, 100.0, true));
  t.add("eval", "top_p", &e.sampling.top_p, "nucleus mass when not greedy",
        real_range(&e.sampling.top_p, 0.0, 1.0, true));
  t.add("eval", "before", &c.eval.before, "Pass@1 before GRPO (after SFT)", any());
  t.add("eval", "after", &c.eval.after, "Pass@1 after GRPO", any());
}

void run_fields(FieldTable& t, Config& c) {
  // run
  t.add("run", "name", &c.run.name, "run name (default run dir runs/<name>-<timestamp>)",
        [&c]() -> std::string {
          if (c.run.name.empty()) return "must not be empty";
          if (c.run.name.find('/') != std::string::npos) return "must not contain '/'";
          return "";
        });
  t.add("run", "dir", &c.run.dir, "run directory; \"\" = runs/<name>-<timestamp>", any());
  t.add("run", "seed", &c.run.seed, "every RNG is derived from (seed, step)",
        int_range(&c.run.seed, 0, kMaxI));
  t.add("run", "workers", &c.run.workers, "inference workers (threads in `pulse run`)",
        int_range(&c.run.workers, 1, 256));
  t.add("run", "checkpoint_every", &c.run.checkpoint_every,
        "GRPO steps between checkpoints (0 = only the last)", int_range(&c.run.checkpoint_every, 0, kMaxI));
  t.add("run", "threads", &c.run.threads,
        "LibTorch threads per role (0 = all cores; 1 suits a tiny model on few cores)",
        int_range(&c.run.threads, 0, 1024));
  t.add("run", "device", &c.run.device,
        "cpu | cuda (cuda:LOCAL_RANK: model, SFT, GRPO, masters, workers' models; needs a CUDA LibTorch "
        "and a GPU) | auto (cuda when usable, else cpu)",
        [&c]() -> std::string {
          std::string bad = one_of(&c.run.device, {std::begin(kDeviceSettings), std::end(kDeviceSettings)})();
          if (!bad.empty() || c.run.device != "cuda") return bad;
          const std::string why = cuda_unavailable_reason();
          return why.empty() ? "" : "= \"cuda\" cannot be used: " + why;
        });
}

void multi_fields(FieldTable& t, Config& c) {
  // multi (rl::OuterConfig)
  rl::OuterConfig& m = c.multi;
  t.add("multi", "mode", &m.mode,
        "single | ddp (gradient all-reduce every step) | diloco (dense FP32 pseudo-gradient every "
        "multi.inner_steps) | pulseloco (only the entries that change BF16 weights; error feedback)",
        one_of(&m.mode, {"single", "ddp", "diloco", "pulseloco"}));
  t.add("multi", "inner_steps", &m.inner_steps, "H: local GRPO steps per outer round",
        int_range(&m.inner_steps, 1, 1 << 20));
  t.add("multi", "outer_lr", &m.outer_lr, "outer Nesterov SGD learning rate",
        real_range(&m.outer_lr, 0.0, 10.0, true));
  t.add("multi", "outer_momentum", &m.outer_momentum, "outer Nesterov momentum (0 = plain SGD)",
        real_range(&m.outer_momentum, 0.0, 0.999999));
  t.add("multi", "gate_open", &m.gate_open, "pulseloco: every entry fires (sends what diloco sends; tests)",
        any());
  t.add("multi", "timeout_s", &m.timeout_s,
        "a collective or the rendezvous fails after this long, naming the rank",
        real_range(&m.timeout_s, 0.0, 86400.0, true));
  t.add("multi", "zstd_level", &m.zstd_level,
        "pulseloco: zstd level tried on the exchanged streams (0 = raw)", int_range(&m.zstd_level, 0, 19));
  t.add("multi", "values", &m.values,
        "pulseloco: fp32 (each fired entry's FP32 value) | ulp (a signed count of the weight's BF16 "
        "step; the remainder stays in error feedback)",
        any());
}

std::vector<Field> fields(Config& c) {
  FieldTable t;
  model_fields(t, c);
  tokenizer_fields(t, c);
  data_fields(t, c);
  sft_fields(t, c);
  rl_fields(t, c);
  optimizer_fields(t, c);
  sync_fields(t, c);
  transport_fields(t, c);
  eval_fields(t, c);
  run_fields(t, c);
  multi_fields(t, c);
  return t.f;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// " (did you mean 'x'?)" for the nearest candidate within a small edit distance, else "".
std::string suggest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best.empty() || best_d > std::max<size_t>(2, word.size() / 3)) return "";
  return " (did you mean '" + best + "'?)";
}

std::vector<std::string> sections() {
  return {"model", "tokenizer", "data", "sft", "rl",   "optimizer",
          "sync",  "transport", "eval", "run", "multi"};
}

std::vector<std::string> keys_of(const std::vector<Field>& f, const std::string& section) {
  std::vector<std::string> k;
  for (const auto& x : f)
    if (x.section == section) k.push_back(x.key);
  return k;
}

Field* find_field(std::vector<Field>& f, const std::string& section, const std::string& key) {
  for (auto& x : f)
    if (x.section == section && x.key == key) return &x;
  return nullptr;
}

const char* type_name(const FieldPtr& p) {
  return std::visit(
      Overloaded{[](std::string*) { return "a string"; }, [](bool*) { return "a boolean (true/false)"; },
                 [](double*) { return "a number"; },
                 [](sync::ValueMode*) { return "one of absolute, delta"; },
                 [](sync::LocoValues*) { return "one of fp32, ulp"; },
                 [](uint64_t*) { return "an integer in 0..2^63-1"; },
                 [](int*) { return "an integer in -2^31..2^31-1"; }, [](auto*) { return "an integer"; }},
      p);
}

std::string where(const std::string& source, const toml::node& node) {
  auto line = node.source().begin.line;
  return line > 0 ? source + ":" + std::to_string(line) : source;
}

/// An integer into an int/int64/uint64 field; false when it does not fit.
template <typename Int>
bool set_integer(Int* dst, int64_t v) {
  if constexpr (std::is_unsigned_v<Int>) {
    if (v < 0) return false;
  } else if (v < static_cast<int64_t>(std::numeric_limits<Int>::min()) ||
             v > static_cast<int64_t>(std::numeric_limits<Int>::max())) {
    return false;
  }
  *dst = static_cast<Int>(v);
  return true;
}

/// Sets a field from a TOML node; returns false on a type mismatch.
bool set_from_node(const FieldPtr& p, const toml::node& node) {
  return std::visit(Overloaded{[&](std::string* d) {
                                 auto v = node.value_exact<std::string>();
                                 return v ? (*d = *v, true) : false;
                               },
                               [&](bool* d) {
                                 auto v = node.value_exact<bool>();
                                 return v ? (*d = *v, true) : false;
                               },
                               [&](double* d) {
                                 if (auto v = node.value_exact<double>()) return *d = *v, true;
                                 if (auto v = node.value_exact<int64_t>())
                                   return *d = static_cast<double>(*v), true;
                                 return false;
                               },
                               [&](sync::ValueMode* d) {
                                 auto v = node.value_exact<std::string>();
                                 return v ? value_mode_from(*v, d) : false;
                               },
                               [&](sync::LocoValues* d) {
                                 auto v = node.value_exact<std::string>();
                                 return v ? loco_values_text(*v, d) : false;
                               },
                               [&](auto* d) {
                                 auto v = node.value_exact<int64_t>();
                                 return v ? set_integer(d, *v) : false;
                               }},
                    p);
}

/// Sets a field from --set text; returns false when the text is not of the field's type.
bool set_from_text(const FieldPtr& p, std::string text) {
  auto trim = [](std::string s) {
    const char* ws = " \t";
    s.erase(0, s.find_first_not_of(ws));
    s.erase(s.find_last_not_of(ws) + 1);
    return s;
  };
  text = trim(text);
  auto unquote = [](std::string t) {
    if (t.size() >= 2 && (t.front() == '"' || t.front() == '\'') && t.back() == t.front())
      t = t.substr(1, t.size() - 2);
    return t;
  };
  auto parse_int = [&](int64_t* out) {
    if (text.empty()) return false;
    size_t used = 0;
    try {
      *out = std::stoll(text, &used);
      return used == text.size();
    } catch (const std::exception&) {
      return false;
    }
  };
  return std::visit(Overloaded{[&](std::string* d) { return *d = unquote(text), true; },
                               [&](bool* d) {
                                 if (text == "true") return *d = true, true;
                                 if (text == "false") return *d = false, true;
                                 return false;
                               },
                               [&](double* d) {
                                 if (text.empty()) return false;
                                 size_t used = 0;
                                 try {
                                   double v = std::stod(text, &used);
                                   if (used != text.size()) return false;
                                   *d = v;
                                   return true;
                                 } catch (const std::exception&) {
                                   return false;
                                 }
                               },
                               [&](sync::ValueMode* d) { return value_mode_from(unquote(text), d); },
                               [&](sync::LocoValues* d) { return loco_values_text(unquote(text), d); },
                               [&](auto* d) {
                                 int64_t v = 0;
                                 return parse_int(&v) && set_integer(d, v);
                               }},
                    p);
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

std::string value_text(const FieldPtr& p) {
  return std::visit(Overloaded{[](std::string* v) { return toml_string(*v); },
                               [](bool* v) { return std::string(*v ? "true" : "false"); },
                               [](double* v) { return fmt_double(*v); },
                               [](sync::ValueMode* v) { return toml_string(value_mode_name(*v)); },
                               [](sync::LocoValues* v) { return toml_string(sync::loco_values_name(*v)); },
                               [](auto* v) { return std::to_string(*v); }},
                    p);
}

/// Where each key set so far got its value ("FILE:LINE" or "--set"), by "section.key": range errors name it.
using KeyOrigins = std::map<std::string, std::string>;

void apply_table(Config& config, const toml::table& root, const std::string& source, KeyOrigins& origins) {
  auto f = fields(config);
  for (const auto& [sec_key, sec_node] : root) {
    std::string sec(sec_key.str());
    auto secs = sections();
    if (std::find(secs.begin(), secs.end(), sec) == secs.end())
      throw ConfigError(where(source, sec_node) + ": unknown section '" + sec + "'" + suggest(sec, secs));
    const toml::table* tbl = sec_node.as_table();
    if (!tbl) throw ConfigError(where(source, sec_node) + ": '" + sec + "' must be a table ([" + sec + "])");
    for (const auto& [key_key, node] : *tbl) {
      std::string key(key_key.str());
      Field* field = find_field(f, sec, key);
      if (!field)
        throw ConfigError(where(source, node) + ": unknown key '" + sec + "." + key + "'" +
                          suggest(key, keys_of(f, sec)));
      if (!set_from_node(field->ptr, node))
        throw ConfigError(where(source, node) + ": key '" + sec + "." + key + "' must be " +
                          type_name(field->ptr));
      origins[sec + "." + key] = where(source, node);
    }
  }
}

}  // namespace

void apply_override(Config& config, const std::string& assignment) {
  auto f = fields(config);
  auto eq = assignment.find('=');
  if (eq == std::string::npos) throw ConfigError("--set " + assignment + ": expected section.key=value");
  std::string lhs = assignment.substr(0, eq), rhs = assignment.substr(eq + 1);
  auto dot = lhs.find('.');
  if (dot == std::string::npos)
    throw ConfigError("--set " + assignment + ": expected section.key=value (key '" + lhs +
                      "' has no section)");
  std::string sec = lhs.substr(0, dot), key = lhs.substr(dot + 1);
  auto secs = sections();
  if (std::find(secs.begin(), secs.end(), sec) == secs.end())
    throw ConfigError("--set: unknown section '" + sec + "'" + suggest(sec, secs));
  Field* field = find_field(f, sec, key);
  if (!field) throw ConfigError("--set: unknown key '" + lhs + "'" + suggest(key, keys_of(f, sec)));
  if (!set_from_text(field->ptr, rhs))
    throw ConfigError("--set: key '" + lhs + "' must be " + type_name(field->ptr) + " (got '" + rhs + "')");
}

namespace {
/// validate(), with the origin of each key the file or a --set gave (named in range errors).
void validate_fields(const Config& config_in, const std::string& source, const KeyOrigins& origins) {
  Config config = config_in;  // fields() needs mutable pointers; checks only read
  for (const auto& field : fields(config)) {
    std::string problem = field.check();
    if (!problem.empty()) {
      const auto at = origins.find(field.section + "." + field.key);
      throw ConfigError((at != origins.end() ? at->second : source) + ": key '" + field.section + "." +
                        field.key + "' " + problem);
    }
  }
  const auto& d = config.data;
  bool real = d.task == "math" || d.task == "mbpp" || d.task == "gsm8k";
  if (d.demo_error_rate > 0 && d.task != "synthetic_code")
    throw ConfigError(
        source + ": key 'data.demo_error_rate' applies to data.task = \"synthetic_code\" only (task is '" +
        d.task + "')");
  if (real && d.path.empty() && d.eval_path.empty())
    throw ConfigError(source + ": key 'data.path' must name a jsonl file for task '" + d.task + "'");
  if (config.rl.steps > 0 && config.rl.prompts_per_step < config.run.workers)
    throw ConfigError(source + ": key 'rl.prompts_per_step' must be >= run.workers (" +
                      std::to_string(config.run.workers) + ") so that every worker gets a prompt");
  if (config.sft.loop.steps > 0 && config.sft.optimizer.warmup_steps >= config.sft.loop.steps)
    throw ConfigError(source + ": key 'sft.warmup_steps' must be < sft.steps (" +
                      std::to_string(config.sft.loop.steps) + ") (the SFT schedule is cosine after warmup)");
  if (config.optimizer.schedule == "cosine" && config.rl.steps > 0 &&
      config.optimizer.warmup_steps >= config.rl.steps)
    throw ConfigError(source + ": key 'optimizer.warmup_steps' must be < rl.steps for the cosine schedule");
  const auto& m = config.multi;
  if ((m.mode == "diloco" || m.mode == "pulseloco") && config.run.checkpoint_every % m.inner_steps != 0)
    throw ConfigError(source + ": key 'run.checkpoint_every' must be a multiple of multi.inner_steps (" +
                      std::to_string(m.inner_steps) + "): checkpoints are taken at outer-round boundaries");
  if ((m.mode == "diloco" || m.mode == "pulseloco") && config.rl.steps % m.inner_steps != 0)
    throw ConfigError(source + ": key 'rl.steps' must be a multiple of multi.inner_steps (" +
                      std::to_string(m.inner_steps) + "): a run is a whole number of outer rounds");
  if ((m.mode == "diloco" || m.mode == "pulseloco") && config.rl.max_lag != 0)
    throw ConfigError(source + ": key 'rl.max_lag' must be 0 with multi.mode = " + m.mode +
                      " (the outer round moves the weights under an in-flight generation)");
  if (!config.transport.tls_cert.empty() != !config.transport.tls_key.empty())
    throw ConfigError(source + ": keys 'transport.tls_cert' and 'transport.tls_key' must be set together");
}
}  // namespace

void validate(const Config& config_in, const std::string& source) {
  validate_fields(config_in, source, KeyOrigins{});
}

void finalize(Config& c) {
  c.optimizer.total_steps = std::max<int64_t>(1, c.rl.steps);
  c.sft.optimizer.total_steps = std::max<int64_t>(1, c.sft.loop.steps);
  const uint64_t seed = static_cast<uint64_t>(c.run.seed);
  c.sft.loop.seed = derive_seed(seed, kSeedSft);
  c.eval.pass_at_1.seed = derive_seed(seed, kSeedEval);
  c.sync.patch.model_id = c.run.name;
  // The few-shot MBPP format ends each program with [DONE]: sampling stops there.
  if (c.data.mbpp_shots > 0)
    for (model::SamplingParams* sp : {&c.rl.grpo.sampling, &c.eval.pass_at_1.sampling})
      sp->stop_strings.push_back(datasets::kMbppDoneMarker);
  // Lagged rollouts were sampled by an older policy: pi_old must be the trainer's current policy, and the
  // TIS weight pi_old / pi_sampler corrects the gap (rl/grpo.h).
  c.rl.grpo.recompute_old_logprobs = true;
}

Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  Config config;
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source_name << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    throw ConfigError(msg.str());
  }
  KeyOrigins origins;
  apply_table(config, root, source_name, origins);
  for (const auto& o : overrides) {
    apply_override(config, o);
    origins[o.substr(0, o.find('='))] = "--set " + o;
  }
  validate_fields(config, overrides.empty() ? source_name : source_name + " (with --set)", origins);
  finalize(config);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  // An ifstream opens a directory without error and reads nothing, which would parse as an empty
  // config (the built-in defaults): refuse it by name.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a directory, not a config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read config file");
  return parse_config(ss.str(), path, overrides);
}

std::string to_toml(const Config& config_in) {
  Config config = config_in;
  auto f = fields(config);
  std::string out =
      "# pulse run configuration. Every key is optional; unset keys take the defaults shown by\n"
      "# `pulse config --print-defaults`.\n";
  std::string current;
  for (const auto& field : f) {
    if (field.section != current) {
      current = field.section;
      out += "\n[" + current + "]\n";
    }
    std::string line = field.key + " = " + value_text(field.ptr);
    if (line.size() < 34) line.resize(34, ' ');
    out += line + "  # " + field.doc + "\n";
  }
  return out;
}

std::vector<std::string> config_keys() {
  Config c;
  std::vector<std::string> keys;
  for (const auto& field : fields(c)) keys.push_back(field.section + "." + field.key);
  return keys;
}

}  // namespace pulse::app
