// The model-shaped sync stages of `pulse bench kernels --model qwen2.5-7b` (bench/kernels/model_stages.h):
// the tensor set has Qwen2.5-7B's 339 tensors and 7.6 G elements at scale 1; at scale 64 the CPU stages
// run end to end (cast, diff + compaction, hash, entropy, apply, verify), the applied weights equal the
// targets, ~1% changed, and every stage is printed.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "bench/kernels/kernels_report.h"
#include "bench/kernels/model_shapes.h"
#include "bench/kernels/model_stages.h"

using namespace pulse::bench;

TEST_CASE("qwen2.5-7b shapes: 339 tensors, 7.6 G elements, and a scale divides the sizes", "[bench][model]") {
  const auto full = qwen25_7b_shapes(1);
  uint64_t total = 0;
  for (const auto& t : full) total += t.elements();
  CHECK(full.size() == 339);
  CHECK(total == 7615616512ull);
  CHECK(full.front().name == "model.embed_tokens.weight");
  CHECK(full.front().rows == 152064);
  CHECK(full.front().cols == 3584);
  const auto tiny = qwen25_7b_shapes(64);
  CHECK(tiny.size() == 339);
  CHECK(tiny.front().rows == 2376);
  CHECK(tiny.front().cols == 56);
  CHECK_THROWS_AS(qwen25_7b_shapes(0), std::invalid_argument);
}

TEST_CASE("model stages on the CPU at scale 64: every stage runs, the applied weights equal the targets",
          "[bench][model]") {
  ModelStagesOptions o;
  o.scale = 64;
  o.reps = 1;
  o.pattern = 1 << 16;
  const nlohmann::json r = run_model_stages_cpu(o);
  CHECK(r["matches"].get<bool>());
  CHECK(r["tensors"].get<uint64_t>() == 339);
  const double pct = r["changed_pct"].get<double>();
  CHECK(pct > 0.8);
  CHECK(pct < 1.2);
  REQUIRE(r["stages"].size() == 6);
  for (const auto& s : r["stages"]) CHECK(s["ms"].get<double>() > 0.0);
  CHECK(r["compressed_bytes"].get<uint64_t>() > 0);
  CHECK(r["compressed_bytes"].get<uint64_t>() < r["stream_bytes"].get<uint64_t>());

  KernelsBenchOptions k;
  k.cpu = false;
  k.gpu = false;
  k.model = "qwen2.5-7b";
  k.model_scale = 64;
  k.reps = 1;
  const auto all = run_kernels_bench(k);
  const std::string table = kernels_bench_table(all);
  CHECK_THAT(table, Catch::Contains("verify (tree hash of the weights)") &&
                        Catch::Contains("extract + encode") && Catch::Contains("model stages, gpu: not run"));
  k.model = "llama";
  CHECK_THROWS_AS(run_kernels_bench(k), std::invalid_argument);
}
