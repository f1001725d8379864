// HF config.json parsing for the Llama, Qwen2 and Mistral families.
#include "tests/torch_catch.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "model/chat_template.h"
#include "model/config.h"
#include "model/default_config.h"
#include "model/model_size.h"
#include "model/transformer.h"
#include "sync/io/atomic_file.h"
#include "tests/test_paths.h"

using pulse::model::ModelConfig;

namespace {
ModelConfig parse(const std::string& text) {
  return ModelConfig::from_hf_json_text(text, "test-config.json");
}
}  // namespace

TEST_CASE("Qwen2.5-0.5B style config.json", "[model][config]") {
  const auto c = parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936,
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": false,
    "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16"})");
  CHECK(c.head_dim == 64);
  CHECK(c.attention_bias);
  CHECK(c.tie_word_embeddings);
  CHECK(c.sliding_window == 0);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.num_key_value_heads == 2);
  // to_hf_json reads back to the same config.
  const auto d = parse(c.to_hf_json());
  CHECK(d.hidden_size == 896);
  CHECK(d.vocab_size == 151936);
  CHECK(d.attention_bias);
  CHECK(d.rope_theta == 1e6);
}

TEST_CASE("Llama 3.1 rope scaling and rope_parameters", "[model][config]") {
  const auto c = parse(R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "rope_theta": 500000.0, "eos_token_id": [128001, 128008, 128009],
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  CHECK(c.rope_scaling.factor == 32.0);
  CHECK(c.eos_token_id == 128001);
  CHECK_FALSE(c.attention_bias);
  // llama3 rule: the highest frequency is kept, the lowest divided by factor.
  auto base = c;
  base.rope_scaling.factor = 0;
  auto f = pulse::model::rope_inv_freq(c), f0 = pulse::model::rope_inv_freq(base);
  CHECK(f[0].item<float>() == f0[0].item<float>());
  CHECK(f[-1].item<float>() == Approx(f0[-1].item<float>() / 32.0));
  const auto r = parse(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 2, "rope_parameters": {"rope_type": "default", "rope_theta": 123.0}})");
  CHECK(r.rope_theta == 123.0);
  CHECK(r.num_key_value_heads == 2);
}

TEST_CASE("unsupported or incomplete configs are rejected naming the field", "[model][config]") {
  const std::string base =
      R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2)";
  CHECK_THROWS_WITH(parse(R"({"model_type": "gpt2", )" + base + "}"), Catch::Contains("gpt2"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "vocab_size": 10})"),
                    Catch::Contains("test-config.json") && Catch::Contains("hidden_size"));
  CHECK_THROWS_WITH(
      parse(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4}, )" + base + "}"),
      Catch::Contains("yarn"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "hidden_act": "gelu", )" + base + "}"),
                    Catch::Contains("gelu"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "num_key_value_heads": 3, )" + base + "}"),
                    Catch::Contains("num_key_value_heads"));
  CHECK_THROWS_WITH(parse("{not json"), Catch::Contains("test-config.json"));
  CHECK_THROWS_WITH(ModelConfig::from_hf_json("/nonexistent/pulse/config.json"),
                    Catch::Contains("/nonexistent/pulse"));
  {
    // A config.json of 17 MiB is refused by its size before it is read.
    const auto big = std::filesystem::temp_directory_path() /
                     ("pulse_test_big_config_" + std::to_string(::getpid()) + ".json");
    std::ofstream(big) << std::string(17u << 20, ' ');
    CHECK_THROWS_WITH(
        ModelConfig::from_hf_json(big.string()),
        Catch::StartsWith(big.string() +
                          ": is 17825792 bytes; a model config.json is at most 16777216 bytes"));
    std::filesystem::remove(big);
  }
  const auto m = parse(R"({"model_type": "mistral", "sliding_window": 4096, )" + base + "}");
  CHECK(m.sliding_window == 4096);
}

