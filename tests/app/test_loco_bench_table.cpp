// bench/loco_bench.h: the side-by-side table and JSON say "not applicable" for what a mode does not have
// (DDP has no gate, so no fired fraction; a run without evaluation has no Pass@1) instead of a 0 that
// reads as measured.
#include <catch2/catch.hpp>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/loco_bench.h"

using pulse::bench::LocoModeResult;

TEST_CASE("loco bench: ddp's fired fraction is not applicable, not 0", "[bench][loco]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<LocoModeResult> modes(2);
  modes[0].mode = "ddp";
  modes[0].fired_fraction = nan;
  modes[0].payload_bytes = 2'000'000;
  modes[1].mode = "pulseloco";
  modes[1].fired_fraction = 0.041;
  modes[1].payload_bytes = 10'000;
  modes[1].rounds = 2;
  for (auto& m : modes) m.world_size = 2, m.steps = 4;
  const std::string table = pulse::bench::loco_table(modes, 2, 1e-6);
  INFO(table);
  CHECK(table.find("0.0410") != std::string::npos);
  const size_t ddp_row = table.find("\nddp ");
  REQUIRE(ddp_row != std::string::npos);
  const std::string row = table.substr(ddp_row + 1, table.find('\n', ddp_row + 1) - ddp_row - 1);
  CHECK(row.find(" - ") != std::string::npos);
  CHECK(row.find("0.0000") == std::string::npos);
  const auto j = nlohmann::json::parse(pulse::bench::loco_json(modes, 2, 1e-6));
  CHECK(j["fired_fraction"]["ddp"].is_null());
  CHECK(j["fired_fraction"]["pulseloco"].get<double>() == Approx(0.041));
}
