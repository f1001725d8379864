// report.html of a run: summary table and plots (reward, Pass@1, changed fraction, patch bytes vs dense
// BF16) drawn by gnuplot's svg terminal and inlined, so the page opens offline in any browser.
#pragma once
#include <string>

namespace pulse::app {

/// Reads RUN_DIR/metrics.jsonl (required), summary.json and config.toml (optional; without a summary, as in
/// an interrupted run, Pass@1 before comes from run_state.json and the after bar says "not measured"),
/// renders the plots with the `gnuplot` found on PATH and writes RUN_DIR/report.html atomically. Returns the
/// report's path. Throws std::runtime_error when the metrics are missing or gnuplot fails (its stderr in the
/// message).
std::string write_report(const std::string& run_dir);

/// `s` with &, <, >, " escaped for HTML text and attributes.
std::string html_escape(const std::string& s);

}  // namespace pulse::app
