#include "app/run/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"

namespace fs = std::filesystem;

namespace pulse::app {
namespace {

/// A scratch folder removed on scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pulse-report-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("report: cannot create a temp folder in " + tmpl);
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Runs gnuplot on `script`; throws with gnuplot's stderr on failure.
void run_gnuplot(const std::string& dir, const std::string& script) {
  std::string script_path = dir + "/plot.gp", err_path = dir + "/gnuplot.err";
  sync::write_file_atomic(script_path, script);
  std::string cmd = "gnuplot " + shell_quote(script_path) + " 2>" + shell_quote(err_path);
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string err;
    try {
      err = sync::read_file(err_path);
    } catch (const std::exception&) {
    }
    if (rc == -1 || (WIFEXITED(rc) && WEXITSTATUS(rc) == 127))
      throw std::runtime_error("report: gnuplot not found on PATH (install the Debian package gnuplot-nox)");
    throw std::runtime_error("report: gnuplot failed (exit " + std::to_string(WEXITSTATUS(rc)) + "): " + err);
  }
}

/// The <svg ...>...</svg> element of a gnuplot SVG file (XML prolog and doctype dropped for inlining).
std::string svg_element(const std::string& path) {
  std::string text = sync::read_file(path);
  auto pos = text.find("<svg");
  if (pos == std::string::npos) throw std::runtime_error("report: " + path + " holds no <svg> element");
  return text.substr(pos);
}

double num(const nlohmann::json& row, const char* key) {
  auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string fmt(double x, const char* f = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt(b, "%.3g") + " " + units[u];
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

/// metrics.dat (step reward_mean reward_std changed_fraction patch_bytes dense_bytes reward_avg5) and
/// pass.dat for gnuplot in `dir`; returns whether every changed fraction is > 0 (log axis possible).
bool write_plot_data(const std::string& dir, const std::vector<nlohmann::json>& rows,
                     const std::optional<double>& pass_before, const std::optional<double>& pass_after) {
  // Data: step reward_mean reward_std changed_fraction patch_bytes dense_bytes
  std::string data;
  bool all_changed_positive = !rows.empty();
  std::vector<double> rewards;
  for (const auto& r : rows) rewards.push_back(num(r, "reward_mean"));
  size_t ri = 0;
  for (const auto& r : rows) {
    // Column 7: trailing 5-step moving average of the reward (the per-step mean is noisy).
    size_t lo = ri >= 4 ? ri - 4 : 0;
    double avg = 0;
    for (size_t k = lo; k <= ri; ++k) avg += rewards[k] / static_cast<double>(ri - lo + 1);
    ++ri;
    double changed = num(r, "changed_fraction");
    all_changed_positive = all_changed_positive && changed > 0;
    data += fmt(num(r, "step"), "%.0f") + " " + fmt(num(r, "reward_mean"), "%.9g") + " " +
            fmt(num(r, "reward_std"), "%.9g") + " " + fmt(changed, "%.9g") + " " +
            fmt(num(r, "patch_bytes"), "%.0f") + " " + fmt(num(r, "dense_bytes"), "%.0f") + " " +
            fmt(avg, "%.9g") + "\n";
  }
  if (rows.empty()) data = "0 0 0 0 1 1 0\n";  // an empty run still renders empty axes
  sync::write_file_atomic(dir + "/metrics.dat", data);
  // x, tic label, bar height, bar label: a value not measured (yet) gets no bar and says so, where a 0
  // would read as a measured Pass@1 of 0.
  auto bar = [](int x, const char* name, const std::optional<double>& v) {
    return std::to_string(x) + " \"" + name + "\" " + (v ? fmt(*v, "%.9g") : "0") + " \"" +
           (v ? fmt(*v, "%.3f") : "not measured") + "\"\n";
  };
  sync::write_file_atomic(dir + "/pass.dat",
                          bar(0, "before GRPO", pass_before) + bar(1, "after GRPO", pass_after));

  return all_changed_positive;
}

/// Plot size in CSS pixels: the SVGs' width/height attributes (gnuplot's `fixed` svg terminal) and viewBox.
constexpr int kPlotWidth = 640, kPlotHeight = 360;

/// The gnuplot script writing reward.svg, pass.svg, changed.svg and bytes.svg into `dir`.
std::string plot_script(const std::string& dir, bool all_changed_positive) {
  std::string d = dir + "/";
  std::string common = "set terminal svg size " + std::to_string(kPlotWidth) + "," +
                       std::to_string(kPlotHeight) +
                       " fixed font 'sans,11' background rgb 'white'\n"
                       "set grid\nset key top left\nset xlabel 'GRPO step'\n";
  std::string script = common;
  script += "set output '" + d +
            "reward.svg'\nset title 'Reward (mean over the step rollouts)'\n"
            "set ylabel 'reward'\nset yrange [-0.05:1.05]\n"
            "plot '" +
            d +
            "metrics.dat' using 1:2 with linespoints lw 1 pt 7 ps 0.6 lc rgb '#08519c' title 'mean', "
            "'' using 1:7 with lines lw 3 lc rgb '#de2d26' title '5-step moving average'\n";
  script += "set output '" + d +
            // noenhanced: '@' is markup in gnuplot's enhanced text (it would print "Pass1").
            "pass.svg'\nset title 'Pass@1 on the held-out split (greedy)' noenhanced\n"
            "unset xlabel\nset ylabel 'Pass@1' noenhanced\nset yrange [0:1.05]\nset style fill solid "
            "0.8\nset boxwidth 0.5\n"
            "set xrange [-0.6:1.6]\nplot '" +
            d +
            "pass.dat' using 1:3:xtic(2) with boxes lc rgb '#31a354' notitle, "
            "'' using 1:($3+0.04):4 with labels notitle\n";
  script += "unset style\nset autoscale\nset xlabel 'GRPO step'\nunset xtics\nset xtics\n";
  script += "set output '" + d +
            "changed.svg'\nset title 'BF16 elements changed per step (fraction)'\n"
            "set ylabel 'changed fraction'\n" +
            std::string(all_changed_positive ? "set logscale y\nset format y '10^{%T}'\n" : "") + "plot '" +
            d +
            "metrics.dat' using 1:4 with linespoints lw 2 pt 7 lc rgb '#e6550d' title 'changed fraction'\n"
            "unset logscale y\nset format y '%g'\n";
  script += "set output '" + d +
            "bytes.svg'\nset title 'Bytes shipped per step: PULSESync patch vs dense BF16'\n"
            "set ylabel 'bytes'\nset key bottom left\nset logscale y\nset format y '10^{%T}'\n"
            "plot '" +
            d +
            "metrics.dat' using 1:6 with lines lw 2 lc rgb '#636363' title 'dense BF16', "
            "'' using 1:5 with linespoints lw 2 pt 7 lc rgb '#756bb1' title 'patch'\n";
  return script;
}

/// The report page: summary table, the four plots (inline SVG from `plot_dir`), per-step table, config.
std::string report_html(const std::string& run_dir, const std::vector<nlohmann::json>& rows,
                        const nlohmann::json& summary, const std::string& config_text,
                        const std::string& plot_dir) {
  // Each plot gets a real size from CSS as well as from its width/height attributes: a flex item holding
  // an SVG with only a viewBox collapses to 0x0 in a browser. Narrow windows scale the plots down.
  const std::string style =
      "body{font-family:sans-serif;max-width:1340px;margin:2em auto;color:#222}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}"
      "th{background:#f4f4f4}.plots{display:flex;flex-wrap:wrap;gap:12px}"
      ".plot{flex:0 1 auto;min-width:0}.plot svg{display:block;width:" +
      std::to_string(kPlotWidth) +
      "px;max-width:100%;height:auto}"
      "pre{background:#f8f8f8;padding:1em;overflow:auto;font-size:12px}";
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>pulse run "
       << html_escape(fs::path(run_dir).filename().string()) << "</title>\n<style>" << style
       << "</style></head><body>\n";
  html << "<h1>pulse run: " << html_escape(run_dir) << "</h1>\n";
  html << "<p>GRPO with every weight update shipped to the inference workers as a PULSESync patch (only the "
          "BF16 "
          "elements that changed, zstd-compressed, verified by xxh3 root hashes).</p>\n";
  if (summary.is_object() && !summary.empty()) {
    html << "<h2>Summary</h2>\n<table>\n";
    for (auto it = summary.begin(); it != summary.end(); ++it) {
      // null: a value the run did not measure (summary.json's Pass@1 with evaluation off).
      std::string v = it->is_null()           ? std::string("not measured")
                      : it->is_number_float() ? fmt(it->get<double>(), "%.6g")
                                              : it->dump();
      if ((it.key() == "patch_bytes_total" || it.key() == "dense_bytes_total") && it->is_number())
        v += " (" + bytes_text(it->get<double>()) + ")";
      html << "<tr><th>" << html_escape(it.key()) << "</th><td>" << html_escape(v) << "</td></tr>\n";
    }
    html << "</table>\n";
  }
  html << "<h2>Plots</h2>\n<div class=\"plots\">\n";
  for (const char* name : {"reward", "pass", "changed", "bytes"})
    html << "<div class=\"plot\">" << svg_element(plot_dir + "/" + name + ".svg") << "</div>\n";
  html << "</div>\n";
  html << "<h2>Per step</h2>\n<table>\n<tr><th>step</th><th>reward mean</th><th>reward std</th><th>loss</th>"
          "<th>changed fraction</th><th>patch bytes</th><th>dense bytes</th><th>bit-identical</th></tr>\n";
  for (const auto& r : rows) {
    html << "<tr><td>" << fmt(num(r, "step"), "%.0f") << "</td><td>" << fmt(num(r, "reward_mean"))
         << "</td><td>" << fmt(num(r, "reward_std")) << "</td><td>" << fmt(num(r, "loss")) << "</td><td>"
         << fmt(num(r, "changed_fraction")) << "</td><td>" << fmt(num(r, "patch_bytes"), "%.0f")
         << "</td><td>" << fmt(num(r, "dense_bytes"), "%.0f") << "</td><td>"
         << (r.value("bit_identical", false) ? "yes" : "NO") << "</td></tr>\n";
  }
  html << "</table>\n";
  if (!config_text.empty()) html << "<h2>Config</h2>\n<pre>" << html_escape(config_text) << "</pre>\n";
  html << "</body></html>\n";
  return html.str();
}

}  // namespace

std::string write_report(const std::string& run_dir) {
  std::string metrics_path = run_dir + "/metrics.jsonl";
  if (!fs::exists(metrics_path))
    throw std::runtime_error(metrics_path + ": no metrics (is this a run directory?)");
  auto rows = MetricsLog::read(metrics_path);
  nlohmann::json summary;
  if (fs::exists(run_dir + "/summary.json")) summary = read_json(run_dir + "/summary.json");
  std::string config_text;
  if (fs::exists(run_dir + "/config.toml")) config_text = sync::read_file(run_dir + "/config.toml");

  // Pass@1: summary.json's; a run without one (interrupted, or before its end) has its before value in
  // run_state.json, where the trainer keeps it for --resume, and no after value yet.
  std::optional<double> pass_before, pass_after;
  if (summary.is_object() && summary.contains("pass_at_1_before") && summary["pass_at_1_before"].is_number())
    pass_before = summary["pass_at_1_before"].get<double>();
  if (summary.is_object() && summary.contains("pass_at_1_after") && summary["pass_at_1_after"].is_number())
    pass_after = summary["pass_at_1_after"].get<double>();
  if (!pass_before && fs::exists(run_dir + "/run_state.json")) {
    const nlohmann::json state = read_json(run_dir + "/run_state.json");
    if (state.is_object() && state.contains("pass_at_1_before") && state["pass_at_1_before"].is_number())
      pass_before = state["pass_at_1_before"].get<double>();
  }

  TempDir tmp;
  const bool all_changed_positive = write_plot_data(tmp.path, rows, pass_before, pass_after);
  run_gnuplot(tmp.path, plot_script(tmp.path, all_changed_positive));
  std::string out = run_dir + "/report.html";
  sync::write_file_atomic(out, report_html(run_dir, rows, summary, config_text, tmp.path));
  return out;
}

}  // namespace pulse::app
