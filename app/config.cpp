// One table of fields (section, key, pointer, doc, range) drives parsing, --set, validation and printing,
// so that a field cannot be read without being validated or printed.
#include "app/config.h"

#include "model/chat_template.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <variant>

namespace pulse::app {
namespace {

using FieldPtr = std::variant<std::string*, int64_t*, double*, bool*>;

/// One TOML field. `check` returns "" when the value is fine, else what is wrong ("must be >= 1").
struct Field {
  std::string section, key, doc;
  FieldPtr ptr;
  std::function<std::string()> check;
};

std::function<std::string()> int_range(const int64_t* v, int64_t lo, int64_t hi) {
  return [v, lo, hi]() -> std::string {
    if (*v < lo) return "must be >= " + std::to_string(lo) + " (got " + std::to_string(*v) + ")";
    if (*v > hi) return "must be <= " + std::to_string(hi) + " (got " + std::to_string(*v) + ")";
    return "";
  };
}

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

std::vector<Field> fields(Config& c) {
  std::vector<Field> f;
  auto add = [&](const char* s, const char* k, FieldPtr p, const char* doc,
                 std::function<std::string()> chk) {
    f.push_back(Field{s, k, doc, p, std::move(chk)});
  };
  // model
  add("model", "config", &c.model.config,
      "HF config.json of a fresh model; \"\" = the embedded tiny Llama (configs/tiny-llama.json)", any());
  add("model", "path", &c.model.path, "HF checkpoint folder to start from; \"\" = seeded init from config",
      any());
  add("model", "dtype", &c.model.dtype, "compute dtype: bfloat16 | float32 (weights always hold BF16 values)",
      one_of(&c.model.dtype, {"bfloat16", "float32"}));
  // tokenizer
  add("tokenizer", "path", &c.tokenizer.path,
      "tokenizer file or folder; \"\" = train SentencePiece BPE into <run dir>/tokenizer.model", any());
  add("tokenizer", "vocab_size", &c.tokenizer.vocab_size, "pieces of the trained tokenizer (path = \"\")",
      int_range(&c.tokenizer.vocab_size, 64, 1 << 20));
  add("tokenizer", "chat_template", &c.tokenizer.chat_template,
      "prompt template preset: plain | chatml | llama2 (model/chat_template.h)",
      one_of(&c.tokenizer.chat_template, model::PromptTemplate::preset_names()));
  // data
  add("data", "task", &c.data.task, "synthetic_math | synthetic_code | math | mbpp | gsm8k",
      one_of(&c.data.task, {"synthetic_math", "synthetic_code", "math", "mbpp", "gsm8k"}));
  add("data", "path", &c.data.path, "train jsonl for math | mbpp | gsm8k", any());
  add("data", "eval_path", &c.data.eval_path, "held-out jsonl; \"\" = split from the train problems", any());
  add("data", "n_problems", &c.data.n_problems, "synthetic problems generated (train + held-out)",
      int_range(&c.data.n_problems, 2, 10'000'000));
  add("data", "max_level", &c.data.max_level, "synthetic difficulty 1..5",
      int_range(&c.data.max_level, 1, 5));
  add("data", "held_out_fraction", &c.data.held_out_fraction, "share kept for Pass@1 (when eval_path = \"\")",
      real_range(&c.data.held_out_fraction, 0.0, 0.9, true));
  add("data", "seed", &c.data.seed, "problem generation and split seed", int_range(&c.data.seed, 0, kMaxI));
  // sft
  add("sft", "steps", &c.sft.steps, "SFT warm-start optimizer steps (0 = none)",
      int_range(&c.sft.steps, 0, kMaxI));
  add("sft", "batch_size", &c.sft.batch_size, "sequences per SFT step",
      int_range(&c.sft.batch_size, 1, 1 << 20));
  add("sft", "max_len", &c.sft.max_len, "tokens per SFT sequence (prompt + target)",
      int_range(&c.sft.max_len, 8, 1 << 20));
  add("sft", "lr", &c.sft.lr, "SFT learning rate (AdamW, cosine to 10% after warmup)",
      real_range(&c.sft.lr, 0.0, 1.0, true));
  add("sft", "warmup_steps", &c.sft.warmup_steps, "SFT linear warmup steps",
      int_range(&c.sft.warmup_steps, 0, kMaxI));
  // rl
  add("rl", "steps", &c.rl.steps, "GRPO steps", int_range(&c.rl.steps, 0, kMaxI));
  add("rl", "prompts_per_step", &c.rl.prompts_per_step, "prompts per step, split among the workers",
      int_range(&c.rl.prompts_per_step, 1, 1 << 20));
  add("rl", "group_size", &c.rl.group_size, "G: rollouts per prompt",
      int_range(&c.rl.group_size, 2, 1 << 16));
  add("rl", "max_new_tokens", &c.rl.max_new_tokens, "response length cap (tokens)",
      int_range(&c.rl.max_new_tokens, 1, 1 << 20));
  add("rl", "temperature", &c.rl.temperature, "sampling temperature",
      real_range(&c.rl.temperature, 0.0, 100.0, true));
  add("rl", "top_p", &c.rl.top_p, "nucleus sampling mass", real_range(&c.rl.top_p, 0.0, 1.0, true));
  add("rl", "top_k", &c.rl.top_k, "top-k sampling (0 = off)", int_range(&c.rl.top_k, 0, 1 << 24));
  add("rl", "eps_low", &c.rl.eps_low, "PPO ratio clip below 1", real_range(&c.rl.eps_low, 0.0, 1.0));
  add("rl", "eps_high", &c.rl.eps_high, "ratio clip above 1 (DAPO clip-higher)",
      real_range(&c.rl.eps_high, 0.0, 10.0));
  add("rl", "scale_by_std", &c.rl.scale_by_std, "divide advantages by the group std (false = Dr. GRPO)",
      any());
  add("rl", "loss_agg", &c.rl.loss_agg, "token_mean | seq_mean | constant",
      one_of(&c.rl.loss_agg, {"token_mean", "seq_mean", "constant"}));
  add("rl", "kl_coef", &c.rl.kl_coef, "KL penalty to the initial policy (0 = no reference model)",
      real_range(&c.rl.kl_coef, 0.0, 100.0));
  add("rl", "tis_cap", &c.rl.tis_cap, "truncated importance sampling cap (0 = off)",
      real_range(&c.rl.tis_cap, 0.0, 1e6));
  add("rl", "micro_batch", &c.rl.micro_batch, "rollouts per forward/backward",
      int_range(&c.rl.micro_batch, 1, 1 << 20));
  add("rl", "max_lag", &c.rl.max_lag,
      "off-policy lag in versions: 0 = on-policy; 1 = the workers sample step s+1 at version s while the "
      "trainer takes step s (TIS corrects the gap)",
      int_range(&c.rl.max_lag, 0, 1));
  // optimizer
  add("optimizer", "name", &c.optimizer.name, "adam | adamw", one_of(&c.optimizer.name, {"adam", "adamw"}));
  add("optimizer", "lr", &c.optimizer.lr, "GRPO learning rate", real_range(&c.optimizer.lr, 0.0, 1.0, true));
  add("optimizer", "beta1", &c.optimizer.beta1, "Adam beta1", real_range(&c.optimizer.beta1, 0.0, 0.999999));
  add("optimizer", "beta2", &c.optimizer.beta2, "Adam beta2",
      real_range(&c.optimizer.beta2, 0.0, 0.999999999));
  add("optimizer", "eps", &c.optimizer.eps, "Adam epsilon", real_range(&c.optimizer.eps, 0.0, 1.0, true));
  add("optimizer", "weight_decay", &c.optimizer.weight_decay, "decoupled weight decay (adamw)",
      real_range(&c.optimizer.weight_decay, 0.0, 1.0));
  add("optimizer", "grad_clip", &c.optimizer.grad_clip, "global L2 gradient norm clip (0 = off)",
      real_range(&c.optimizer.grad_clip, 0.0, 1e9));
  add("optimizer", "schedule", &c.optimizer.schedule, "constant | linear_warmup | cosine",
      one_of(&c.optimizer.schedule, {"constant", "linear_warmup", "cosine"}));
  add("optimizer", "warmup_steps", &c.optimizer.warmup_steps, "linear warmup steps",
      int_range(&c.optimizer.warmup_steps, 0, kMaxI));
  add("optimizer", "min_lr_ratio", &c.optimizer.min_lr_ratio, "cosine floor as a share of lr",
      real_range(&c.optimizer.min_lr_ratio, 0.0, 1.0));
  // sync
  add("sync", "values", &c.sync.values, "patch values: absolute | delta",
      one_of(&c.sync.values, {"absolute", "delta"}));
  add("sync", "zstd_level", &c.sync.zstd_level, "zstd level 0..22 (0 = none)",
      int_range(&c.sync.zstd_level, 0, 22));
  add("sync", "anchor_every", &c.sync.anchor_every, "full snapshot every N versions",
      int_range(&c.sync.anchor_every, 1, kMaxI));
  add("sync", "keep_anchors", &c.sync.keep_anchors, "anchors retained",
      int_range(&c.sync.keep_anchors, 1, 1 << 20));
  add("sync", "threads", &c.sync.threads, "codec threads (0 = all cores)",
      int_range(&c.sync.threads, 0, 1024));
  add("sync", "store_on_disk", &c.sync.store_on_disk, "keep patches/anchors under <run dir>/sync", any());
  // transport
  add("transport", "kind", &c.transport.kind,
      "http: patches from the trainer's HTTP server | fs: through a shared folder (transport.dir)",
      one_of(&c.transport.kind, {"http", "fs"}));
  add("transport", "dir", &c.transport.dir, "fs: shared patch folder; \"\" = <run dir>/patches", any());
  add("transport", "host", &c.transport.host, "trainer bind address", any());
  add("transport", "port", &c.transport.port, "control port (0 = a free one); patches use a second free port",
      int_range(&c.transport.port, 0, 65535));
  add("transport", "token_env", &c.transport.token_env, "env var holding the bearer token", any());
  add("transport", "token_file", &c.transport.token_file,
      "file holding the token; none = a random token per run", any());
  add("transport", "tls_cert", &c.transport.tls_cert,
      "PEM certificate for TLS on the patch server (optional)", any());
  add("transport", "tls_key", &c.transport.tls_key, "PEM key for TLS on the patch server (optional)", any());
  add("transport", "max_retries", &c.transport.max_retries, "client retries with backoff",
      int_range(&c.transport.max_retries, 0, 1000));
  add("transport", "timeout_s", &c.transport.timeout_s, "client timeout per request (seconds)",
      real_range(&c.transport.timeout_s, 0.0, 86400.0, true));
  // eval
  add("eval", "max_problems", &c.eval.max_problems, "held-out problems for Pass@1 (0 = all)",
      int_range(&c.eval.max_problems, 0, kMaxI));
  add("eval", "batch_size", &c.eval.batch_size, "prompts per generation batch",
      int_range(&c.eval.batch_size, 1, 1 << 20));
  add("eval", "max_new_tokens", &c.eval.max_new_tokens, "response length cap (tokens)",
      int_range(&c.eval.max_new_tokens, 1, 1 << 20));
  add("eval", "before", &c.eval.before, "Pass@1 before GRPO (after SFT)", any());
  add("eval", "after", &c.eval.after, "Pass@1 after GRPO", any());
  // run
  add("run", "name", &c.run.name, "run name (default run dir runs/<name>-<timestamp>)",
      [&c]() -> std::string {
        if (c.run.name.empty()) return "must not be empty";
        if (c.run.name.find('/') != std::string::npos) return "must not contain '/'";
        return "";
      });
  add("run", "dir", &c.run.dir, "run directory; \"\" = runs/<name>-<timestamp>", any());
  add("run", "seed", &c.run.seed, "every RNG is derived from (seed, step)", int_range(&c.run.seed, 0, kMaxI));
  add("run", "workers", &c.run.workers, "inference workers (threads in `pulse run`)",
      int_range(&c.run.workers, 1, 256));
  add("run", "checkpoint_every", &c.run.checkpoint_every,
      "GRPO steps between checkpoints (0 = only the last)", int_range(&c.run.checkpoint_every, 0, kMaxI));
  add("run", "threads", &c.run.threads,
      "LibTorch threads per role (0 = all cores; 1 suits a tiny model on few cores)",
      int_range(&c.run.threads, 0, 1024));
  return f;
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
  return {"model", "tokenizer", "data", "sft", "rl", "optimizer", "sync", "transport", "eval", "run"};
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
  switch (p.index()) {
    case 0:
      return "a string";
    case 1:
      return "an integer";
    case 2:
      return "a number";
    default:
      return "a boolean (true/false)";
  }
}

std::string where(const std::string& source, const toml::node& node) {
  auto line = node.source().begin.line;
  return line > 0 ? source + ":" + std::to_string(line) : source;
}

/// Sets a field from a TOML node; returns false on a type mismatch.
bool set_from_node(const FieldPtr& p, const toml::node& node) {
  switch (p.index()) {
    case 0:
      if (auto v = node.value_exact<std::string>()) return *std::get<0>(p) = *v, true;
      return false;
    case 1:
      if (auto v = node.value_exact<int64_t>()) return *std::get<1>(p) = *v, true;
      return false;
    case 2:
      if (auto v = node.value_exact<double>()) return *std::get<2>(p) = *v, true;
      if (auto v = node.value_exact<int64_t>()) return *std::get<2>(p) = static_cast<double>(*v), true;
      return false;
    default:
      if (auto v = node.value_exact<bool>()) return *std::get<3>(p) = *v, true;
      return false;
  }
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
  switch (p.index()) {
    case 0:
      if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front())
        text = text.substr(1, text.size() - 2);
      *std::get<0>(p) = text;
      return true;
    case 1: {
      if (text.empty()) return false;
      size_t used = 0;
      try {
        int64_t v = std::stoll(text, &used);
        if (used != text.size()) return false;
        *std::get<1>(p) = v;
        return true;
      } catch (const std::exception&) {
        return false;
      }
    }
    case 2: {
      if (text.empty()) return false;
      size_t used = 0;
      try {
        double v = std::stod(text, &used);
        if (used != text.size()) return false;
        *std::get<2>(p) = v;
        return true;
      } catch (const std::exception&) {
        return false;
      }
    }
    default:
      if (text == "true") return *std::get<3>(p) = true, true;
      if (text == "false") return *std::get<3>(p) = false, true;
      return false;
  }
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
  switch (p.index()) {
    case 0:
      return toml_string(*std::get<0>(p));
    case 1:
      return std::to_string(*std::get<1>(p));
    case 2:
      return fmt_double(*std::get<2>(p));
    default:
      return *std::get<3>(p) ? "true" : "false";
  }
}

void apply_table(Config& config, const toml::table& root, const std::string& source) {
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

void validate(const Config& config_in, const std::string& source) {
  Config config = config_in;  // fields() needs mutable pointers; checks only read
  for (const auto& field : fields(config)) {
    std::string problem = field.check();
    if (!problem.empty())
      throw ConfigError(source + ": key '" + field.section + "." + field.key + "' " + problem);
  }
  const auto& d = config.data;
  bool real = d.task == "math" || d.task == "mbpp" || d.task == "gsm8k";
  if (real && d.path.empty() && d.eval_path.empty())
    throw ConfigError(source + ": key 'data.path' must name a jsonl file for task '" + d.task + "'");
  if (config.rl.steps > 0 && config.rl.prompts_per_step < config.run.workers)
    throw ConfigError(source + ": key 'rl.prompts_per_step' must be >= run.workers (" +
                      std::to_string(config.run.workers) + ") so that every worker gets a prompt");
  if (config.sft.steps > 0 && config.sft.warmup_steps >= config.sft.steps)
    throw ConfigError(source + ": key 'sft.warmup_steps' must be < sft.steps (" +
                      std::to_string(config.sft.steps) + ") (the SFT schedule is cosine after warmup)");
  if (config.optimizer.schedule == "cosine" && config.rl.steps > 0 &&
      config.optimizer.warmup_steps >= config.rl.steps)
    throw ConfigError(source + ": key 'optimizer.warmup_steps' must be < rl.steps for the cosine schedule");
  if (!config.transport.tls_cert.empty() != !config.transport.tls_key.empty())
    throw ConfigError(source + ": keys 'transport.tls_cert' and 'transport.tls_key' must be set together");
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
  apply_table(config, root, source_name);
  for (const auto& o : overrides) apply_override(config, o);
  validate(config, overrides.empty() ? source_name : source_name + " (with --set)");
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
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
