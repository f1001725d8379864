#include "bench/wan_report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "sync/io/atomic_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace pulse::bench::wan {
namespace {

std::string fmt(double x, const char* f = "%.3g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string rate_text(double gbit) {
  if (gbit >= 1) return fmt(gbit, "%.3g") + " Gbit/s";
  if (gbit >= 1e-3) return fmt(gbit * 1e3, "%.3g") + " Mbit/s";
  return fmt(gbit * 1e6, "%.3g") + " kbit/s";
}

double num(const json& row, const char* key) {
  auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : 0.0;
}

json opt(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? json(*v) : json(nullptr);
}

std::string cell(const std::optional<double>& v, const char* f) {
  return v && std::isfinite(*v) ? fmt(*v, f) : "-";
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string run_label(const WanRun& r) {
  return r.mode + " @ " + rate_text(r.link.real_gbit) + (r.link.scaled ? " scaled" : "") + ", " +
         fmt(r.link.delay_ms, "%.0f") + " ms";
}

}  // namespace

std::string LinkCase::label() const {
  const std::string how = !scaled         ? " face value"
                          : link_gbit > 0 ? " scaled (" + rate_text(link_gbit) + ")"
                                          : " scaled";  // the rate follows once the model is known
  return rate_text(real_gbit) + how + ", " + fmt(delay_ms, "%.0f") + " ms one-way";
}

double scaled_gbit(double real_gbit, double model_dense_bytes) {
  return real_gbit * model_dense_bytes / kDense7bBytes;
}

std::string scaling_formula(double model_dense_bytes) {
  return "scaled rate = real rate * model dense BF16 bytes / 7B dense BF16 bytes = real rate * " +
         fmt(model_dense_bytes, "%.0f") + " / " + fmt(kDense7bBytes, "%.3g") + " = real rate * " +
         fmt(model_dense_bytes / kDense7bBytes, "%.3g") +
         " (the same bytes-to-rate ratio as a 7B model on the real link: each transfer takes as long in "
         "seconds; the step it is compared with is this model's)";
}

void fill_sync_run(WanRun& run, const std::vector<json>& trainer_rows,
                   const std::vector<std::vector<json>>& worker_events) {
  std::vector<json> rows;
  for (const auto& r : trainer_rows)
    if (r.contains("step") && r.contains("step_ms")) rows.push_back(r);
  const size_t skip = rows.size() >= 3 ? 1 : 0;  // step 0 carries start-up costs
  run.steps = static_cast<int64_t>(rows.size() - skip);
  std::vector<double> step, twait;
  bool identical = !rows.empty();
  for (size_t i = 0; i < rows.size(); ++i) {
    identical = identical && rows[i].value("bit_identical", false);
    if (i < skip) continue;
    const double s = num(rows[i], "step_ms");
    step.push_back(s);
    twait.push_back(std::max(
        0.0, s - num(rows[i], "train_ms") - num(rows[i], "encode_ms") - num(rows[i], "generate_ms")));
  }
  // Worker syncs of the measured steps: version v is published by step v-1.
  const uint64_t first_version = skip + 1;
  std::vector<double> wait, fetch, bytes;
  for (const auto& events : worker_events) {
    for (const auto& e : events) {
      if (e.value("event", std::string()) != "applied") continue;
      const uint64_t v = e.value("version", uint64_t{0});
      if (v < first_version) continue;
      wait.push_back(num(e, "ms"));
      fetch.push_back(num(e, "fetch_ms"));
      bytes.push_back(num(e, "bytes"));
    }
  }
  run.bit_identical = identical;
  if (!step.empty()) {
    run.step_ms = mean(step);
    run.trainer_wait_ms = mean(twait);
    run.busy_trainer = 1 - *run.trainer_wait_ms / *run.step_ms;
  }
  if (!wait.empty()) {
    run.transfer_ms = mean(fetch);
    run.bytes_per_step = mean(bytes);
    run.worker_wait_ms = mean(wait);  // each worker syncs once per step
    if (run.step_ms) run.busy_workers = std::max(0.0, 1 - *run.worker_wait_ms / *run.step_ms);
  }
}

void fill_loco_run(WanRun& run, const std::vector<json>& rank0_rows, int64_t inner_steps) {
  std::vector<double> step, comm, bytes_round, step_bytes;
  bool identical = !rank0_rows.empty();
  double round_bytes = 0, round_step_ms = 0;
  std::vector<double> round_ms;
  for (const auto& r : rank0_rows) {
    if (!r.contains("step_ms")) continue;
    identical = identical && r.value("bit_identical", false);
    step.push_back(num(r, "step_ms"));
    round_bytes += num(r, "comm_payload_bytes");
    step_bytes.push_back(num(r, "comm_payload_bytes"));
    round_step_ms += num(r, "step_ms");
    const int64_t s = r.value("step", int64_t{0});
    if ((s + 1) % std::max<int64_t>(1, inner_steps) == 0) {
      if (r.contains("outer_step_ms")) comm.push_back(num(r, "outer_step_ms"));
      round_ms.push_back(round_step_ms + num(r, "outer_step_ms"));
      bytes_round.push_back(round_bytes);
      round_bytes = 0;
      round_step_ms = 0;
    }
  }
  run.steps = static_cast<int64_t>(step.size());
  run.rounds = static_cast<int64_t>(bytes_round.size());
  run.bit_identical = identical;
  if (!step.empty()) {
    run.step_ms = mean(step);
    run.bytes_per_step = mean(step_bytes);
  }
  if (!bytes_round.empty()) run.bytes_per_round = mean(bytes_round);
  if (!comm.empty()) {
    run.comm_ms_per_round = mean(comm);
    run.transfer_ms = *run.comm_ms_per_round / static_cast<double>(std::max<int64_t>(1, inner_steps));
    run.trainer_wait_ms = run.transfer_ms;
    run.busy_trainer = 1 - *run.comm_ms_per_round / mean(round_ms);
  } else if (run.mode == "ddp") {
    run.note = "ddp all-reduces inside every step: its comm time is part of step_ms";
  }
}

json wan_json(const std::vector<WanRun>& runs, double model_dense_bytes) {
  json list = json::array();
  for (const auto& r : runs) {
    list.push_back(json{{"path", r.path},
                        {"mode", r.mode},
                        {"link_gbit", r.link.link_gbit},
                        {"real_gbit", r.link.real_gbit},
                        {"scaled", r.link.scaled},
                        {"delay_ms", r.link.delay_ms},
                        {"complete", r.complete},
                        {"steps", r.steps},
                        {"step_ms", opt(r.step_ms)},
                        {"trainer_wait_ms", opt(r.trainer_wait_ms)},
                        {"worker_wait_ms", opt(r.worker_wait_ms)},
                        {"busy_trainer", opt(r.busy_trainer)},
                        {"busy_workers", opt(r.busy_workers)},
                        {"transfer_ms", opt(r.transfer_ms)},
                        {"transfer_ms_expected", opt(r.transfer_ms_expected)},
                        {"bytes_per_step", opt(r.bytes_per_step)},
                        {"rounds", r.rounds},
                        {"comm_ms_per_round", opt(r.comm_ms_per_round)},
                        {"bytes_per_round", opt(r.bytes_per_round)},
                        {"bit_identical", r.bit_identical},
                        {"wall_s", r.wall_s},
                        {"max_lag", r.path == "sync" ? json(r.max_lag) : json()},
                        {"values", r.values.empty() ? json() : json(r.values)},
                        {"note", r.note}});
  }
  return json{{"formula", scaling_formula(model_dense_bytes)},
              {"model_dense_bytes", model_dense_bytes},
              {"dense_7b_bytes", kDense7bBytes},
              {"runs", list}};
}

std::string wan_table(const std::vector<WanRun>& runs, double model_dense_bytes) {
  std::ostringstream t;
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-9s %-34s %9s %9s %9s %11s %8s %8s %11s %6s\n", "path", "mode",
                "link", "step ms", "wait ms", "xfer ms", "bytes/step", "busy tr", "busy wk", "comm/round",
                "ident");
  t << line;
  for (const auto& r : runs) {
    const std::string wait =
        r.path == "sync" ? cell(r.worker_wait_ms, "%.0f") : cell(r.trainer_wait_ms, "%.0f");
    std::string step = cell(r.step_ms, "%.0f");
    if (!r.complete && !r.step_ms) step = ">" + fmt(r.wall_s * 1000, "%.0f");
    std::snprintf(line, sizeof line, "%-5s %-9s %-34s %9s %9s %9s %11s %8s %8s %11s %6s\n", r.path.c_str(),
                  r.mode.c_str(), r.link.label().c_str(), step.c_str(), wait.c_str(),
                  cell(r.transfer_ms ? r.transfer_ms : r.transfer_ms_expected, "%.0f").c_str(),
                  cell(r.bytes_per_step, "%.0f").c_str(), cell(r.busy_trainer, "%.2f").c_str(),
                  cell(r.busy_workers, "%.2f").c_str(), cell(r.comm_ms_per_round, "%.0f").c_str(),
                  r.bit_identical ? "yes" : (r.steps == 0 ? "-" : "NO"));
    t << line;
    if (!r.note.empty()) t << "      note: " << r.note << "\n";
  }
  t << "wait: workers' wait on weights (sync) / trainer's wait on the exchange (loco); busy = 1 - wait / "
       "step\n";
  for (const auto& r : runs)
    if (r.path == "sync") {
      t << "sync runs at rl.max_lag = " << r.max_lag
        << (r.max_lag > 0 ? " (workers sample with the previous version and prefetch the next patch)\n"
                          : " (on-policy: every transfer waits between steps)\n");
      break;
    }
  for (const auto& r : runs)
    if (!r.values.empty()) {
      t << "pulseloco sends multi.values = " << r.values << "\n";
      break;
    }
  t << scaling_formula(model_dense_bytes) << "\n";
  return t.str();
}

