// Run directory files: metrics log (torn last line, truncation for resume), summary keys, report.html.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "app/run/report.h"
#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
std::string temp_dir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("pulse-test-app-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}
}  // namespace

TEST_CASE("metrics log drops a torn last line and truncates for resume", "[app][run_files]") {
  std::string dir = temp_dir("metrics");
  std::string path = dir + "/metrics.jsonl";
  pulse::app::MetricsLog log(path);
  for (int s = 0; s < 4; ++s) log.append(json{{"step", s}, {"reward_mean", 0.1 * s}});
  {
    std::ofstream out(path, std::ios::app);
    out << "{\"step\": 4, \"rew";  // a kill -9 in the middle of a write
  }
  auto rows = pulse::app::MetricsLog::read(path);
  REQUIRE(rows.size() == 4);
  CHECK(rows[3]["reward_mean"].get<double>() == Approx(0.3));
  pulse::app::MetricsLog::truncate_before_step(path, 2);
  rows = pulse::app::MetricsLog::read(path);
  REQUIRE(rows.size() == 2);
  CHECK(rows[1]["step"] == 1);
  // A log without a row for every step before the resume point is refused, and left as it was.
  CHECK_THROWS_WITH(pulse::app::MetricsLog::truncate_before_step(path, 3),
                    Catch::Contains("resumes at step 3") && Catch::Contains("consecutive at step 2"));
  {
    std::ofstream out(path);  // step 1 missing
    out << json{{"step", 0}}.dump() << "\n" << json{{"step", 2}}.dump() << "\n";
  }
  CHECK_THROWS_WITH(pulse::app::MetricsLog::truncate_before_step(path, 2), Catch::Contains("at step 1"));
  CHECK(pulse::app::MetricsLog::read(path).size() == 2);
  pulse::app::MetricsLog::truncate_before_step(path, 1);  // a resume point inside the intact part
  CHECK(pulse::app::MetricsLog::read(path).size() == 1);
  fs::remove_all(dir);
}

TEST_CASE("summary has exactly the issue's keys and totals", "[app][run_files]") {
  std::vector<json> rows = {{{"step", 0},
                             {"reward_mean", 0.25},
                             {"changed_fraction", 0.5},
                             {"patch_bytes", 100},
                             {"dense_bytes", 1000},
                             {"bit_identical", true}},
                            {{"step", 1},
                             {"reward_mean", 0.75},
                             {"changed_fraction", 0.1},
                             {"patch_bytes", 300},
                             {"dense_bytes", 1000},
                             {"bit_identical", true}}};
  auto s = pulse::app::summarize(rows);
  CHECK(s.steps == 2);
  CHECK(s.reward_first == 0.25);
  CHECK(s.reward_last == 0.75);
  CHECK(s.mean_changed_fraction == Approx(0.3));
  CHECK(s.patch_bytes_total == 400);
  CHECK(s.dense_bytes_total == 2000);
  CHECK(s.compression_ratio == Approx(5.0));
  CHECK(s.bit_identical_every_step);
  // Longer runs average the first/last few steps.
  CHECK(pulse::app::reward_window(2) == 1);
  CHECK(pulse::app::reward_window(12) == 3);
  CHECK(pulse::app::reward_window(100) == 5);
  std::vector<json> many;
  for (int i = 0; i < 12; ++i)
    many.push_back(json{{"step", i}, {"reward_mean", i < 3 ? 0.1 : (i >= 9 ? 0.7 : 0.4)}});
  CHECK(pulse::app::summarize(many).reward_first == Approx(0.1));
  CHECK(pulse::app::summarize(many).reward_last == Approx(0.7));
  rows[1]["bit_identical"] = false;
  CHECK_FALSE(pulse::app::summarize(rows).bit_identical_every_step);
  std::vector<std::string> keys;
  json j = s.to_json();
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  std::vector<std::string> expected = {"bit_identical_every_step",
                                       "compression_ratio",
                                       "dense_bytes_total",
                                       "mean_changed_fraction",
                                       "pass_at_1_after",
                                       "pass_at_1_before",
                                       "patch_bytes_total",
                                       "reward_first",
                                       "reward_last",
                                       "steps",
                                       "wall_seconds",
                                       "workers"};
  CHECK(keys == expected);
  // Pass@1 that was not measured (eval off) is null, not a 0 that reads as measured.
  CHECK(j["pass_at_1_before"].is_null());
  CHECK(j["pass_at_1_after"].is_null());
  s.pass_at_1_before = 0.0;
  s.pass_at_1_after = 0.25;
  j = s.to_json();
  CHECK(j["pass_at_1_before"] == 0.0);
  CHECK(j["pass_at_1_after"] == 0.25);
}

