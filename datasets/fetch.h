// `pulse data fetch`: download (or copy from local files), convert where upstream is not JSONL, verify
// against the catalog's pinned size and SHA-256 (datasets/catalog.h), and install atomically.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "datasets/catalog.h"

namespace pulse::datasets {

/// Where to install and where the bytes come from.
struct FetchOptions {
  std::string dir = kDefaultDataDir;  ///< install folder (created when missing)
  /// "" = download from the catalog URLs. Else a local folder holding the files under their installed
  /// names (math500_test.jsonl, ...; ../shared/datasets is one), or for math: math_train.jsonl +
  /// math_test.jsonl, else MATH.tar, else the unpacked release (a MATH/ folder with train/ and test/).
  std::string from;
  /// "" = the catalog URLs. Else a base URL holding the downloads under their local names
  /// (BASE/math500_test.jsonl, BASE/MATH.tar, ...): an internal mirror.
  std::string mirror;
  double connect_timeout_s = 10;  ///< per download (http_download.h)
  double read_timeout_s = 120;
  std::function<void(const std::string&)> log;  ///< progress lines; may be empty
};

/// What happened to one file.
struct FetchedFile {
  std::string path;    ///< installed path (dir/name)
  std::string source;  ///< URL or local path the bytes came from ("" when already installed)
  uint64_t bytes = 0;
  std::string sha256;
  bool already_installed = false;  ///< it was there with the pinned hash; not rewritten
};

/// Installs every file of `spec` into opt.dir. Files already there with the pinned size and hash are kept.
/// Otherwise every file of the dataset is obtained, converted (MathTar) and verified in memory first, and
/// only then written (sync::write_file_atomic: temp, fsync, rename); a verification failure installs
/// nothing. Throws std::runtime_error:
///   "<name>: cannot download <url>: <why>. No network? Copy the files here and run `pulse data fetch
///    <name> --from DIR` (DIR holding <local names>)" on the first failed download (no retries);
///   "<name>: <source>: <file> has sha256 <x> (<n> bytes), expected <pinned> (<m> bytes): corrupted or a
///    different version; nothing installed";
///   "<name>: --from <dir>: none of ... found".
std::vector<FetchedFile> fetch_dataset(const DatasetSpec& spec, const FetchOptions& opt);

/// fetch_dataset(find_dataset(name), opt).
std::vector<FetchedFile> fetch_dataset(const std::string& name, const FetchOptions& opt);

}  // namespace pulse::datasets
