// Little-endian byte writer/reader for the patch container (sync/FORMAT.md). The reader is bounds
// checked and throws PatchError naming the byte offset and the field being read.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sync/patch.h"

namespace pulse::sync {

/// Appends little-endian integers and raw bytes to a growing buffer.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  size_t size() const { return out_.size(); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>& out_;
};

/// Reads little-endian fields from [data, data+size); every read is bounds checked.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, size_t offset = 0) : data_(data), size_(size), pos_(offset) {}
  uint8_t u8(const char* field) { return static_cast<uint8_t>(le(1, field)); }
  uint16_t u16(const char* field) { return static_cast<uint16_t>(le(2, field)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(le(4, field)); }
  uint64_t u64(const char* field) { return le(8, field); }
  std::string str(const char* field, size_t max_bytes) {
    const size_t at = pos_;
    const uint32_t n = u32(field);
    if (n > max_bytes || n > size_ - pos_)
      throw PatchError(std::string("patch header: ") + field + " length " + std::to_string(n) +
                       " at byte offset " + std::to_string(at) + " is out of range");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  size_t offset() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

 private:
  uint64_t le(int n, const char* field) {
    if (size_ - pos_ < static_cast<size_t>(n))
      throw PatchError(std::string("patch header truncated reading ") + field + " at byte offset " +
                       std::to_string(pos_));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_;
};

}  // namespace pulse::sync
