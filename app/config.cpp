// One table of fields (section, key, member, doc) drives parsing, --set and printing, so that a field
// cannot be read without being printed; the range rules are the settings structs' validate() (app/config.h),
// called from validate() below with the rules across sections.
#include "app/config.h"

#include "datasets/mbpp_fewshot.h"
#include "kernels/splitmix64.h"
#include "rl/setting_rules.h"

#include <toml++/toml.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>
#include <variant>

namespace pulse::app {

uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b) {
  using kernels::splitmix64;
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

namespace {

/// A mode key's member (an enum class) seen through its TOML names: read and written as one of `names`.
struct EnumRef {
  std::function<std::string()> get;             ///< the member's name
  std::function<bool(const std::string&)> set;  ///< false when the text is none of `names`
  std::vector<std::string> names;               ///< the allowed values, in enum order
};

/// The EnumRef of `*member`, whose enum values are 0..N-1 in the order of `names`.
template <typename Enum, size_t N>
EnumRef enum_ref(Enum* member, const std::array<const char*, N>& names) {
  return EnumRef{[member, names] { return std::string(names[static_cast<size_t>(*member)]); },
                 [member, names](const std::string& text) {
                   for (size_t i = 0; i < N; ++i)
                     if (text == names[i]) return *member = static_cast<Enum>(i), true;
                   return false;
                 },
                 {names.begin(), names.end()}};
}

/// The TOML names of sync::ValueMode (sync/patch.h), in enum order.
constexpr std::array<const char*, 2> kValueModeNames = {"absolute", "delta"};
static_assert(static_cast<int>(sync::ValueMode::Delta) == 1, "kValueModeNames follows the enum");

/// Where a key's value lives: a member of Config or of an algorithm struct inside it.
using FieldPtr = std::variant<std::string*, int64_t*, double*, bool*, int*, uint64_t*, EnumRef>;

/// One TOML field: where it lives and what it means (its range is its struct's validate()).
struct Field {
  std::string section, key, doc;
  FieldPtr ptr;
};

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

/// Collects the field table; one function per section below.
struct FieldTable {
  std::vector<Field> f;
  void add(const char* s, const char* k, FieldPtr p, const char* doc) { f.push_back(Field{s, k, doc, p}); }
};

void model_fields(FieldTable& t, Config& c) {
  // model
  t.add("model", "config", &c.model.config,
        "HF config.json of a fresh model; \"\" = the embedded tiny Llama (configs/tiny-llama.json)");
  t.add("model", "path", &c.model.path, "HF checkpoint folder to start from; \"\" = seeded init from config");
  t.add("model", "dtype", &c.model.dtype,
        "compute dtype: bfloat16 | float32 (weights always hold BF16 values)");
}

void tokenizer_fields(FieldTable& t, Config& c) {
  // tokenizer
  t.add("tokenizer", "path", &c.tokenizer.path,
        "tokenizer file or folder; \"\" = train SentencePiece BPE into <run dir>/tokenizer.model");
  t.add("tokenizer", "vocab_size", &c.tokenizer.vocab_size, "pieces of the trained tokenizer (path = \"\")");
  t.add("tokenizer", "chat_template", &c.tokenizer.chat_template,
        "prompt template preset: plain | chatml | llama2 (model/chat_template.h)");
}

void data_fields(FieldTable& t, Config& c) {
  // data
  t.add("data", "task", enum_ref(&c.data.task, kDataTaskNames),
        "synthetic_math | synthetic_code | math | mbpp | gsm8k");
  t.add("data", "path", &c.data.path, "train jsonl for math | mbpp | gsm8k");
  t.add("data", "eval_path", &c.data.eval_path, "held-out jsonl; \"\" = split from the train problems");
  t.add("data", "n_problems", &c.data.n_problems, "synthetic problems generated (train + held-out)");
  t.add("data", "max_level", &c.data.max_level, "synthetic difficulty 1..5");
  t.add("data", "demo_error_rate", &c.data.demo_error_rate,
        "synthetic_code: share of SFT demonstrations replaced by a plausible wrong program (a weak "
        "teacher; the RL reward has to find the correct one)");
  t.add("data", "held_out_fraction", &c.data.held_out_fraction,
        "share kept for Pass@1 (when eval_path = \"\")");
  t.add("data", "seed", &c.data.seed, "problem generation and split seed");
  t.add("data", "eval_split", &c.data.eval_split,
        "task mbpp: the held-out file's standard split by task_id: all | test (11-510) | validation "
        "(511-600) | train (601-974) | prompt (1-10); other tasks: all");
  t.add("data", "mbpp_shots", &c.data.mbpp_shots,
        "task mbpp: exemplars (MBPP task_ids 2, 3, 4) before each prompt in the paper's few-shot "
        "[BEGIN]/[DONE] format, for base models (use chat_template = plain); 0 = the bare prompt");
  t.add("data", "max_question_chars", &c.data.limits.max_question_chars,
        "a problem whose question (MATH problem, GSM8K question, MBPP text) has more characters is refused "
        "at load, naming file, line and field");
  t.add("data", "max_answer_chars", &c.data.limits.max_answer_chars,
        "the same for the reference response (MATH solution/answer, GSM8K answer, MBPP code and tests)");
  t.add("data", "max_prompt_tokens", &c.data.max_prompt_tokens,
        "a problem whose templated prompt has more tokens is refused before the model is built");
}

void sft_fields(FieldTable& t, Config& c) {
  // sft: the loop (rl::SftConfig) and its optimizer (rl::OptimizerConfig, cosine)
  rl::SftConfig& sft = c.sft.loop;
  rl::OptimizerConfig& sft_opt = c.sft.optimizer;
  t.add("sft", "steps", &sft.steps,
        "SFT warm-start optimizer steps (0 = none; skipped when model.path is set)");
  t.add("sft", "batch_size", &sft.batch_size, "sequences per SFT step");
  t.add("sft", "micro_batch", &sft.micro_batch, "sequences per SFT forward/backward (0 = batch_size)");
  t.add("sft", "max_len", &sft.max_len, "tokens per SFT sequence (prompt + target)");
  t.add("sft", "lr", &sft_opt.lr, "SFT learning rate (AdamW, cosine to sft.min_lr_ratio after warmup)");
  t.add("sft", "warmup_steps", &sft_opt.warmup_steps, "SFT linear warmup steps");
  t.add("sft", "min_lr_ratio", &sft_opt.min_lr_ratio, "SFT cosine floor as a share of sft.lr");
  t.add("sft", "grad_clip", &sft_opt.grad_clip, "SFT global L2 gradient norm clip (0 = off)");
}

void rl_fields(FieldTable& t, Config& c) {
  // rl: the loop sizes, the sampler's distribution (model::SamplingParams) and GRPO (rl::GrpoConfig)
  rl::GrpoConfig& g = c.rl.grpo;
  model::SamplingParams& sp = g.sampling;
  t.add("rl", "steps", &c.rl.steps, "GRPO steps");
  t.add("rl", "prompts_per_step", &c.rl.prompts_per_step, "prompts per step, split among the workers");
  t.add("rl", "group_size", &c.rl.group_size, "G: rollouts per prompt");
  t.add("rl", "max_new_tokens", &sp.max_new_tokens, "response length cap (tokens)");
  t.add("rl", "temperature", &sp.temperature,
        "sampling temperature (GRPO recomputes log-probs under the same distribution)");
  t.add("rl", "top_p", &sp.top_p, "nucleus sampling mass");
  t.add("rl", "top_k", &sp.top_k, "top-k sampling (0 = off)");
  t.add("rl", "decode", enum_ref(&sp.decode, model::kDecodeModeNames),
        "rollout and Pass@1 decode path: auto (cuda_graph on a GPU, eager on the CPU) | eager | static "
        "(fixed-shape KV cache, device sampling) | cuda_graph (static, each step replayed as a CUDA graph)");
  t.add("rl", "eps_low", &g.eps_low, "PPO ratio clip below 1");
  t.add("rl", "eps_high", &g.eps_high, "ratio clip above 1 (DAPO clip-higher)");
  t.add("rl", "scale_by_std", &g.scale_by_std, "divide advantages by the group std (false = Dr. GRPO)");
  t.add("rl", "adv_eps", &g.adv_eps, "added to the group std before dividing");
  t.add("rl", "loss_agg", enum_ref(&g.loss_agg, rl::kLossAggNames), "token_mean | seq_mean | constant");
  t.add("rl", "constant_normalizer", &g.constant_normalizer,
        "loss_agg = constant: tokens per sequence normalizer");
  t.add("rl", "kl_coef", &g.kl_coef, "k3 KL penalty to the frozen initial policy (0 = no reference model)");
  t.add("rl", "tis_cap", &g.tis_cap, "truncated importance sampling cap (0 = off)");
  t.add("rl", "micro_batch", &g.micro_batch, "rollouts per forward/backward");
  t.add("rl", "mask_truncated", &g.mask_truncated,
        "drop responses that hit max_new_tokens from the loss (DAPO overlong filtering)");
  t.add("rl", "max_lag", &c.rl.max_lag,
        "off-policy lag in versions: 0 = on-policy; 1 = the workers sample step s+1 at version s while the "
        "trainer takes step s (TIS corrects the gap)");
}

void optimizer_fields(FieldTable& t, Config& c) {
  // optimizer (rl::OptimizerConfig of GRPO)
  rl::OptimizerConfig& o = c.optimizer;
  t.add("optimizer", "name", &o.name, "adam | adamw");
  t.add("optimizer", "lr", &o.lr, "GRPO learning rate");
  t.add("optimizer", "beta1", &o.beta1, "Adam beta1");
  t.add("optimizer", "beta2", &o.beta2, "Adam beta2");
  t.add("optimizer", "eps", &o.eps, "Adam epsilon");
  t.add("optimizer", "weight_decay", &o.weight_decay, "decoupled weight decay (adamw)");
  t.add("optimizer", "grad_clip", &o.grad_clip, "global L2 gradient norm clip (0 = off)");
  t.add("optimizer", "schedule", enum_ref(&o.schedule, rl::kLrScheduleNames),
        "constant | linear_warmup | cosine");
  t.add("optimizer", "warmup_steps", &o.warmup_steps, "linear warmup steps");
  t.add("optimizer", "min_lr_ratio", &o.min_lr_ratio, "cosine floor as a share of lr");
}

void sync_fields(FieldTable& t, Config& c) {
  // sync (sync::PatchOptions, sync::RetentionPolicy)
  sync::PatchOptions& po = c.sync.patch;
  t.add("sync", "values", enum_ref(&po.values, kValueModeNames), "patch values: absolute | delta");
  t.add("sync", "zstd_level", &po.zstd_level, "zstd level 0..22 (0 = none)");
  t.add("sync", "anchor_every", &c.sync.retention.anchor_every, "full snapshot every N versions");
  t.add("sync", "keep_anchors", &c.sync.retention.keep_anchors, "anchors retained");
  t.add("sync", "threads", &po.threads, "codec threads (0 = all cores)");
  t.add("sync", "store_on_disk", &c.sync.store_on_disk, "keep patches/anchors under <run dir>/sync");
  t.add("sync", "dense", &c.sync.dense,
        "bench baseline: workers fetch the full anchor every version (needs anchor_every = 1)");
}

void transport_fields(FieldTable& t, Config& c) {
  // transport
  t.add("transport", "kind", enum_ref(&c.transport.kind, kTransportKindNames),
        "http: patches from the trainer's HTTP server | fs: through a shared folder (transport.dir)");
  t.add("transport", "dir", &c.transport.dir, "fs: shared patch folder; \"\" = <run dir>/patches");
  t.add("transport", "host", &c.transport.host, "trainer bind address");
  t.add("transport", "port", &c.transport.port,
        "control port of `pulse trainer` (fixed, reused by --resume); patches use port+1; 0 = free ports");
  t.add("transport", "token_env", &c.transport.token_env, "env var holding the bearer token");
  t.add("transport", "token_file", &c.transport.token_file,
        "file whose first line is the token; with neither set, `pulse run` makes a random one (its workers "
        "are in-process) and `pulse trainer` accepts anyone (with a warning)");
  t.add("transport", "tls_cert", &c.transport.tls_cert,
        "PEM certificate for TLS on the patch server (optional)");
  t.add("transport", "tls_key", &c.transport.tls_key, "PEM key for TLS on the patch server (optional)");
  t.add("transport", "max_retries", &c.transport.max_retries, "client retries with backoff");
  t.add("transport", "timeout_s", &c.transport.timeout_s, "client timeout per request (seconds)");
  t.add("transport", "lease_s", &c.transport.lease_s,
        "a worker silent this long (s; heartbeats every lease_s/3) is dropped, its prompts reassigned");
  t.add("transport", "no_worker_timeout_s", &c.transport.no_worker_timeout_s,
        "the run fails after this long (seconds) with no live worker");
  t.add("transport", "register_wait_s", &c.transport.register_wait_s,
        "how long a worker retries registering (trainer not up yet, run full), seconds");
}

void eval_fields(FieldTable& t, Config& c) {
  // eval
  t.add("eval", "max_problems", &c.eval.max_problems, "held-out problems for Pass@1 (0 = all)");
  t.add("eval", "batch_size", &c.eval.pass_at_1.batch_size, "prompts per generation batch");
  t.add("eval", "max_new_tokens", &c.eval.pass_at_1.sampling.max_new_tokens, "response length cap (tokens)");
  rl::EvalConfig& e = c.eval.pass_at_1;
  t.add("eval", "greedy", &e.greedy,
        "greedy decoding, one sample per problem (false: eval.n_samples sampled)");
  t.add("eval", "n_samples", &e.n_samples, "n: samples per problem when not greedy");
  t.add("eval", "k", &e.k, "k of pass@k (unbiased estimator, Chen et al. 2021), 1 <= k <= n_samples");
  t.add("eval", "temperature", &e.sampling.temperature, "sampling temperature when not greedy");
  t.add("eval", "top_p", &e.sampling.top_p, "nucleus mass when not greedy");
  t.add("eval", "before", &c.eval.before, "Pass@1 before GRPO (after SFT)");
  t.add("eval", "after", &c.eval.after, "Pass@1 after GRPO");
}

void run_fields(FieldTable& t, Config& c) {
  // run
  t.add("run", "name", &c.run.name, "run name (default run dir runs/<name>-<timestamp>)");
  t.add("run", "dir", &c.run.dir, "run directory; \"\" = runs/<name>-<timestamp>");
  t.add("run", "seed", &c.run.seed, "every RNG is derived from (seed, step)");
  t.add("run", "workers", &c.run.workers, "inference workers (threads in `pulse run`)");
  t.add("run", "checkpoint_every", &c.run.checkpoint_every,
        "GRPO steps between checkpoints (0 = only the last)");
  t.add("run", "threads", &c.run.threads,
        "LibTorch threads per role (0 = all cores; 1 suits a tiny model on few cores)");
  t.add("run", "device", &c.run.device,
        "cpu | cuda (cuda:LOCAL_RANK: model, SFT, GRPO, masters, workers' models; needs a CUDA LibTorch "
        "and a GPU) | auto (cuda when usable, else cpu)");
  t.add("run", "max_memory_gb", &c.run.max_memory_gb,
      "refuse a run whose estimated memory (weights, optimizer, activations, KV caches; app/memory_check.h) "
      "exceeds this many GB (1e9 bytes); 0 = only the machine's available memory");
}

void multi_fields(FieldTable& t, Config& c) {
  // multi (rl::OuterConfig)
  rl::OuterConfig& m = c.multi;
  t.add("multi", "mode", enum_ref(&m.mode, rl::kMultiModeNames),
        "single | ddp (gradient all-reduce every step) | diloco (dense FP32 pseudo-gradient every "
        "multi.inner_steps) | pulseloco (only the entries that change BF16 weights; error feedback)");
  t.add("multi", "inner_steps", &m.inner_steps, "H: local GRPO steps per outer round");
  t.add("multi", "outer_lr", &m.outer_lr, "outer Nesterov SGD learning rate");
  t.add("multi", "outer_momentum", &m.outer_momentum, "outer Nesterov momentum (0 = plain SGD)");
  t.add("multi", "gate_open", &m.gate_open, "pulseloco: every entry fires (sends what diloco sends; tests)");
  t.add("multi", "timeout_s", &m.timeout_s,
        "a collective or the rendezvous fails after this long, naming the rank");
  t.add("multi", "zstd_level", &m.zstd_level,
        "pulseloco: zstd level tried on the exchanged streams (0 = raw)");
  t.add("multi", "values", enum_ref(&m.values, sync::kLocoValuesNames),
        "pulseloco: fp32 (each fired entry's FP32 value) | ulp (a signed count of the weight's BF16 "
        "step; the remainder stays in error feedback)");
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

std::string type_name(const FieldPtr& p) {
  return std::visit(Overloaded{[](std::string*) -> std::string { return "a string"; },
                               [](bool*) -> std::string { return "a boolean (true/false)"; },
                               [](double*) -> std::string { return "a number"; },
                               [](const EnumRef& e) -> std::string {
                                 std::string list;
                                 for (const auto& n : e.names) list += (list.empty() ? "" : ", ") + n;
                                 return "one of " + list;
                               },
                               [](uint64_t*) -> std::string { return "an integer in 0..2^63-1"; },
                               [](int*) -> std::string { return "an integer in -2^31..2^31-1"; },
                               [](auto*) -> std::string { return "an integer"; }},
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
                               [&](const EnumRef& d) {
                                 auto v = node.value_exact<std::string>();
                                 return v ? d.set(*v) : false;
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
                               [&](const EnumRef& d) { return d.set(unquote(text)); },
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
                               [](const EnumRef& v) { return toml_string(v.get()); },
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
      if (!set_from_node(field->ptr, node)) {
        const auto text = node.value_exact<std::string>();
        const bool mode = std::holds_alternative<EnumRef>(field->ptr);
        throw ConfigError(where(source, node) + ": key '" + sec + "." + key + "' must be " +
                          type_name(field->ptr) + (mode && text ? " (got '" + *text + "')" : ""));
      }
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

/// The rules across sections (each section's own are its validate()). Throws std::invalid_argument
/// "KEY: PROBLEM" as the sections do (rl/setting_rules.h).
void validate_across(const Config& config) {
  using rl::rules::fail;
  if (config.rl.steps > 0 && config.rl.prompts_per_step < config.run.workers)
    fail("rl.prompts_per_step", "must be >= run.workers (" + std::to_string(config.run.workers) +
                                    ") so that every worker gets a prompt");
  if (config.optimizer.schedule == rl::LrSchedule::Cosine && config.rl.steps > 0 &&
      config.optimizer.warmup_steps >= config.rl.steps)
    fail("optimizer.warmup_steps", "must be < rl.steps for the cosine schedule");
  if (config.rl.grpo.sampling.decode == model::DecodeMode::CudaGraph && config.run.device == "cpu")
    fail("rl.decode", "= cuda_graph needs run.device = cuda (or auto on a GPU machine); the CPU decodes "
                      "eager or static");
  const auto& m = config.multi;
  if (!rl::has_outer_rounds(m.mode)) return;
  if (config.run.checkpoint_every % m.inner_steps != 0)
    fail("run.checkpoint_every", "must be a multiple of multi.inner_steps (" + std::to_string(m.inner_steps) +
                                     "): checkpoints are taken at outer-round boundaries");
  if (config.rl.steps % m.inner_steps != 0)
    fail("rl.steps", "must be a multiple of multi.inner_steps (" + std::to_string(m.inner_steps) +
                         "): a run is a whole number of outer rounds");
  if (config.rl.max_lag != 0)
    fail("rl.max_lag", std::string("must be 0 with multi.mode = ") + rl::name_of(m.mode) +
                           " (the outer round moves the weights under an in-flight generation)");
}

/// validate(), with the origin of each key the file or a --set gave: a rule's "KEY: PROBLEM" becomes
/// "ORIGIN: key 'KEY' PROBLEM", ORIGIN the file and line (or the --set) that gave KEY, else `source`.
void validate_fields(const Config& config, const std::string& source, const KeyOrigins& origins) {
  auto rule = [&](const std::function<void()>& check) {
    try {
      check();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const auto colon = what.find(": ");
      if (colon == std::string::npos) throw ConfigError(source + ": " + what);
      const std::string key = what.substr(0, colon);
      const auto at = origins.find(key);
      throw ConfigError((at != origins.end() ? at->second : source) + ": key '" + key + "' " +
                        what.substr(colon + 2));
    }
  };
  rule([&] { config.model.validate(); });
  rule([&] { config.tokenizer.validate(); });
  rule([&] { config.data.validate(); });
  rule([&] { config.sft.validate(); });
  rule([&] { config.rl.validate(); });
  rule([&] { config.optimizer.validate_settings("optimizer"); });
  rule([&] { config.sync.validate(); });
  rule([&] { config.transport.validate(); });
  rule([&] { config.eval.validate(); });
  rule([&] { config.run.validate(); });
  rule([&] { config.multi.validate(); });
  rule([&] { validate_across(config); });
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
  // rl.decode is how generation runs, for the rollouts and Pass@1 alike.
  c.eval.pass_at_1.sampling.decode = c.rl.grpo.sampling.decode;
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
