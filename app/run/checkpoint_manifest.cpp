#include "app/run/checkpoint_manifest.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"
#include "sync/hash.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace pulse::app {

namespace {
constexpr const char* kFormat = "pulse-checkpoint-manifest-v1";

struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

FileDigest digest_file(const fs::path& path) {
  FileDigest d;
  d.xxh3 = sync::xxh3_file(path.string(), &d.bytes);
  return d;
}

std::string describe(const FileDigest& d) {
  return "xxh3 " + sync::hash_hex(d.xxh3) + " over " + std::to_string(d.bytes) + " bytes";
}

json entry_of(const FileDigest& d) {
  return {{"bytes", d.bytes}, {"xxh3", sync::hash_hex(d.xxh3)}};
}

/// Writes `files` (relative path -> entry) as dir/MANIFEST.json, atomically.
void write_manifest(const std::string& dir, const json& files) {
  const std::string path = dir + "/" + kCheckpointManifest;
  std::string text;
  try {
    text = json{{"format", kFormat}, {"files", files}}.dump(1);
  } catch (const json::exception& e) {  // a file name that is not UTF-8
    throw std::runtime_error(path + ": cannot write: " + e.what());
  }
  sync::write_file_atomic(path, text + "\n");
}

/// The manifest at `path`, its format and "files" object checked. Throws std::runtime_error naming it.
json read_manifest(const std::string& path) {
  json m = read_json(path);  // throws naming the path on bad JSON
  if (!m.is_object() || m.value("format", std::string()) != kFormat)
    throw std::runtime_error(path + ": field \"format\" must be \"" + std::string(kFormat) + "\"");
  if (!m.contains("files") || !m["files"].is_object())
    throw std::runtime_error(path + ": field \"files\" must be an object");
  return m;
}
}  // namespace

void write_checkpoint_manifest(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    // Named by where it lies in the folder (a symlink by its own name, not its target's).
    const std::string rel = e.path().lexically_relative(dir).generic_string();
    if (rel != kCheckpointManifest) files.push_back(rel);
  }
  json listed = json::object();
  for (const auto& rel : files) listed[rel] = entry_of(digest_file(fs::path(dir) / rel));
  write_manifest(dir, listed);
}

void update_checkpoint_manifest(const std::string& dir, const std::vector<std::string>& files) {
  json m = read_manifest(dir + "/" + kCheckpointManifest);
  for (const auto& rel : files) m["files"][rel] = entry_of(digest_file(fs::path(dir) / rel));
  write_manifest(dir, m["files"]);
}

bool is_checkpoint_manifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return true;
  const std::string family(kFormat, std::string(kFormat).rfind('-'));  // "pulse-checkpoint-manifest"
  const auto f = j.is_object() ? j.find("format") : j.end();
  return f != j.end() && f->is_string() && f->get<std::string>().rfind(family, 0) == 0;
}

std::vector<ManifestMismatch> check_checkpoint_manifest(const std::string& dir, bool* has_manifest,
                                                        const std::string& under) {
  const std::string path = dir + "/" + kCheckpointManifest;
  const bool exists = fs::exists(path);
  if (has_manifest) *has_manifest = exists;
  if (!exists) return {};
  const json m = read_manifest(path);
  std::vector<ManifestMismatch> out;
  for (const auto& [rel, entry] : m["files"].items()) {
    // Only the plain form that write_checkpoint_manifest writes: "model/../state/x" would be checked
    // as the state but classed by its "model/" prefix.
    const fs::path p = fs::path(rel).lexically_normal();
    if (rel.empty() || p.is_absolute() || *p.begin() == ".." || p.generic_string() != rel)
      throw std::runtime_error(path + ": files: \"" + rel +
                               "\" is not a plain relative path inside the checkpoint");
    if (!under.empty() && rel.rfind(under + "/", 0) != 0) continue;
    FileDigest want;
    try {
      want.bytes = entry.at("bytes").get<uint64_t>();
      const std::string hex = entry.at("xxh3").get<std::string>();
      if (hex.size() != 16 || !std::all_of(hex.begin(), hex.end(), [](char c) {
            return std::isxdigit(static_cast<unsigned char>(c)) != 0;
          }))
        throw std::invalid_argument("xxh3 is not 16 hex digits");
      want.xxh3 = std::stoull(hex, nullptr, 16);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": files.\"" + rel + "\": bad or missing bytes/xxh3: " + e.what());
    }
    const fs::path file = fs::path(dir) / p;
    std::error_code ec;
    const fs::file_status st = fs::status(file, ec);
    if (!fs::exists(st)) {
      out.push_back({rel, "missing; the manifest recorded " + describe(want)});
      continue;
    }
    if (!fs::is_regular_file(st)) {
      out.push_back({rel, "not a regular file; the manifest recorded " + describe(want)});
      continue;
    }
    FileDigest got;
    try {
      got = digest_file(file);
    } catch (const std::exception& e) {
      out.push_back({rel, std::string(e.what()) + "; the manifest recorded " + describe(want)});
      continue;
    }
    if (got.bytes != want.bytes || got.xxh3 != want.xxh3)
      out.push_back({rel, describe(got) + ", the manifest recorded " + describe(want)});
  }
  const std::string closed = kManifestClosedFolder;
  if (under.empty() || under == closed) {
    std::error_code ec;
    const fs::path folder = fs::path(dir) / closed;
    for (auto it = fs::recursive_directory_iterator(folder, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      const std::string rel = it->path().lexically_relative(dir).generic_string();
      if (!m["files"].contains(rel))
        out.push_back(
            {rel, "not listed in " + std::string(kCheckpointManifest) + " (added after the save)", true});
    }
    // A folder that cannot be listed could hide an added file: a mismatch, not a pass.
    if (ec && ec != std::errc::no_such_file_or_directory)
      out.push_back(
          {closed,
           "it or a folder in it cannot be listed to look for files added after the save: " + ec.message()});
  }
  return out;
}

}  // namespace pulse::app
