// Regression: `pulse sync bench --elements -5` parsed -5 as 2^64 - 5 and then hung building shapes and
// allocating; an element count that cannot fit in memory must be refused at once with a clear error.
#include <catch2/catch.hpp>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "bench/sync_bench.h"

using pulse::bench::run_sync_bench;
using pulse::bench::sync_bench_json;
using pulse::bench::SyncBenchOptions;

TEST_CASE("sync bench refuses element counts beyond physical memory", "[bench][regress]") {
  std::ostringstream log;
  SyncBenchOptions o;
  o.skip_zstd_patch_from = true;
  o.threads = 1;
  o.elements = static_cast<uint64_t>(-5);  // what "--elements -5" becomes in an unsigned parse
  CHECK_THROWS_WITH(run_sync_bench(o, log),
                    Catch::Contains("--elements 18446744073709551611") && Catch::Contains("memory"));
  o.elements = 0;
  CHECK_THROWS_AS(run_sync_bench(o, log), std::invalid_argument);
  o.elements = 4096;  // small sizes still run
  auto results = run_sync_bench(o, log);
  REQUIRE(results.size() == 1);
  CHECK(results[0].elements == 4096);
  CHECK(results[0].bit_identical);
  // Each repetition paired with its own memcpy sample: the median lies within the range of the pairs.
  const auto& r = results[0];
  CHECK(r.encode_memcpy_paired_lo > 0);
  CHECK(r.encode_memcpy_paired_lo <= r.encode_memcpy_paired);
  CHECK(r.encode_memcpy_paired <= r.encode_memcpy_paired_hi);
  CHECK(r.decode_memcpy_paired_lo > 0);
  CHECK(r.decode_memcpy_paired_lo <= r.decode_memcpy_paired);
  CHECK(r.decode_memcpy_paired <= r.decode_memcpy_paired_hi);
  // The JSON carries the same ratios, the paired spread and what ran.
  const auto j = nlohmann::json::parse(sync_bench_json(results))["synthetic"];
  CHECK(j["elements"] == 4096);
  CHECK(j["threads"] == 1);
  CHECK(j["kernels"].get<std::string>().find("diff_emit16") != std::string::npos);
  CHECK(j["encode_memcpy"].get<double>() == Approx(r.encode_gbps / r.memcpy_gbps));
  CHECK(j["encode_memcpy_paired"]["median"].get<double>() == r.encode_memcpy_paired);
  CHECK(j["decode_memcpy_paired"]["lowest"].get<double>() == r.decode_memcpy_paired_lo);
  CHECK(j["encode_known_base_gbps"].get<double>() > 0);
  // The encode's floor: memcpy CPU time (4096 BF16 elements = 8192 bytes) over hash + zstd stage.
  REQUIRE(r.hash_both_cpu_s > 0);
  REQUIRE(r.hash_target_cpu_s > 0);
  CHECK(r.floor_zstd_cpu_s >= 0);
  const double memcpy_cpu_s = 8192 / (r.memcpy_cpu_gbps * 1e9);
  CHECK(r.max_encode_memcpy_cpu == Approx(memcpy_cpu_s / (r.hash_both_cpu_s + r.floor_zstd_cpu_s)));
  CHECK(r.max_encode_known_base_memcpy_cpu ==
        Approx(memcpy_cpu_s / (r.hash_target_cpu_s + r.floor_zstd_cpu_s)));
  CHECK(j["encode_floor"]["hash_base_target_cpu_ms"].get<double>() == Approx(1e3 * r.hash_both_cpu_s));
  CHECK(j["encode_floor"]["max_encode_memcpy_cpu"].get<double>() == r.max_encode_memcpy_cpu);
  CHECK(pulse::bench::sync_bench_table(results).find("encode floor (CPU)") != std::string::npos);
  o.repeat = 0;
  CHECK_THROWS_WITH(run_sync_bench(o, log), Catch::Contains("--repeat"));
}
