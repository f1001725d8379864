// Fetch, convert, verify, install (datasets/fetch.h).
#include "datasets/fetch.h"

#include <filesystem>
#include <map>
#include <stdexcept>

#include "datasets/http_download.h"
#include "datasets/math_convert.h"
#include "datasets/sha256.h"
#include "datasets/tar_reader.h"
#include "sync/io/atomic_file.h"

namespace fs = std::filesystem;

namespace pulse::datasets {
namespace {

/// The bytes of one file to install and where they came from.
struct Obtained {
  std::string bytes, source;
};

void say(const FetchOptions& opt, const std::string& line) {
  if (opt.log) opt.log(line);
}

std::string local_names(const DatasetSpec& spec) {
  if (spec.format == UpstreamFormat::MathTar)
    return "MATH.tar, the unpacked MATH/ folder, or math_train.jsonl + math_test.jsonl";
  std::string s;
  for (const auto& d : spec.downloads) s += (s.empty() ? "" : ", ") + d.local_name;
  return s;
}

bool installed(const DataFile& f, const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) != f.bytes) return false;
  return sha256_file_hex(path) == f.sha256;
}

/// MATH.tar bytes (or an unpacked folder's files) -> {files[0]: train, files[1]: test}.
std::vector<Obtained> convert_math(const DatasetSpec& spec, const std::vector<TarEntry>& entries,
                                   const std::string& source) {
  auto splits = math_release_to_jsonl(entries, source);
  std::vector<Obtained> out;
  for (const char* split : {"train", "test"}) {
    if (!splits.count(split))
      throw std::runtime_error(spec.name + ": " + source + ": no " + split + "/ problem files");
    out.push_back({std::move(splits[split]), source + " (converted, " + split + ")"});
  }
  return out;
}

std::vector<Obtained> download_all(const DatasetSpec& spec, const FetchOptions& opt) {
  std::vector<Obtained> raw;
  for (const auto& d : spec.downloads) {
    const std::string url = opt.mirror.empty() ? d.url : opt.mirror + "/" + d.local_name;
    say(opt, "downloading " + url);
    try {
      raw.push_back({http_get(url, opt.connect_timeout_s, opt.read_timeout_s), url});
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(spec.name + ": " + e.what() +
                               ". No network? Copy the files here and run `pulse data fetch " + spec.name +
                               " --from DIR` (DIR holding " + local_names(spec) + ")");
    }
    if (raw.back().bytes.rfind("version https://git-lfs.github.com/spec", 0) == 0)
      throw std::runtime_error(spec.name + ": " + url + " returned a Git LFS pointer, not the data");
  }
  if (spec.format == UpstreamFormat::MathTar)
    return convert_math(spec, read_tar(raw[0].bytes, raw[0].source), raw[0].source);
  return raw;
}

std::vector<Obtained> read_local(const DatasetSpec& spec, const FetchOptions& opt) {
  auto read = [](const std::string& path) { return Obtained{sync::read_file(path), path}; };
  std::vector<Obtained> out;
  bool all_present = true;
  for (const auto& f : spec.files)
    all_present = all_present && fs::is_regular_file(fs::path(opt.from) / f.name);
  if (all_present) {
    for (const auto& f : spec.files) out.push_back(read((fs::path(opt.from) / f.name).string()));
    return out;
  }
  std::string wanted;
  for (const auto& f : spec.files) wanted += (wanted.empty() ? "" : " + ") + f.name;
  if (spec.format == UpstreamFormat::MathTar) {
    const fs::path tar = fs::path(opt.from) / "MATH.tar";
    if (fs::is_regular_file(tar)) {
      say(opt, "converting " + tar.string());
      return convert_math(spec, read_tar(sync::read_file(tar.string()), tar.string()), tar.string());
    }
    const fs::path folder = fs::path(opt.from) / "MATH";
    if (fs::is_directory(folder)) {
      say(opt, "converting " + folder.string());
      return convert_math(spec, read_folder_files(folder.string()), folder.string());
    }
    wanted += ", MATH.tar or a MATH/ folder";
  }
  throw std::runtime_error(spec.name + ": --from " + opt.from + ": none of " + wanted + " found there");
}

void verify(const DatasetSpec& spec, const DataFile& f, const Obtained& got) {
  const std::string sha = sha256_hex(got.bytes);
  if (sha == f.sha256 && got.bytes.size() == f.bytes) return;
  throw std::runtime_error(spec.name + ": " + got.source + ": " + f.name + " has sha256 " + sha + " (" +
                           std::to_string(got.bytes.size()) + " bytes), expected " + f.sha256 + " (" +
                           std::to_string(f.bytes) +
                           " bytes): corrupted or a different version; nothing "
                           "installed (pinned: " +
                           spec.pin + ")");
}

}  // namespace

std::vector<FetchedFile> fetch_dataset(const DatasetSpec& spec, const FetchOptions& opt) {
  std::vector<FetchedFile> out;
  bool all_installed = true;
  for (const auto& f : spec.files) {
    const std::string path = (fs::path(opt.dir) / f.name).string();
    const bool ok = installed(f, path);
    all_installed = all_installed && ok;
    out.push_back({path, "", f.bytes, f.sha256, ok});
  }
  if (all_installed) return out;
  std::vector<Obtained> got = opt.from.empty() ? download_all(spec, opt) : read_local(spec, opt);
  if (got.size() != spec.files.size()) throw std::logic_error(spec.name + ": catalog/download mismatch");
  for (size_t i = 0; i < got.size(); ++i) verify(spec, spec.files[i], got[i]);
  fs::create_directories(opt.dir);
  for (size_t i = 0; i < got.size(); ++i) {
    if (out[i].already_installed) continue;
    sync::write_file_atomic(out[i].path, got[i].bytes);
    out[i].source = got[i].source;
    say(opt, "installed " + out[i].path + " (" + std::to_string(got[i].bytes.size()) + " bytes, sha256 " +
                 spec.files[i].sha256 + ")");
  }
  return out;
}

std::vector<FetchedFile> fetch_dataset(const std::string& name, const FetchOptions& opt) {
  return fetch_dataset(find_dataset(name), opt);
}

}  // namespace pulse::datasets
