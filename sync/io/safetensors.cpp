#include "sync/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "sync/io/atomic_file.h"

namespace pulse::sync {

namespace {

// The safetensors reference implementation refuses headers above 100 MB (100,000,000 bytes); pulse
// refuses above 100 MiB, slightly more lenient, so that nothing the reference reads is refused here.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::runtime_error file_error(const std::string& path, const std::string& what) {
  return std::runtime_error("safetensors '" + path + "': " + what);
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// One tensor's byte range [begin, end) in the data section and its index in the tensor list.
struct Span {
  uint64_t begin, end;
  size_t tensor;
};

/// "data bytes [a, b) (file offsets [A, B))": a data-section range and where it lies in the file.
std::string data_range(uint64_t begin, uint64_t end, uint64_t data_start) {
  return "data bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") (file offsets [" +
         std::to_string(data_start + begin) + ", " + std::to_string(data_start + end) + "))";
}

/// The layout policy (see SafetensorsFile): the tensors' ranges, sorted by (begin, end), must tile the
/// data section exactly, with no overlap, no leading gap, no hole and no trailing bytes.
void check_layout(const std::string& path, const std::vector<Span>& spans,
                  const std::vector<TensorView>& tensors, uint64_t data_start, uint64_t data_bytes) {
  uint64_t cursor = 0;  // end of the data covered so far
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    const std::string& name = tensors[s.tensor].name;
    if (s.begin < cursor)
      throw file_error(path, "tensor '" + name + "' at data offset " + std::to_string(s.begin) +
                                 " overlaps tensor '" + tensors[spans[i - 1].tensor].name + "' ending at " +
                                 std::to_string(cursor));
    if (s.begin > cursor && i == 0)
      throw file_error(path, "leading gap: " + data_range(0, s.begin, data_start) +
                                 " before the first tensor '" + name +
                                 "' belong to no tensor (tensors must start at data offset 0)");
    if (s.begin > cursor)
      throw file_error(path, "hole: " + data_range(cursor, s.begin, data_start) + " between tensor '" +
                                 tensors[spans[i - 1].tensor].name + "' and tensor '" + name +
                                 "' belong to no tensor (tensors must be contiguous)");
    cursor = s.end;
  }
  if (cursor < data_bytes)
    throw file_error(
        path, "trailing bytes: " + data_range(cursor, data_bytes, data_start) +
                  (spans.empty() ? std::string(" in a file with no tensors")
                                 : " after the last tensor '" + tensors[spans.back().tensor].name + "'") +
                  " belong to no tensor (the file must end where the last tensor ends)");
}

}  // namespace

struct SafetensorsFile::Impl {
  std::string path;
  void* map = nullptr;
  size_t map_bytes = 0;
  std::vector<TensorView> tensors;
  std::map<std::string, std::string> metadata;

  ~Impl() {
    if (map && map != MAP_FAILED) ::munmap(map, map_bytes);
  }
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

const std::vector<TensorView>& SafetensorsFile::tensors() const {
  return impl_->tensors;
}
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}
const std::string& SafetensorsFile::path() const {
  return impl_->path;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw file_error(path, std::string("cannot stat: ") + std::strerror(errno));
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    throw file_error(
        path, "truncated: " + std::to_string(file_bytes) + " bytes, the 8-byte header length is missing");
  }
  impl->map_bytes = file_bytes;
  impl->map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (impl->map == MAP_FAILED) throw file_error(path, std::string("cannot mmap: ") + std::strerror(errno));
  const auto* bytes = static_cast<const uint8_t*>(impl->map);

  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (header_bytes > kMaxHeaderBytes)
    throw file_error(path, "header length " + std::to_string(header_bytes) + " at offset 0 exceeds the " +
                               std::to_string(kMaxHeaderBytes) + "-byte (100 MiB) limit (file size " +
                               std::to_string(file_bytes) + " bytes)");
  if (8 + header_bytes > file_bytes)
    throw file_error(path, "truncated: header length " + std::to_string(header_bytes) +
                               " at offset 0 runs past the end of the file (file size " +
                               std::to_string(file_bytes) + " bytes, at most " +
                               std::to_string(file_bytes - 8) + " header bytes fit)");
  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start;

