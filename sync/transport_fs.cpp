#include "sync/transport_fs.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "sync/io/atomic_file.h"
#include "sync/hash.h"
#include "sync/patch.h"

namespace pulse::sync {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kReady = ".ready";

std::string patch_file(uint64_t from, uint64_t to) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "patch-%020llu-%020llu.pulse", static_cast<unsigned long long>(from),
                static_cast<unsigned long long>(to));
  return buf;
}

std::string anchor_file(uint64_t v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "anchor-%020llu.pulse", static_cast<unsigned long long>(v));
  return buf;
}

/// Parses a READY marker name: patch (from, to) or anchor (v, v). False for anything else.
bool parse_marker(const std::string& name, bool& is_anchor, uint64_t& from, uint64_t& to) {
  unsigned long long a = 0, b = 0;
  char tail[16] = {0};
  if (std::sscanf(name.c_str(), "patch-%20llu-%20llu.pulse%15s", &a, &b, tail) == 3 &&
      std::string(tail) == kReady) {
    is_anchor = false;
    from = a;
    to = b;
    return true;
  }
  if (std::sscanf(name.c_str(), "anchor-%20llu.pulse%15s", &a, tail) == 2 && std::string(tail) == kReady) {
    is_anchor = true;
    from = to = a;
    return true;
  }
  return false;
}

bool parse_hex(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 16) return false;
  char* end = nullptr;
  out = std::strtoull(s.c_str(), &end, 16);
  return end == s.c_str() + s.size();
}

/// A file's bytes, or nullopt when it does not exist (yet) or cannot be read.
std::optional<std::string> read_if_exists(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return data;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- FsPublisher ------------------------------------------------------------------------------------------

FsPublisher::FsPublisher(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_ + "/workers", ec);
  if (ec) throw std::runtime_error("cannot create transport folder '" + dir_ + "': " + ec.message());
}

void FsPublisher::write_with_marker(const std::string& name, const std::vector<uint8_t>& bytes) {
  const PatchInfo info = inspect_patch(bytes.data(), bytes.size());  // never publish garbage
  write_file_atomic(dir_ + "/" + name, bytes.data(), bytes.size());
  const json marker{{"bytes", bytes.size()},
                    {"xxh3", hash_hex(XXH3_64bits(bytes.data(), bytes.size()))},
                    {"base_version", info.base_version},
                    {"version", info.target_version},
                    {"root_hash", hash_hex(info.target_root_hash)}};
  write_file_atomic(dir_ + "/" + name + kReady, marker.dump());
}

void FsPublisher::publish(uint64_t from, uint64_t to, const std::vector<uint8_t>& patch) {
  write_with_marker(patch_file(from, to), patch);
}

void FsPublisher::publish_anchor(uint64_t v, const std::vector<uint8_t>& anchor) {
  write_with_marker(anchor_file(v), anchor);
}

void FsPublisher::remove_before(uint64_t version) {
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    bool is_anchor = false;
    uint64_t from = 0, to = 0;
    if (!parse_marker(name, is_anchor, from, to)) continue;
    if (is_anchor ? to >= version : to > version) continue;
    std::error_code ec;  // marker first: readers stop trusting the data before it disappears
    fs::remove(entry.path(), ec);
    fs::remove(dir_ + "/" + name.substr(0, name.size() - std::string(kReady).size()), ec);
  }
}

void FsPublisher::retain(uint64_t patches_after, const std::vector<uint64_t>& anchors) {
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    bool is_anchor = false;
    uint64_t from = 0, to = 0;
    if (!parse_marker(name, is_anchor, from, to)) continue;
    const bool keep =
        is_anchor ? std::find(anchors.begin(), anchors.end(), to) != anchors.end() : to > patches_after;
    if (keep) continue;
    std::error_code ec;  // marker first: readers stop trusting the data before it disappears
    fs::remove(entry.path(), ec);
    fs::remove(dir_ + "/" + name.substr(0, name.size() - std::string(kReady).size()), ec);
  }
}

std::map<std::string, VersionHead> FsPublisher::confirmations() const {
  std::map<std::string, VersionHead> out;
  for (const auto& entry : fs::directory_iterator(dir_ + "/workers")) {
    if (entry.path().extension() != ".json") continue;
    auto text = read_if_exists(entry.path().string());
    if (!text) continue;
    try {
      const json j = json::parse(*text);
      VersionHead h;
      h.version = j.at("version").get<uint64_t>();
      if (!parse_hex(j.at("root_hash").get<std::string>(), h.root_hash)) continue;
      out[j.at("worker").get<std::string>()] = h;
    } catch (const std::exception&) {
      continue;  // atomic writes make this unreachable unless someone else writes there
    }
  }
  return out;
}

// ---- FsSubscriber -----------------------------------------------------------------------------------------