TEST_CASE("report.html inlines gnuplot SVG plots and the summary", "[app][report]") {
  std::string dir = temp_dir("report");
  pulse::app::MetricsLog log(dir + "/metrics.jsonl");
  for (int s = 0; s < 5; ++s)
    log.append(json{{"step", s},
                    {"reward_mean", 0.2 + 0.1 * s},
                    {"reward_std", 0.1},
                    {"changed_fraction", 0.01 / (s + 1)},
                    {"patch_bytes", 1000 + s},
                    {"dense_bytes", 50000},
                    {"bit_identical", true},
                    {"loss", 0.5}});
  pulse::app::Summary sum = pulse::app::summarize(pulse::app::MetricsLog::read(dir + "/metrics.jsonl"));
  sum.pass_at_1_before = 0.125;
  sum.pass_at_1_after = 0.5;
  pulse::app::write_json_atomic(dir + "/summary.json", sum.to_json());
  std::string out = pulse::app::write_report(dir);
  std::string html = pulse::sync::read_file(out);
  // Four inline plots, no external resources.
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  CHECK(svgs == 4);
  CHECK(html.find("<script src") == std::string::npos);
  CHECK(html.find("<?xml") == std::string::npos);
  CHECK(html.find("pass_at_1_after") != std::string::npos);
  CHECK(html.find("0.5") != std::string::npos);
  CHECK(html.find("patch vs dense BF16") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("report of an interrupted run: Pass@1 before from run_state.json and after not measured",
          "[app][report]") {
  // A run killed mid-GRPO has no summary.json; its report showed Pass@1 0.000 before and after.
  std::string dir = temp_dir("report-interrupted");
  pulse::app::MetricsLog log(dir + "/metrics.jsonl");
  for (int s = 0; s < 3; ++s)
    log.append(json{{"step", s},
                    {"reward_mean", 0.25},
                    {"reward_std", 0.1},
                    {"changed_fraction", 0.01},
                    {"patch_bytes", 1000},
                    {"dense_bytes", 50000},
                    {"bit_identical", true},
                    {"loss", 0.5}});
  pulse::app::write_json_atomic(dir + "/run_state.json", json{{"pass_at_1_before", 0.375}});
  std::string html = pulse::sync::read_file(pulse::app::write_report(dir));
  CHECK(html.find("0.375") != std::string::npos);
  CHECK(html.find("not measured") != std::string::npos);
  CHECK(html.find("0.000") == std::string::npos);
  // With a summary its values are used.
  pulse::app::Summary sum = pulse::app::summarize(pulse::app::MetricsLog::read(dir + "/metrics.jsonl"));
  sum.pass_at_1_before = 0.125;
  sum.pass_at_1_after = 0.625;
  pulse::app::write_json_atomic(dir + "/summary.json", sum.to_json());
  html = pulse::sync::read_file(pulse::app::write_report(dir));
  CHECK(html.find(">0.125<") != std::string::npos);
  CHECK(html.find(">0.625<") != std::string::npos);
  CHECK(html.find("not measured") == std::string::npos);
  // A run with evaluation off: summary.json has null, and the summary table says so (it printed "null").
  sum.pass_at_1_before.reset();
  sum.pass_at_1_after.reset();
  pulse::app::write_json_atomic(dir + "/summary.json", sum.to_json());
  pulse::app::write_json_atomic(dir + "/run_state.json", json{{"pass_at_1_before", nullptr}});
  html = pulse::sync::read_file(pulse::app::write_report(dir));
  CHECK(html.find("<th>pass_at_1_after</th><td>not measured</td>") != std::string::npos);
  CHECK(html.find("<th>pass_at_1_before</th><td>not measured</td>") != std::string::npos);
  CHECK(html.find(">null<") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("report of a folder without metrics is an error naming it", "[app][report]") {
  std::string dir = temp_dir("empty");
  try {
    pulse::app::write_report(dir);
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("metrics.jsonl") != std::string::npos);
  }
  fs::remove_all(dir);
}
