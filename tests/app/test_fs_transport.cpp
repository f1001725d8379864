// transport.kind = fs: the trainer writes every patch and anchor to a shared folder (temp name, fsync,
// rename, READY marker) and the workers replay them from there instead of fetching over HTTP.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "app/config.h"
#include "app/job.h"
#include "app/run/run_files.h"
#include "tests/app/run_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pulse::test_run;

TEST_CASE("fs transport run: workers bit-identical and the folder pruned like the store", "[app][e2e][fs]") {
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
  }
  CHECK(changed > 0);  // real updates travelled through the folder
  // The folder keeps what the HTTP version store keeps (sync.keep_anchors = 2 of the anchors 0, 2, 4, and
  // the patches after the oldest kept one), never the chain a live worker still needs (both were at
  // version 3 when version 4 was published).
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir + "/shared"))
    if (e.is_regular_file()) files.insert(e.path().filename().string());
  auto v = [](unsigned long long x) {
    char b[32];
    std::snprintf(b, sizeof b, "%020llu", x);
    return std::string(b);
  };
  const std::set<std::string> expected = {"anchor-" + v(2) + ".pulse",
                                          "anchor-" + v(2) + ".pulse.ready",
                                          "anchor-" + v(4) + ".pulse",
                                          "anchor-" + v(4) + ".pulse.ready",
                                          "patch-" + v(2) + "-" + v(3) + ".pulse",
                                          "patch-" + v(2) + "-" + v(3) + ".pulse.ready",
                                          "patch-" + v(3) + "-" + v(4) + ".pulse",
                                          "patch-" + v(3) + "-" + v(4) + ".pulse.ready"};
  CHECK(files == expected);
  // Each worker confirmed its post-apply root hash in the folder.
  CHECK(fs::exists(dir + "/shared/workers/w0.json"));
  CHECK(fs::exists(dir + "/shared/workers/w1.json"));
  fs::remove_all(dir);
}