namespace {
/// A valid small Llama config.json with `extra` fields merged over it (a later key wins in nlohmann).
std::string small_config(const std::string& extra) {
  return R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1,
    "eos_token_id": 2)" +
         (extra.empty() ? std::string() : ", " + extra) + "}";
}
/// The message of parsing small_config(extra) ("" when it parses).
std::string refusal(const std::string& extra) {
  try {
    parse(small_config(extra));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("model config values that make NaNs or no model are refused naming file and field",
          "[model][config]") {
  // rms_norm_eps = -1 and rope_theta = 0 used to run SFT and fail after it ("sampler_logprobs ... is null"),
  // max_position_embeddings = -5 at step 0.
  CHECK(refusal("").empty());
  const std::pair<const char*, const char*> bad[] = {
      {R"("rms_norm_eps": -1)", "field \"rms_norm_eps\" must be a finite number > 0, got -1"},
      {R"("rms_norm_eps": 0)", "field \"rms_norm_eps\" must be a finite number > 0, got 0"},
      {R"("rope_theta": 0)", "field \"rope_theta\" must be a finite number > 0, got 0"},
      {R"("rope_theta": -10000.0)", "field \"rope_theta\" must be a finite number > 0"},
      {R"("max_position_embeddings": -5)", "field \"max_position_embeddings\" must be >= 1, got -5"},
      {R"("max_position_embeddings": 0)", "field \"max_position_embeddings\" must be >= 1, got 0"},
      {R"("vocab_size": 0)", "field \"vocab_size\" must be >= 1, got 0"},
      {R"("hidden_size": -32)", "field \"hidden_size\" must be >= 1, got -32"},
      {R"("intermediate_size": 0)", "field \"intermediate_size\" must be >= 1"},
      {R"("num_hidden_layers": 0)", "field \"num_hidden_layers\" must be >= 1"},
      {R"("num_hidden_layers": 4294967296)", "field \"num_hidden_layers\" must be <= 2147483648"},
      {R"("num_attention_heads": 0)", "field \"num_attention_heads\" must be >= 1"},
      {R"("num_key_value_heads": 0)", "field \"num_key_value_heads\" must be >= 1"},
      {R"("num_key_value_heads": 3)",
       "num_attention_heads (4) must be a multiple of num_key_value_heads (3)"},
      {R"("hidden_size": 30)", "hidden_size (30) must be a multiple of num_attention_heads (4)"},
      {R"("head_dim": 7)", "head_dim must be even"},
      {R"("head_dim": -8)", "field \"head_dim\" must be >= 1"},
      {R"("bos_token_id": 64)", "field \"bos_token_id\" must be <= 63, got 64"},
      {R"("eos_token_id": [2, -3])", "field \"eos_token_id[1]\" must be >= 0, got -3"},
      {R"("vocab_size": 18446744073709551615)", "field \"vocab_size\" = 18446744073709551615 is too large"},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": 0})",
       "field \"factor\" must be a finite number > 0"},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4})",
       "rope_scaling.high_freq_factor must be > low_freq_factor"},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 0})",
       "field \"original_max_position_embeddings\" must be >= 1"},
  };
  for (const auto& [extra, message] : bad) {
    INFO(extra);
    const std::string what = refusal(extra);
    CHECK_THAT(what, Catch::StartsWith("test-config.json: ") && Catch::Contains(message));
  }
}

TEST_CASE("model config type errors name file and field, not only nlohmann's type_error", "[model][config]") {
  // "architectures": [5] and "tie_word_embeddings": "yes" gave only "[json.exception.type_error.302] type
  // must be string".
  const std::pair<const char*, const char*> bad[] = {
      {R"("architectures": [5])", "field \"architectures[0]\" must be a string, got a number (5)"},
      {R"("architectures": "LlamaForCausalLM")", "field \"architectures\" must be a list of strings"},
      {R"("tie_word_embeddings": "yes")",
       "field \"tie_word_embeddings\" must be true or false, got a string"},
      {R"("attention_bias": 1)", "field \"attention_bias\" must be true or false, got a number"},
      {R"("mlp_bias": "false")", "field \"mlp_bias\" must be true or false"},
      {R"("use_sliding_window": null, "sliding_window": "4096")",
       "field \"sliding_window\" must be an integer"},
      {R"("hidden_act": 3)", "field \"hidden_act\" must be a string, got a number"},
      {R"("model_type": ["llama"])", "field \"model_type\" must be a string, got an array"},
      {R"("torch_dtype": false)", "field \"torch_dtype\" must be a string, got a boolean"},
      {R"("hidden_size": 32.0)", "field \"hidden_size\" must be an integer, got a floating-point number"},
      {R"("num_hidden_layers": "2")", "field \"num_hidden_layers\" must be an integer, got a string"},
      {R"("rms_norm_eps": "1e-5")", "field \"rms_norm_eps\" must be a number, got a string"},
      {R"("rope_theta": null, "rope_scaling": "llama3")", "field \"rope_scaling\" must be an object or null"},
      {R"("rope_scaling": {"rope_type": 3, "factor": 2})", "field \"rope_type\" must be a string"},
      {R"("eos_token_id": ["2"])", "field \"eos_token_id[0]\" must be an integer, got a string"},
      {R"("bos_token_id": true)", "field \"bos_token_id\" must be an integer or a list of integers"},
  };
  for (const auto& [extra, message] : bad) {
    INFO(extra);
    const std::string what = refusal(extra);
    CHECK_THAT(what, Catch::StartsWith("test-config.json: ") && Catch::Contains(message));
    CHECK_THAT(what, !Catch::Contains("json.exception"));
  }
}

