// `pulse data fetch NAME... [--dir DIR] [--from DIR] [--mirror URL]` and `pulse data list [--dir DIR]`:
// the public MATH-500, MATH, MBPP and GSM8K files the shipped configs read, downloaded from their upstream
// repositories (or copied from local files), converted where upstream is not JSONL, verified against the
// pinned SHA-256 and installed atomically (datasets/fetch.h).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/cmd/commands.h"
#include "datasets/catalog.h"
#include "datasets/fetch.h"
#include "datasets/sha256.h"

namespace pulse::app {
namespace {

/// Command-line settings of `pulse data`.
struct DataOptions {
  std::vector<std::string> names;
  datasets::FetchOptions fetch;
};

void run_fetch(const DataOptions& o) {
  datasets::FetchOptions opt = o.fetch;
  opt.log = [](const std::string& line) { std::cerr << "pulse data: " << line << "\n"; };
  for (const auto& name : o.names) datasets::find_dataset(name);  // unknown names fail before any work
  for (const auto& name : o.names) {
    for (const auto& f : datasets::fetch_dataset(name, opt)) {
      std::cout << name << ": " << f.path << " " << f.bytes << " bytes sha256 " << f.sha256
                << (f.already_installed ? " (already installed, verified)"
                                        : " (installed from " + f.source + ")")
                << "\n";
    }
  }
}

/// Prints the catalog with each file's state; returns how many installed files are damaged.
int run_list(const DataOptions& o) {
  namespace fs = std::filesystem;
  int damaged = 0;
  for (const auto& d : datasets::dataset_catalog()) {
    std::cout << d.name << ": " << d.description << "; license " << d.license << "\n";
    for (const auto& dl : d.downloads) std::cout << "  source " << dl.url << "\n";
    for (const auto& f : d.files) {
      const fs::path p = fs::path(o.fetch.dir) / f.name;
      std::cout << "  " << p.string() << " " << f.bytes << " bytes sha256 " << f.sha256;
      if (!fs::exists(p)) {
        std::cout << " (missing)\n";
        continue;
      }
      if (!fs::is_regular_file(p)) {  // a folder (or other non-file) there: fetch cannot rename over it
        std::cout << " (present but DAMAGED: not a regular file; remove it, then run `pulse data fetch "
                  << d.name << "`)\n";
        ++damaged;
        continue;
      }
      // An installed file is read and hashed (~20 MB for all of them), so a damaged one shows as such.
      std::error_code ec;
      const uint64_t size = fs::file_size(p, ec);
      const std::string hash = ec ? "" : datasets::sha256_file_hex(p.string());
      if (!ec && size == f.bytes && hash == f.sha256)
        std::cout << " (present, verified)\n";
      else {
        ++damaged;
        std::cout << " (present but DAMAGED: "
                  << (ec ? "unreadable" : std::to_string(size) + " bytes sha256 " + hash)
                  << "; `pulse data fetch " << d.name << "` replaces it)\n";
      }
    }
    std::cout << "  pinned: " << d.pin << "\n";
  }
  return damaged;
}

}  // namespace

void register_data_commands(CLI::App& root) {
  auto o = std::make_shared<DataOptions>();
  auto* data = root.add_subcommand("data", "public datasets: fetch (download, verify, install) and list");
  data->require_subcommand(1);
  auto* fetch = data->add_subcommand(
      "fetch",
      "download NAME... (math500, math, mbpp, gsm8k) from upstream, verify SHA-256, install into DIR");
  fetch->add_option("names", o->names, "datasets: math500 | math | mbpp | gsm8k")->required();
  fetch->add_option("--dir", o->fetch.dir, "install folder (default datasets/data, ignored by git)");
  fetch
      ->add_option("--from", o->fetch.from,
                   "install from local copies in DIR instead of downloading (same verification): the "
                   "installed names, or MATH.tar / an unpacked MATH/ for math")
      ->check(CLI::ExistingDirectory);
  fetch->add_option("--mirror", o->fetch.mirror,
                    "download BASE/<file> (e.g. BASE/MATH.tar) instead of upstream");
  fetch->add_option("--timeout", o->fetch.connect_timeout_s, "connection timeout per download (seconds)");
  fetch->callback([o] { run_fetch(*o); });
  auto* list =
      data->add_subcommand("list", "each dataset's sources, files, pinned hashes and whether installed");
  list->add_option("--dir", o->fetch.dir, "install folder (default datasets/data)");
  list->callback([o] {
    // Damaged files fail the command (exit 1), so that a script can tell; missing ones do not.
    if (const int damaged = run_list(*o)) {
      std::cerr << "pulse data: " << damaged << " installed file(s) damaged (see above)\n";
      throw Exit{1};
    }
  });
}

}  // namespace pulse::app