FsSubscriber::FsSubscriber(std::string dir) : dir_(std::move(dir)) {}

std::optional<std::vector<uint8_t>> FsSubscriber::try_read(const std::string& name) const {
  const auto marker_text = read_if_exists(dir_ + "/" + name + kReady);
  if (!marker_text) return std::nullopt;
  uint64_t bytes = 0, hash = 0;
  try {
    const json m = json::parse(*marker_text);
    bytes = m.at("bytes").get<uint64_t>();
    if (!parse_hex(m.at("xxh3").get<std::string>(), hash)) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const auto data = read_if_exists(dir_ + "/" + name);
  if (!data || data->size() != bytes || XXH3_64bits(data->data(), data->size()) != hash) return std::nullopt;
  return std::vector<uint8_t>(data->begin(), data->end());
}

std::optional<std::vector<uint8_t>> FsSubscriber::try_patch(uint64_t from, uint64_t to) const {
  return try_read(patch_file(from, to));
}

std::optional<std::vector<uint8_t>> FsSubscriber::try_anchor(uint64_t v) const {
  return try_read(anchor_file(v));
}

namespace {

struct Scan {
  bool any = false;
  uint64_t latest = 0;
  std::string latest_marker;
  std::optional<uint64_t> newest_anchor, oldest_anchor;
};

Scan scan(const std::string& dir) {
  Scan s;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    bool is_anchor = false;
    uint64_t from = 0, to = 0;
    if (!parse_marker(name, is_anchor, from, to)) continue;
    if (!s.any || to > s.latest) {
      s.latest = to;
      s.latest_marker = entry.path().string();
    }
    s.any = true;
    if (is_anchor) {
      if (!s.newest_anchor || to > *s.newest_anchor) s.newest_anchor = to;
      if (!s.oldest_anchor || to < *s.oldest_anchor) s.oldest_anchor = to;
    }
  }
  return s;
}

}  // namespace

uint64_t FsSubscriber::latest_ready() const {
  return scan(dir_).latest;
}
bool FsSubscriber::any_ready() const {
  return scan(dir_).any;
}
std::optional<uint64_t> FsSubscriber::latest_anchor() const {
  return scan(dir_).newest_anchor;
}
std::optional<uint64_t> FsSubscriber::oldest_anchor() const {
  return scan(dir_).oldest_anchor;
}

VersionHead FsSubscriber::latest_ready_head() const {
  const Scan s = scan(dir_);
  VersionHead h;
  if (!s.any) return h;
  h.version = s.latest;
  if (auto text = read_if_exists(s.latest_marker)) {
    try {
      parse_hex(json::parse(*text).at("root_hash").get<std::string>(), h.root_hash);
    } catch (const std::exception&) {
    }
  }
  return h;
}

// ---- FsPatchSource ----------------------------------------------------------------------------------------

FsPatchSource::FsPatchSource(std::string dir, double wait_s, double poll_s)
    : sub_(std::move(dir)), wait_s_(wait_s), poll_s_(poll_s) {}

VersionHead FsPatchSource::head() {
  return sub_.latest_ready_head();
}

std::vector<uint8_t> FsPatchSource::patch(uint64_t from, uint64_t to) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    if (auto p = sub_.try_patch(from, to)) return std::move(*p);
    const auto oldest = sub_.oldest_anchor();
    if (oldest && from < *oldest && !sub_.try_patch(from, to)) {
      throw VersionGoneError(410, "patch " + std::to_string(from) + "->" + std::to_string(to) +
                                      " is gone from '" + sub_.dir() + "' (oldest anchor " +
                                      std::to_string(*oldest) + ")");
    }
    if (seconds_since(t0) > wait_s_) {
      throw TransportError(0, "patch " + std::to_string(from) + "->" + std::to_string(to) +
                                  " not READY in '" + sub_.dir() + "' after " + std::to_string(wait_s_) +
                                  " s");
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_s_));
  }
}

std::vector<uint8_t> FsPatchSource::anchor(uint64_t version) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const auto v = version == kLatestAnchor ? sub_.latest_anchor() : std::optional<uint64_t>(version);
    if (v) {
      if (auto a = sub_.try_anchor(*v)) return std::move(*a);
    }
    if (seconds_since(t0) > wait_s_) {
      throw TransportError(0,
                           "no READY anchor in '" + sub_.dir() + "' after " + std::to_string(wait_s_) + " s");
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_s_));
  }
}

void FsPatchSource::confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) {
  for (char c : worker_id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      throw std::invalid_argument("worker id '" + worker_id + "' must be [A-Za-z0-9._-] to name a file");
    }
  }
  const json j{{"worker", worker_id}, {"version", version}, {"root_hash", hash_hex(root_hash)}};
  write_file_atomic(sub_.dir() + "/workers/" + worker_id + ".json", j.dump());
}

}  // namespace pulse::sync