namespace {

constexpr int kPlotWidth = 640, kPlotHeight = 360;

std::string svg_of(const std::string& path) {
  const std::string text = sync::read_file(path);
  const auto pos = text.find("<svg");
  if (pos == std::string::npos) throw std::runtime_error("bench wan: " + path + " holds no <svg> element");
  return text.substr(pos);
}

void gnuplot(const std::string& dir, const std::string& script) {
  sync::write_file_atomic(dir + "/plot.gp", script);
  const std::string cmd = "gnuplot '" + dir + "/plot.gp' 2>'" + dir + "/gnuplot.err'";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string err;
    try {
      err = sync::read_file(dir + "/gnuplot.err");
    } catch (const std::exception&) {
    }
    if (rc == -1 || (WIFEXITED(rc) && WEXITSTATUS(rc) == 127))
      throw std::runtime_error(
          "bench wan: gnuplot not found on PATH (install the Debian package gnuplot-nox)");
    throw std::runtime_error("bench wan: gnuplot failed: " + err);
  }
}

}  // namespace

void write_wan_html(const std::string& path, const std::vector<WanRun>& runs, double model_dense_bytes) {
  std::string tmpl = (fs::temp_directory_path() / "pulse-wan-report-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("bench wan: cannot create a temp folder " + tmpl);
  const std::string dir = buf.data();
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  // busy.dat: index, label, trainer busy, workers busy (sync runs); comm.dat: index, label, comm ms/round.
  std::string busy, comm;
  int bi = 0, ci = 0;
  for (const auto& r : runs) {
    std::string label = run_label(r);
    std::replace(label.begin(), label.end(), '"', '\'');
    if (r.path == "sync")
      busy += std::to_string(bi++) + " \"" + label + "\" " + fmt(r.busy_trainer.value_or(0), "%.4f") + " " +
              fmt(r.busy_workers.value_or(0), "%.4f") + "\n";
    else if (r.comm_ms_per_round)
      comm += std::to_string(ci++) + " \"" + label + "\" " + fmt(*r.comm_ms_per_round, "%.3f") + "\n";
  }
  // A plot only for a path that has numbers (gnuplot refuses a log scale with no point above 0).
  std::vector<std::string> plots;
  if (!busy.empty()) plots.push_back("busy");
  if (!comm.empty()) plots.push_back("comm");
  sync::write_file_atomic(dir + "/busy.dat", busy);
  sync::write_file_atomic(dir + "/comm.dat", comm);
  const std::string d = dir + "/";
  std::string script =
      "set terminal svg size " + std::to_string(kPlotWidth) + "," + std::to_string(kPlotHeight) +
      " fixed font 'sans,11' background rgb 'white'\nset grid ytics\nset key top right\n"
      "set style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8\n"
      "set boxwidth 0.9\nset xtics rotate by -30 noenhanced font 'sans,9'\n";
  if (!busy.empty())
    script += "set output '" + d +
              "busy.svg'\nset title 'Busy fraction (1 - waiting / step): trainer -> workers'\n"
              "set ylabel 'busy fraction'\nset yrange [0:1.1]\n"
              "plot '" +
              d +
              "busy.dat' using 3:xtic(2) lc rgb '#08519c' title 'trainer', '' using 4 lc rgb "
              "'#31a354' title 'workers'\n";
  if (!comm.empty())
    script += "set output '" + d +
              "comm.svg'\nset title 'Communication time per outer round: trainer <-> trainer'\n"
              "set ylabel 'ms per round'\nset yrange [0:*]\nset logscale y\nset yrange [*:*]\n"
              "plot '" +
              d + "comm.dat' using 3:xtic(2) lc rgb '#756bb1' title 'comm per round'\n";
  if (!plots.empty()) gnuplot(dir, script);
  const std::string style =
      "body{font-family:sans-serif;max-width:1340px;margin:2em auto;color:#222}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}"
      "th{background:#f4f4f4}.plots{display:flex;flex-wrap:wrap;gap:12px}"
      ".plot{flex:0 1 auto;min-width:0}.plot svg{display:block;width:" +
      std::to_string(kPlotWidth) +
      "px;max-width:100%;height:auto}"
      "pre{background:#f8f8f8;padding:1em;overflow:auto;font-size:12px}";
  std::ostringstream html;
  html
      << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>pulse bench wan</title>\n"
      << "<style>" << style << "</style></head><body>\n<h1>pulse bench wan: over slow links</h1>\n"
      << "<p>Real trainer, worker and trainer processes on emulated hosts (network namespaces) joined by "
         "rate-limited, delayed links. "
      << html_escape(scaling_formula(model_dense_bytes)) << ".</p>\n";
  html << "<h2>Plots</h2>\n<div class=\"plots\">\n";
  for (const auto& name : plots) html << "<div class=\"plot\">" << svg_of(d + name + ".svg") << "</div>\n";
  html << "</div>\n<h2>Runs</h2>\n<table>\n<tr><th>path</th><th>mode</th><th>link</th><th>complete</th>"
          "<th>steps</th><th>step ms</th><th>trainer wait ms</th><th>worker wait ms</th><th>transfer ms</th>"
          "<th>bytes per step</th><th>busy trainer</th><th>busy workers</th><th>comm ms per round</th>"
          "<th>bit-identical</th><th>note</th></tr>\n";
  for (const auto& r : runs) {
    html << "<tr><td>" << r.path << "</td><td>" << html_escape(r.mode) << "</td><td>"
         << html_escape(r.link.label()) << "</td><td>" << (r.complete ? "yes" : "no") << "</td><td>"
         << r.steps << "</td><td>" << cell(r.step_ms, "%.0f") << "</td><td>"
         << cell(r.trainer_wait_ms, "%.0f") << "</td><td>" << cell(r.worker_wait_ms, "%.0f") << "</td><td>"
         << cell(r.transfer_ms, "%.0f") << "</td><td>" << cell(r.bytes_per_step, "%.0f") << "</td><td>"
         << cell(r.busy_trainer, "%.3f") << "</td><td>" << cell(r.busy_workers, "%.3f") << "</td><td>"
         << cell(r.comm_ms_per_round, "%.0f") << "</td><td>" << (r.bit_identical ? "yes" : "NO")
         << "</td><td style=\"text-align:left\">" << html_escape(r.note) << "</td></tr>\n";
  }
  html << "</table>\n<h2>JSON</h2>\n<pre>" << html_escape(wan_json(runs, model_dense_bytes).dump(2))
       << "</pre>\n</body></html>\n";
  sync::write_file_atomic(path, html.str());
}

std::vector<json> read_json_lines(const std::string& path) {
  std::vector<json> rows;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] != '{') continue;
    try {
      json j = json::parse(line);
      if (j.is_object()) rows.push_back(std::move(j));
    } catch (const json::exception&) {
    }
  }
  return rows;
}

}  // namespace pulse::bench::wan
