// The stories260k reference fixture (../shared/models/stories260k, described in ../shared/models/SOURCES.md):
// an HF checkpoint of Karpathy's stories260K plus logits and a greedy continuation from llama2.c's C
// forward pass. Loading it REQUIREs every file: a missing or malformed fixture fails the test, never skips.
#pragma once
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sync/io/atomic_file.h"
#include "tests/test_paths.h"

namespace pulse::test {

/// What reference.json and reference_logits.f32 hold.
struct Stories260k {
  std::string dir;                           ///< the HF folder (config.json + model.safetensors)
  std::vector<int32_t> input_ids;            ///< 129 ids, one sequence at positions 0..128
  torch::Tensor logits;                      ///< [129, 512] float32, llama2.c run.c forward() on input_ids
  std::vector<int32_t> greedy_prompt;        ///< [1] (BOS)
  std::vector<int32_t> greedy_continuation;  ///< llama2.c's 40 argmax tokens after greedy_prompt
};

/// Reads the fixture from ../shared/models/stories260k; FAILs naming the file that is missing or wrong.
inline Stories260k load_stories260k() {
  Stories260k fx;
  fx.dir = shared_path("models/stories260k");
  for (const char* f : {"config.json", "model.safetensors", "reference.json", "reference_logits.f32"}) {
    const auto p = std::filesystem::path(fx.dir) / f;
    if (!std::filesystem::is_regular_file(p))
      FAIL("stories260k fixture file missing: " << p.string() << " (see ../shared/models/SOURCES.md)");
  }
  const auto ref = nlohmann::json::parse(sync::read_file(fx.dir + "/reference.json"));
  fx.input_ids = ref.at("input_ids").get<std::vector<int32_t>>();
  fx.greedy_prompt = ref.at("greedy_prompt").get<std::vector<int32_t>>();
  fx.greedy_continuation = ref.at("greedy_continuation").get<std::vector<int32_t>>();
  const auto shape = ref.at("logits_shape").get<std::vector<int64_t>>();
  REQUIRE(shape.size() == 2);
  REQUIRE(shape[0] == static_cast<int64_t>(fx.input_ids.size()));
  const std::string raw = sync::read_file(fx.dir + "/" + ref.at("logits_file").get<std::string>());
  REQUIRE(raw.size() == static_cast<size_t>(shape[0] * shape[1]) * sizeof(float));  // float32 LE, row-major
  fx.logits = torch::empty(shape, torch::kFloat32);
  std::memcpy(fx.logits.data_ptr(), raw.data(), raw.size());
  return fx;
}

}  // namespace pulse::test
