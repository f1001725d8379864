// report.html in a real browser: headless Chromium (Debian's `chromium`, driven by its command line) lays
// the page out and every plot has a real, non-zero size with the SVG's aspect ratio. A probe script is
// appended to a copy of the report; it writes each plot's getBoundingClientRect() into the DOM, which
// `--dump-dom` prints. Each Chromium run is bounded by `timeout` and uses a temp profile removed after.
// Chromium missing is a failure (run scripts/install-deps.sh), never a skip.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/run/report.h"
#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// Seconds one Chromium run may take before `timeout` kills it (a cold start takes about 1 s).
constexpr int kChromiumTimeoutSeconds = 60;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// The first of `chromium`, `chromium-browser` on PATH, or "" when neither is there.
std::string find_chromium() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::vector<std::string> folders;
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty()) folders.push_back(d);
  for (const char* name : {"chromium", "chromium-browser"})
    for (const auto& d : folders) {
      const std::string candidate = d + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  return "";
}

/// Appended to the copy of report.html: one {w, h, drawn} per plot SVG, as JSON in <pre id=pulse-probe>.
/// `drawn` is the width of the bounding box of what gnuplot drew (0 for an empty SVG).
const char* kProbeScript =
    "<script>(function(){var out=[];"
    "document.querySelectorAll('.plots svg').forEach(function(s){"
    "var r=s.getBoundingClientRect(),g=s.querySelector('g'),b=g?g.getBBox():{width:0};"
    "out.push({w:r.width,h:r.height,drawn:b.width});});"
    "var p=document.createElement('pre');p.id='pulse-probe';p.textContent=JSON.stringify(out);"
    "document.body.appendChild(p);})();</script>";

/// Loads `html_path` in headless Chromium with a `width` x 1000 window and returns the probe's JSON.
json probe_plot_sizes(const std::string& chromium, const std::string& html_path, int width) {
  pulse::test_run::ScopedTempDir profile("chromium-profile");
  const std::string err_path = profile.path + "/chromium.err";
  const std::string cmd =
      "timeout -k 5 " + std::to_string(kChromiumTimeoutSeconds) + " " + shell_quote(chromium) +
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
      " --no-default-browser-check --disable-extensions --disable-background-networking"
      " --user-data-dir=" +
      shell_quote(profile.path + "/profile") + " --window-size=" + std::to_string(width) +
      ",1000 --dump-dom " + shell_quote("file://" + html_path) + " 2>" + shell_quote(err_path);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string dom;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) dom.append(buf, n);
  const int status = ::pclose(pipe);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::string err;
  if (fs::exists(err_path)) err = pulse::sync::read_file(err_path);
  if (err.size() > 4000) err = err.substr(err.size() - 4000);
  INFO("command: " << cmd << "\nchromium stderr (tail):\n" << err);
  if (rc == 124 || rc == 137) FAIL("chromium did not finish within " << kChromiumTimeoutSeconds << " s");
  REQUIRE(rc == 0);
  const std::string open_tag = "<pre id=\"pulse-probe\">";
  const size_t begin = dom.find(open_tag);
  INFO("dumped DOM (first 2000 bytes): " << dom.substr(0, 2000));
  REQUIRE(begin != std::string::npos);
  const size_t end = dom.find("</pre>", begin);
  REQUIRE(end != std::string::npos);
  return json::parse(dom.substr(begin + open_tag.size(), end - begin - open_tag.size()));
}

/// A run folder with 20 steps of metrics and a summary, and its report.html (the copy with the probe).
std::string make_report(const std::string& dir) {
  pulse::app::MetricsLog log(dir + "/metrics.jsonl");
  for (int s = 0; s < 20; ++s)
    log.append(json{{"step", s},
                    {"reward_mean", 0.2 + 0.02 * s},
                    {"reward_std", 0.1},
                    {"changed_fraction", 0.1 / (s + 1)},
                    {"patch_bytes", 1000 + 50 * s},
                    {"dense_bytes", 50000},
                    {"bit_identical", true},
                    {"loss", 0.5}});
  pulse::app::Summary sum = pulse::app::summarize(pulse::app::MetricsLog::read(dir + "/metrics.jsonl"));
  sum.pass_at_1_before = 0.25;
  sum.pass_at_1_after = 0.5;
  pulse::app::write_json_atomic(dir + "/summary.json", sum.to_json());
  std::string html = pulse::sync::read_file(pulse::app::write_report(dir));
  const size_t body_end = html.rfind("</body>");
  REQUIRE(body_end != std::string::npos);
  html.insert(body_end, kProbeScript);
  const std::string probe_path = dir + "/report-probe.html";
  pulse::sync::write_file_atomic(probe_path, html);
  return probe_path;
}

}  // namespace

TEST_CASE("report.html in headless Chromium: every plot has a real size", "[app][report][browser]") {
  const std::string chromium = find_chromium();
  if (chromium.empty())
    FAIL("chromium not found on PATH: run scripts/install-deps.sh (installs Debian's chromium package)");
  pulse::test_run::ScopedTempDir run("report-browser");
  const std::string page = make_report(run.path);

  // A wide window: the four plots at their full 640x360, with gnuplot's drawing inside.
  json wide = probe_plot_sizes(chromium, page, 1400);
  INFO("plot sizes at 1400 px: " << wide.dump());
  REQUIRE(wide.size() == 4);
  for (const auto& p : wide) {
    CHECK(p["w"].get<double>() == Approx(640).margin(1));
    CHECK(p["h"].get<double>() == Approx(360).margin(1));
    CHECK(p["drawn"].get<double>() > 100);
  }

  // A narrow window (500 px, Chromium's smallest): the plots scale down to fit, keeping their 16:9
  // aspect ratio, never 0x0.
  json narrow = probe_plot_sizes(chromium, page, 500);
  INFO("plot sizes at 500 px: " << narrow.dump());
  REQUIRE(narrow.size() == 4);
  for (const auto& p : narrow) {
    const double w = p["w"].get<double>(), h = p["h"].get<double>();
    CHECK(w > 100);
    CHECK(w <= 500);
    CHECK(h / w == Approx(360.0 / 640.0).margin(0.01));
  }
}

TEST_CASE("report.html plot SVGs carry width and height, not only a viewBox", "[app][report]") {
  pulse::test_run::ScopedTempDir run("report-svg-size");
  const std::string html = pulse::sync::read_file(make_report(run.path));
  size_t plots = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) {
    const std::string tag = html.substr(p, html.find('>', p) - p);
    INFO(tag);
    CHECK(tag.find("width=\"640\"") != std::string::npos);
    CHECK(tag.find("height=\"360\"") != std::string::npos);
    CHECK(tag.find("viewBox=\"0 0 640 360\"") != std::string::npos);
    ++plots;
  }
  CHECK(plots == 4);
  // '@' printed as is, not taken as gnuplot enhanced-text markup (which drew "Pass1").
  CHECK(html.find(">Pass@1 on the held-out split (greedy)<") != std::string::npos);
  CHECK(html.find(".plot svg{display:block;width:640px;max-width:100%;height:auto}") != std::string::npos);
}
