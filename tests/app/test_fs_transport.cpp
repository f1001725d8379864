// transport.kind = fs: the trainer writes every patch and anchor to a shared folder (temp name, fsync,
// rename, READY marker) and the workers replay them from there instead of fetching over HTTP.
#include <catch2/catch.hpp>

#include <filesystem>

#include "app/config.h"
#include "app/job.h"
#include "app/run_files.h"
#include "tests/app/run_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pulse::test_run;

TEST_CASE("tiny pulse run over the folder transport: workers bit-identical, patches in the folder",
          "[app][e2e][fs]") {
  std::string dir = temp_dir("fs-e2e");
  std::string cfg = write_tiny_config(dir);
  CHECK_THROWS_WITH(pulse::app::load_config(cfg, {"transport.kind=ftp"}), Catch::Contains("transport.kind"));

  pulse::app::JobOptions o;
  o.config_path = cfg;
  o.overrides = {"run.dir=" + dir + "/run", "transport.kind=fs", "transport.dir=" + dir + "/shared",
                 "sync.anchor_every=2"};
  o.quiet = true;
  REQUIRE(pulse::app::run_job(o) == 0);
  json summary = pulse::app::read_json(dir + "/run/summary.json");
  CHECK(summary["bit_identical_every_step"] == true);
  auto rows = pulse::app::MetricsLog::read(dir + "/run/metrics.jsonl");
  REQUIRE(rows.size() == 4);
  uint64_t changed = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("step " << i);
    CHECK(rows[i]["bit_identical"] == true);
    CHECK(rows[i]["worker_versions"]["w0"] == static_cast<int64_t>(i + 1));  // synced after step i
    changed += rows[i]["changed"].get<uint64_t>();
    // Every one-step patch is in the folder with its READY marker.
    char name[96];
    std::snprintf(name, sizeof name, "patch-%020llu-%020llu.pulse.ready", static_cast<unsigned long long>(i),
                  static_cast<unsigned long long>(i + 1));
    CHECK(fs::exists(dir + "/shared/" + name));
  }
  CHECK(changed > 0);  // real updates travelled through the folder
  CHECK(fs::exists(dir + "/shared/anchor-00000000000000000002.pulse.ready"));
  // Each worker confirmed its post-apply root hash in the folder.
  CHECK(fs::exists(dir + "/shared/workers/w0.json"));
  CHECK(fs::exists(dir + "/shared/workers/w1.json"));
  fs::remove_all(dir);
}
