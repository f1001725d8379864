// safetensors checkpoints: pulse round trip, the reference sample files, and broken inputs.
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include <cstring>
#include <filesystem>

#include "model/checkpoint.h"
#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"
#include "tests/model/model_fixtures.h"
#include "tests/test_paths.h"

using namespace pulse::model;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("pulse_test_model_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

template <typename T>
std::vector<T> values(const pulse::sync::TensorView& tv) {
  std::vector<T> out(tv.nbytes / sizeof(T));
  std::memcpy(out.data(), tv.data, tv.nbytes);
  return out;
}

}  // namespace

TEST_CASE("save_hf_checkpoint / load_hf_model round trip is bit-exact", "[model][checkpoint]") {
  for (bool tied : {true, false}) {
    const auto dir = temp_dir(tied ? "rt_tied" : "rt_untied");
    torch::manual_seed(7);
    Transformer a(pulse::test::tiny_config("qwen2", tied), torch::kBFloat16);
    save_hf_checkpoint(*a, dir.string());
    CHECK(fs::exists(dir / "config.json"));
    auto b = load_hf_model(dir.string(), torch::kBFloat16);
    CHECK(b->config().tie_word_embeddings == tied);
    CHECK(b->config().attention_bias);
    auto pa = a->named_parameters();
    auto pb = b->named_parameters();
    REQUIRE(pa.size() == pb.size());
    for (const auto& p : pa) {
      const auto& q = pb[p.key()];
      REQUIRE(q.sizes() == p.value().sizes());
      CHECK(std::memcmp(q.data_ptr(), p.value().data_ptr(), p.value().nbytes()) == 0);
    }
    // The file holds BF16 under the HF names.
    auto ck = pulse::sync::Checkpoint::open(dir.string());
    const auto* emb = ck.find("model.embed_tokens.weight");
    REQUIRE(emb != nullptr);
    CHECK(emb->dtype == pulse::sync::DType::BF16);
    CHECK((ck.find("lm_head.weight") != nullptr) == !tied);
    // FP32 compute loads the same values exactly (BF16 -> FP32 is exact).
    auto c = load_hf_model(dir.string(), torch::kFloat32);
    CHECK(torch::equal(c->named_parameters()["model.norm.weight"].to(torch::kBFloat16),
                       pa["model.norm.weight"]));
    fs::remove_all(dir);
  }
}

TEST_CASE("safetensors sample files load with the values listed in SOURCES.md", "[model][checkpoint]") {
  auto ck = pulse::sync::Checkpoint::open(
      pulse::test::shared_path("models/safetensors-samples/overall.safetensors"));
  REQUIRE(ck.tensors().size() == 9);
  auto get = [&](const char* n) {
    const auto* t = ck.find(n);
    REQUIRE(t != nullptr);
    CHECK(t->shape == std::vector<int64_t>{6});
    return *t;
  };
  CHECK(values<uint8_t>(get("B")) == std::vector<uint8_t>{253, 254, 255, 0, 1, 2});
  CHECK(values<uint16_t>(get("H")) == std::vector<uint16_t>{65533, 65534, 65535, 0, 1, 2});
  CHECK(values<uint32_t>(get("I")) == std::vector<uint32_t>{4294967293u, 4294967294u, 4294967295u, 0, 1, 2});
  CHECK(values<int8_t>(get("b")) == std::vector<int8_t>{-3, -2, -1, 0, 1, 2});
  CHECK(values<double>(get("d")) == std::vector<double>{-3, -2, -1, 0, 1, 2});
  CHECK(values<float>(get("f")) == std::vector<float>{-3, -2, -1, 0, 1, 2});
  CHECK(values<int16_t>(get("h")) == std::vector<int16_t>{-3, -2, -1, 0, 1, 2});
  CHECK(values<int32_t>(get("i")) == std::vector<int32_t>{-3, -2, -1, 0, 1, 2});
  // F16: -3..2 as IEEE half bit patterns.
  CHECK(values<uint16_t>(get("e")) == std::vector<uint16_t>{0xC200, 0xC000, 0xBC00, 0x0000, 0x3C00, 0x4000});
  CHECK(get("e").dtype == pulse::sync::DType::F16);
  // The single-tensor files agree, including their unaligned data offsets.
  auto f =
      pulse::sync::Checkpoint::open(pulse::test::shared_path("models/safetensors-samples/f.safetensors"));
  REQUIRE(f.find("f") != nullptr);
  CHECK(values<float>(*f.find("f")) == std::vector<float>{-3, -2, -1, 0, 1, 2});
}

TEST_CASE("broken checkpoints give errors naming the file", "[model][checkpoint]") {
  const auto dir = temp_dir("broken");
  torch::manual_seed(8);
  Transformer a(pulse::test::tiny_config("llama"), torch::kBFloat16);
  save_hf_checkpoint(*a, dir.string());
  const auto file = (dir / "model.safetensors").string();
  const std::string bytes = pulse::sync::read_file(file);

  SECTION("truncated safetensors") {
    pulse::sync::write_file_atomic(file, bytes.substr(0, bytes.size() / 2));
    CHECK_THROWS_WITH(load_hf_model(dir.string()), Catch::Contains("model.safetensors"));
  }
  SECTION("config of another shape: missing and mis-shaped tensors are listed") {
    auto cfg = pulse::test::tiny_config("qwen2", false);  // adds biases and lm_head
    cfg.intermediate_size = 128;
    Transformer b(cfg, torch::kBFloat16);
    CHECK_THROWS_WITH(load_hf_weights(*b, dir.string()),
                      Catch::Contains(dir.string()) && Catch::Contains("missing") &&
                          Catch::Contains("lm_head.weight") && Catch::Contains("wrong shape") &&
                          Catch::Contains("gate_proj"));
  }
  SECTION("config.json missing a field") {
    pulse::sync::write_file_atomic(
        (dir / "config.json").string(),
        std::string(R"({"model_type": "llama", "vocab_size": 97, "hidden_size": 64})"));
    CHECK_THROWS_WITH(load_hf_model(dir.string()),
                      Catch::Contains("config.json") && Catch::Contains("intermediate_size"));
  }
  fs::remove_all(dir);
}
