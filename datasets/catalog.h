// The public datasets `pulse data fetch` installs: where each file comes from upstream and the SHA-256 it
// must have. Source of every URL, size and hash: ../shared/datasets/SOURCES.md (see each entry's `pin`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pulse::datasets {

/// Where `pulse data fetch` installs by default and the shipped configs read (relative to the checkout;
/// ignored by git).
inline constexpr const char* kDefaultDataDir = "datasets/data";

/// One installed file: its name under the data folder (datasets/data/ by default), exact size and hash.
struct DataFile {
  std::string name;     ///< e.g. "math500_test.jsonl"
  uint64_t bytes = 0;   ///< exact size
  std::string sha256;   ///< lower-case hex of the file bytes
  int64_t records = 0;  ///< JSON lines (for messages)
};

/// How upstream ships a dataset.
enum class UpstreamFormat {
  Jsonl,    ///< downloads[i] is files[i], byte for byte
  MathTar,  ///< downloads[0] is Hendrycks' MATH.tar; files are its train and test splits converted by
            ///< datasets/math_convert.h (files[0] = train, files[1] = test)
};

/// One upstream download: its URL and the file name `--from DIR` / `--mirror BASE` look for.
struct Download {
  std::string url;
  std::string local_name;  ///< "MATH.tar" for MATH, else the installed file name
};

/// A named dataset (`pulse data fetch NAME`).
struct DatasetSpec {
  std::string name;         ///< math500 | math | mbpp | gsm8k
  std::string description;  ///< one line
  UpstreamFormat format = UpstreamFormat::Jsonl;
  std::vector<Download> downloads;
  std::vector<DataFile> files;
  std::string license;
  std::string pin;  ///< what the pinned hashes are hashes of, and how they were established
};

/// Every dataset, in a fixed order (math500, math, mbpp, gsm8k). Thread-safe (built once).
const std::vector<DatasetSpec>& dataset_catalog();

/// The named dataset. Throws std::invalid_argument "unknown dataset 'x' (known: math500, math, mbpp,
/// gsm8k)".
const DatasetSpec& find_dataset(const std::string& name);

/// For a data file path that does not exist: " (run `pulse data fetch NAME` to download it)" when the
/// file name is one the catalog installs ("math500_test.jsonl" -> math500), with " --dir DIR" when the
/// path's folder is not kDefaultDataDir; else "".
std::string fetch_hint(const std::string& path);

}  // namespace pulse::datasets