  nlohmann::json header;
  try {
    // nlohmann keeps the last of duplicate keys silently; a header naming a tensor (or a field) twice is
    // ambiguous, so it is refused. keys[d] holds the keys seen in the object open at depth d.
    std::vector<std::set<std::string>> keys;
    std::string duplicate;
    auto check_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      const size_t d = static_cast<size_t>(depth);
      if (event == nlohmann::json::parse_event_t::object_start) {
        if (keys.size() <= d + 1) keys.resize(d + 2);
        keys[d + 1].clear();
      } else if (event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
        if (keys.size() <= d) keys.resize(d + 1);
        if (!keys[d].insert(parsed.get<std::string>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
      }
      return true;
    };
    header = nlohmann::json::parse(bytes + 8, bytes + data_start, check_keys);
    if (!duplicate.empty())
      throw file_error(path, "JSON header (bytes 8.." + std::to_string(data_start) + ") has the key '" +
                                 duplicate + "' twice");
  } catch (const nlohmann::json::exception& e) {
    throw file_error(
        path, std::string("bad JSON header (bytes 8..") + std::to_string(data_start) + "): " + e.what());
  }
  if (!header.is_object()) throw file_error(path, "JSON header is not an object");

  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw file_error(path, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          throw file_error(path, "__metadata__ value '" + m.key() + "' is not a string");
        impl->metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return file_error(path, "tensor '" + name + "': " + what); };
    if (!entry.is_object()) throw bad("entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) throw bad("missing dtype");
    if (!entry.contains("shape") || !entry["shape"].is_array()) throw bad("missing shape");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2)
      throw bad("data_offsets must be [begin, end]");
    TensorView view;
    view.name = name;
    try {
      view.dtype = parse_dtype(entry["dtype"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw bad(e.what());
    }
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw bad("shape entries must be non-negative integers");
      view.shape.push_back(d.get<int64_t>());
    }
    for (const auto& o : entry["data_offsets"])
      if (!o.is_number_unsigned()) throw bad("data_offsets must be non-negative integers");
    const uint64_t begin = entry["data_offsets"][0].get<uint64_t>();
    const uint64_t end = entry["data_offsets"][1].get<uint64_t>();
    if (begin > end)
      throw bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") reversed");
    if (end > data_bytes)
      throw bad("data_offsets end " + std::to_string(end) + " (file offset " +
                std::to_string(data_start + end) + ") past the end of the " + std::to_string(file_bytes) +
                "-byte file");
    uint64_t expect = 0;
    try {
      const uint64_t n = static_cast<uint64_t>(numel(view.shape));
      const uint64_t w = dtype_size(view.dtype);
      if (n > UINT64_MAX / w) throw std::overflow_error("too large");
      expect = n * w;
    } catch (const std::exception& e) {
      throw bad(std::string("bad shape: ") + e.what());
    }
    if (end - begin != expect)
      throw bad("data_offsets span " + std::to_string(end - begin) + " bytes but shape x dtype needs " +
                std::to_string(expect));
    view.data = bytes + data_start + begin;
    view.nbytes = static_cast<size_t>(expect);
    spans.push_back({begin, end, impl->tensors.size()});
    impl->tensors.push_back(std::move(view));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_layout(path, spans, impl->tensors, data_start, data_bytes);
  std::vector<TensorView> ordered;
  ordered.reserve(spans.size());
  for (const auto& s : spans) ordered.push_back(std::move(impl->tensors[s.tensor]));
  impl->tensors = std::move(ordered);
  return SafetensorsFile(std::move(impl));
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint ckpt;
  if (is_dir(path)) {
    const std::string index_path = path + "/model.safetensors.index.json";
    const std::string single_path = path + "/model.safetensors";
    if (is_file(index_path)) {
      nlohmann::json index;
      try {
        index = nlohmann::json::parse(read_file(index_path));
      } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error("checkpoint index '" + index_path + "': bad JSON: " + e.what());
      }
      if (!index.contains("weight_map") || !index["weight_map"].is_object())
        throw std::runtime_error("checkpoint index '" + index_path + "': missing weight_map object");
      std::map<std::string, std::set<std::string>> by_file;
      for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          throw std::runtime_error("checkpoint index '" + index_path + "': weight_map['" + it.key() +
                                   "'] is not a file name");
        const std::string shard = it.value().get<std::string>();
        if (shard.find('/') != std::string::npos || shard == "..")
          throw std::runtime_error("checkpoint index '" + index_path + "': shard name '" + shard +
                                   "' must be a plain file name");
        by_file[shard].insert(it.key());
      }
      for (const auto& [shard, names] : by_file) {
        ckpt.files_.push_back(SafetensorsFile::open(path + "/" + shard));
        const auto& file = ckpt.files_.back();
        std::set<std::string> seen;
        for (const auto& t : file.tensors()) {
          if (names.count(t.name)) {
            ckpt.tensors_.push_back(t);
            seen.insert(t.name);
          }
        }
        for (const auto& n : names)
          if (!seen.count(n))
            throw std::runtime_error("checkpoint index '" + index_path + "': tensor '" + n +
                                     "' not found in shard '" + file.path() + "'");
      }
    } else if (is_file(single_path)) {
      ckpt.files_.push_back(SafetensorsFile::open(single_path));
      ckpt.tensors_ = ckpt.files_.back().tensors();
    } else {
      // A pulse run's checkpoint (runs/<name>/checkpoints/step-N) keeps its weights in model/.
      const bool run_step =
          is_file(path + "/model/model.safetensors") || is_file(path + "/model/model.safetensors.index.json");
      throw std::runtime_error(
          "checkpoint folder '" + path + "' has neither model.safetensors nor model.safetensors.index.json" +
          (run_step
               ? std::string("; it is a pulse run checkpoint: pass '") + path + "/model', its weights folder"
               : std::string()));
    }
  } else {
    ckpt.files_.push_back(SafetensorsFile::open(path));
    ckpt.tensors_ = ckpt.files_.back().tensors();
  }
  for (const auto& file : ckpt.files_)  // shards in file-name order; emplace keeps the first value
    for (const auto& [key, value] : file.metadata()) ckpt.metadata_.emplace(key, value);
  std::sort(ckpt.tensors_.begin(), ckpt.tensors_.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  for (size_t i = 1; i < ckpt.tensors_.size(); ++i)
    if (ckpt.tensors_[i].name == ckpt.tensors_[i - 1].name)
      throw std::runtime_error("checkpoint '" + path + "': tensor '" + ckpt.tensors_[i].name +
                               "' appears twice");
  return ckpt;
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name))
      throw std::runtime_error("write_safetensors '" + path + "': duplicate or reserved tensor name '" +
                               t.name + "'");
    const uint64_t expect = static_cast<uint64_t>(numel(t.shape)) * dtype_size(t.dtype);
    if (expect != t.nbytes)
      throw std::runtime_error("write_safetensors '" + path + "': tensor '" + t.name + "' holds " +
                               std::to_string(t.nbytes) + " bytes, shape x dtype needs " +
                               std::to_string(expect));
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the spec allows trailing spaces; keeps data 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  try {
    write_file_atomic_stream(path, [&](const auto& write) {
      write(len, 8);
      write(text.data(), text.size());
      for (const auto& t : tensors)
        if (t.nbytes) write(t.data, t.nbytes);
    });
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("write_safetensors: ") + e.what());
  }
}

}  // namespace pulse::sync
