// multi.values (sync::LocoValues, rl/outer_config.h): read from TOML and --set by name, printed back by
// name, anything else refused naming the key and the allowed names.
#include <catch2/catch.hpp>

#include "app/config.h"

using pulse::app::Config;
using pulse::app::ConfigError;
using pulse::app::parse_config;
using pulse::sync::LocoValues;

TEST_CASE("multi.values: fp32 by default, ulp from TOML or --set, printed by name", "[app][config]") {
  CHECK(Config{}.multi.values == LocoValues::Fp32);
  const Config from_file = parse_config("[multi]\nmode = \"pulseloco\"\nvalues = \"ulp\"\n", "x.toml");
  CHECK(from_file.multi.values == LocoValues::Ulp);
  CHECK(pulse::app::to_toml(from_file).find("values = \"ulp\"") != std::string::npos);
  const Config from_set = parse_config("", "x.toml", {"multi.values=ulp"});
  CHECK(from_set.multi.values == LocoValues::Ulp);
  CHECK(parse_config("", "x.toml", {"multi.values=\"fp32\""}).multi.values == LocoValues::Fp32);
  CHECK_THROWS_WITH(parse_config("[multi]\nvalues = \"bf16\"\n", "x.toml"),
                    Catch::Contains("multi.values") && Catch::Contains("one of fp32, ulp"));
  CHECK_THROWS_WITH(parse_config("", "x.toml", {"multi.values=3"}),
                    Catch::Contains("multi.values") && Catch::Contains("one of fp32, ulp"));
}