TEST_CASE("embedded default model equals configs/tiny-llama.json", "[model][config]") {
  CHECK(pulse::model::tiny_llama_config_json() ==
        pulse::sync::read_file(pulse::test::source_path("configs/tiny-llama.json")));
  const auto c = pulse::model::tiny_llama_config();
  CHECK(c.model_type == "llama");
  CHECK(c.tie_word_embeddings);
  CHECK(c.num_key_value_heads < c.num_attention_heads);
  pulse::model::Transformer m(c, torch::kFloat32);
  CHECK(m->num_parameters() > 2'000'000);
  CHECK(m->num_parameters() < 10'000'000);
}

TEST_CASE("model::parameter_count counts what the Transformer builds", "[model][config]") {
  // Llama (tied, GQA), Qwen2 (q/k/v bias), untied lm_head: the count without building equals the built one.
  for (const char* text : {
           R"({"model_type": "llama", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "tie_word_embeddings": true})",
           R"({"model_type": "qwen2", "vocab_size": 301, "hidden_size": 48, "intermediate_size": 80,
               "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2,
               "tie_word_embeddings": true})",
           R"({"model_type": "qwen2", "vocab_size": 257, "hidden_size": 64, "intermediate_size": 72,
               "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 32,
               "tie_word_embeddings": false})"}) {
    const auto c = parse(text);
    pulse::model::Transformer m(c, torch::kFloat32);
    INFO(text);
    CHECK(pulse::model::parameter_count(c) == m->num_parameters());
  }
}

TEST_CASE("configs/qwen2.5-*.json have the Qwen2.5 shapes and parameter counts", "[model][config]") {
  // The published sizes: 0.5B 494,032,768 and 1.5B 1,543,714,304 (tied), 7B 7,615,616,512 (untied).
  const auto half = ModelConfig::from_hf_json(pulse::test::source_path("configs/qwen2.5-0.5b.json"));
  CHECK(half.model_type == "qwen2");
  CHECK(half.vocab_size == 151936);
  CHECK(half.hidden_size == 896);
  CHECK(half.num_hidden_layers == 24);
  CHECK(half.num_attention_heads == 14);
  CHECK(half.num_key_value_heads == 2);
  CHECK(half.intermediate_size == 4864);
  CHECK(half.head_dim == 64);
  CHECK(half.rope_theta == 1e6);
  CHECK(half.tie_word_embeddings);
  CHECK(half.attention_bias);
  CHECK(pulse::model::parameter_count(half) == 494'032'768);
  CHECK(pulse::model::parameter_count(ModelConfig::from_hf_json(
            pulse::test::source_path("configs/qwen2.5-1.5b.json"))) == 1'543'714'304);
  const auto seven = ModelConfig::from_hf_json(pulse::test::source_path("configs/qwen2.5-7b.json"));
  CHECK(seven.vocab_size == 152064);
  CHECK(seven.hidden_size == 3584);
  CHECK(seven.num_key_value_heads == 4);
  CHECK_FALSE(seven.tie_word_embeddings);
  CHECK(pulse::model::parameter_count(seven) == 7'615'616'512);
}

TEST_CASE("prompt templates render placeholders and presets", "[model][template]") {
  pulse::model::PromptTemplate t;
  t.format = "Q: {question}\nA: {{answer}}";
  CHECK(t.render("1+{x}?") == "Q: 1+{x}?\nA: {answer}");
  t.format = "{nope}";
  CHECK_THROWS_WITH(t.render("x"), Catch::Contains("{nope}"));
  const auto chatml = pulse::model::PromptTemplate::preset("chatml").render("hi");
  CHECK(chatml ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n");
  CHECK(pulse::model::PromptTemplate::preset("plain").render("x") == "x");
  CHECK_THROWS_WITH(pulse::model::PromptTemplate::preset("jinja"), Catch::Contains("chatml"));
}
