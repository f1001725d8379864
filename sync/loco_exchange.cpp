#include "sync/loco_exchange.h"

#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>

#include "kernels/loco_ulp.h"
#include "sync/byte_io.h"
#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/patch.h"
#include "sync/zstd_context.h"

namespace pulse::sync {

namespace {

constexpr char kMagic[8] = {'P', 'U', 'L', 'S', 'E', 'L', 'O', 'C'};
constexpr size_t kFixedHeaderBytes = 56;  // magic .. n_tensors
constexpr size_t kChecksumBytes = 8;
constexpr uint64_t kMaxNumel = uint64_t{1} << 32;
constexpr uint64_t kMaxGapBytes = 5;  // LEB128 bytes of one gap < 2^32
/// Largest count code: zigzag(+2^24) = 2^25 (zigzag(-2^24) = 2^25 - 1); 0 is the escape code.
constexpr uint64_t kMaxCountCode = uint64_t{2} * static_cast<uint64_t>(kernels::kLocoUlpMaxCount);
constexpr uint64_t kMaxCountCodeBytes = 4;  // LEB128 bytes of a code <= 2^25

std::string error_text(uint32_t rank, uint64_t round, const std::string& tensor, uint64_t at,
                       const std::string& reason) {
  std::string s =
      "PULSELoCo contribution from rank " + std::to_string(rank) + ", round " + std::to_string(round);
  if (!tensor.empty()) s += ", tensor '" + tensor + "'";
  return s + " at byte " + std::to_string(at) + ": " + reason;
}

uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian host (x86-64, AArch64)
  return v;
}

uint64_t read_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

bool is_finite_bits(uint32_t bits) {
  return (bits & 0x7f800000u) != 0x7f800000u;
}

const char* index_coding_name(LocoIndexCoding c) {
  switch (c) {
    case LocoIndexCoding::VarintGaps:
      return "gap";
    case LocoIndexCoding::Bitmap:
      return "bitmap";
    case LocoIndexCoding::Dense:
      return "dense";
  }
  return "?";
}

void put_uleb(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 128) {
    out.push_back(static_cast<uint8_t>((v & 127) | 128));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

/// zstd of [src, src+n) at `level`, or an empty vector when that is not strictly smaller than n.
std::vector<uint8_t> zstd_if_smaller(const uint8_t* src, size_t n, int level) {
  std::vector<uint8_t> out;
  if (level <= 0 || n == 0) return out;
  out.resize(ZSTD_compressBound(n));
  PooledCCtx cctx;
  ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
  const size_t r = ZSTD_compressCCtx(cctx.get(), out.data(), out.size(), src, n, level);
  if (ZSTD_isError(r))
    throw std::runtime_error(std::string("PULSELoCo encode: zstd failed: ") + ZSTD_getErrorName(r));
  if (r >= n) return {};
  out.resize(r);
  return out;
}

/// One tensor's encoded entry and streams.
struct EncodedTensor {
  uint8_t codings = 0;  // bits 0-1 index coding, bits 2-3 index codec, bits 4-5 value codec
  uint64_t count = 0, index_raw = 0;
  uint8_t plane_mask = 0;  // BytePlanes: zstd planes
  uint64_t plane_bytes[4] = {0, 0, 0, 0};
  std::vector<uint8_t> index, values;  // stored streams (Ulp: `values` is the stored count stream)
  uint64_t count_raw = 0;              // Ulp: count stream before compression
  std::vector<uint8_t> escapes;        // Ulp: raw FP32 escape values, 4 bytes each
};

/// A stored stream: raw or zstd, whichever is smaller (raw on ties).
struct StoredStream {
  LocoStreamCodec codec = LocoStreamCodec::Raw;
  std::vector<uint8_t> bytes;
};

StoredStream store_smallest(std::vector<uint8_t> raw, int level) {
  StoredStream s;
  std::vector<uint8_t> z = zstd_if_smaller(raw.data(), raw.size(), level);
  if (!z.empty()) {
    s.codec = LocoStreamCodec::Zstd;
    s.bytes = std::move(z);
  } else {
    s.bytes = std::move(raw);
  }
  return s;
}

/// zigzag(c) for a count c != 0 (>= 1), or 0 for an escape.
uint64_t count_code(int32_t c) {
  if (c == kernels::kLocoUlpEscape) return 0;
  const int64_t v = c;
  return static_cast<uint64_t>((v << 1) ^ (v >> 63));
}

int32_t count_of_code(uint64_t code) {
  return static_cast<int32_t>(static_cast<int64_t>(code >> 1) ^ -static_cast<int64_t>(code & 1));
}

EncodedTensor encode_tensor(const LocoTensorSpec& spec, const LocoFiredView& f, int level, LocoValues mode) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("encode_loco_contribution: tensor '" + spec.name + "': " + why);
  };
  if (spec.numel > kMaxNumel) throw bad("numel " + std::to_string(spec.numel) + " exceeds 2^32");
  if (f.count > spec.numel)
    throw bad(std::to_string(f.count) + " fired entries in " + std::to_string(spec.numel) + " elements");
  EncodedTensor e;
  e.count = f.count;
  if (f.count == 0) return e;
  const bool ulp = mode == LocoValues::Ulp;
  if (!f.indices || (!ulp && !f.values))
    throw bad("null index or value pointer with count " + std::to_string(f.count));
  if (ulp && !f.counts) throw bad("null count pointer with count " + std::to_string(f.count));
  for (uint64_t j = 0; j < f.count; ++j) {
    if (f.indices[j] >= spec.numel)
      throw bad("index " + std::to_string(f.indices[j]) + " (entry " + std::to_string(j) + ") >= numel " +
                std::to_string(spec.numel));
    if (j > 0 && f.indices[j] <= f.indices[j - 1])
      throw bad("indices not strictly ascending at entry " + std::to_string(j));
    const bool escape = ulp && f.counts[j] == kernels::kLocoUlpEscape;
    if (ulp && !escape &&
        (f.counts[j] == 0 || f.counts[j] > kernels::kLocoUlpMaxCount ||
         f.counts[j] < -kernels::kLocoUlpMaxCount))
      throw bad("count " + std::to_string(f.counts[j]) + " at entry " + std::to_string(j) +
                " (needs 1 <= |count| <= 2^24, or the escape code)");
    if (ulp && !escape) continue;
    if (!f.values) throw bad("null value pointer with an escape at entry " + std::to_string(j));
    uint32_t bits;
    std::memcpy(&bits, &f.values[j], 4);
    if (!is_finite_bits(bits)) throw bad("non-finite value at entry " + std::to_string(j));
  }

  // Index stream: dense when everything fired, else the smaller stored size of gaps and bitmap.
  LocoIndexCoding coding = LocoIndexCoding::Dense;
  StoredStream index;
  if (f.count < spec.numel) {
    GapEncoder gaps;
    gaps.reserve(f.count);
    for (uint64_t j = 0; j < f.count; ++j) gaps.add(f.indices[j]);
    std::vector<uint8_t> gap_raw;
    gap_raw.reserve(gaps.bytes());
    gaps.append_to(gap_raw);
    const uint64_t gap_raw_bytes = gap_raw.size();
    const uint64_t bitmap_raw_bytes = bitmap_bytes(spec.numel);
    StoredStream g = store_smallest(std::move(gap_raw), level);
    // The bitmap is built and tried only where it can win: at most twice the raw gap stream (above
    // ~6% density). Below that a zstd bitmap was measured 1.2-1.8x larger than the zstd gaps (4M
    // elements, 1-5%), and building and compressing it would cost more than the rest of the tensor.
    if (bitmap_raw_bytes <= 2 * gap_raw_bytes) {
      std::vector<uint8_t> bitmap(bitmap_raw_bytes, 0);
      for (uint64_t j = 0; j < f.count; ++j)
        bitmap[f.indices[j] >> 3] |= static_cast<uint8_t>(1u << (f.indices[j] & 7));
      StoredStream b = store_smallest(std::move(bitmap), level);
      if (b.bytes.size() < g.bytes.size()) {
        coding = LocoIndexCoding::Bitmap;
        index = std::move(b);
        e.index_raw = bitmap_raw_bytes;
      }
    }
    if (coding != LocoIndexCoding::Bitmap) {
      coding = LocoIndexCoding::VarintGaps;
      index = std::move(g);
      e.index_raw = gap_raw_bytes;
    }
  }
  e.index = std::move(index.bytes);

  if (ulp) {  // zigzag LEB128 count codes, raw or zstd; escapes as raw FP32 in entry order
    std::vector<uint8_t> codes;
    codes.reserve(f.count + f.count / 4);
    for (uint64_t j = 0; j < f.count; ++j) {
      put_uleb(codes, count_code(f.counts[j]));
      if (f.counts[j] == kernels::kLocoUlpEscape) {
        const auto* b = reinterpret_cast<const uint8_t*>(&f.values[j]);  // little-endian host
        e.escapes.insert(e.escapes.end(), b, b + 4);
      }
    }
    e.count_raw = codes.size();
    StoredStream c = store_smallest(std::move(codes), level);
    e.values = std::move(c.bytes);
    e.codings = static_cast<uint8_t>(static_cast<uint8_t>(coding) | (static_cast<uint8_t>(index.codec) << 2) |
                                     (static_cast<uint8_t>(c.codec) << 4));
    return e;
  }

  // Values: raw, zstd of the raw bytes, or byte planes each raw or zstd; the smallest (raw on ties,
  // then planes).
  const size_t m = static_cast<size_t>(f.count);
  std::vector<uint8_t> raw(4 * m);
  std::memcpy(raw.data(), f.values, raw.size());  // little-endian host
  LocoStreamCodec vcodec = LocoStreamCodec::Raw;
  if (level > 0) {
    std::vector<uint8_t> planes(4 * m);
    for (size_t j = 0; j < m; ++j)
      for (size_t b = 0; b < 4; ++b) planes[b * m + j] = raw[4 * j + b];
    std::vector<uint8_t> packed;
    uint8_t mask = 0;
    uint64_t plane_bytes[4];
    for (size_t b = 0; b < 4; ++b) {
      std::vector<uint8_t> z = zstd_if_smaller(planes.data() + b * m, m, level);
      if (!z.empty()) {
        mask = static_cast<uint8_t>(mask | (1u << b));
        packed.insert(packed.end(), z.begin(), z.end());
        plane_bytes[b] = z.size();
      } else {
        packed.insert(packed.end(), planes.begin() + static_cast<std::ptrdiff_t>(b * m),
                      planes.begin() + static_cast<std::ptrdiff_t>((b + 1) * m));
        plane_bytes[b] = m;
      }
    }
    std::vector<uint8_t> whole = zstd_if_smaller(raw.data(), raw.size(), level);
    if (mask != 0 && packed.size() < raw.size() && (whole.empty() || packed.size() <= whole.size())) {
      vcodec = LocoStreamCodec::BytePlanes;
      e.plane_mask = mask;
      std::copy(plane_bytes, plane_bytes + 4, e.plane_bytes);
      raw = std::move(packed);
    } else if (!whole.empty()) {
      vcodec = LocoStreamCodec::Zstd;
      raw = std::move(whole);
    }
  }
  e.values = std::move(raw);
  e.codings = static_cast<uint8_t>(static_cast<uint8_t>(coding) | (static_cast<uint8_t>(index.codec) << 2) |
                                   (static_cast<uint8_t>(vcodec) << 4));
  return e;
}

/// Bounds-checked reader of the tensor entries; errors carry the offset of the field.
class EntryReader {
 public:
  EntryReader(const uint8_t* data, size_t end, size_t pos) : data_(data), end_(end), pos_(pos) {}
  uint8_t u8(const std::string& field, std::string& err) {
    if (pos_ >= end_) {
      err = "header truncated reading " + field;
      return 0;
    }
    return data_[pos_++];
  }
  /// ULEB128 of at most 10 bytes fitting 64 bits.
  uint64_t uleb(const std::string& field, std::string& err) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos_ >= end_) {
        err = "header truncated reading " + field;
        return 0;
      }
      const uint8_t b = data_[pos_++];
      if (shift == 63 && (b & 0x7e)) {
        err = field + " overflows 64 bits";
        return 0;
      }
      v |= static_cast<uint64_t>(b & 127) << shift;
      if (!(b & 128)) return v;
      if (shift == 63) {
        err = field + " overflows 64 bits";
        return 0;
      }
    }
  }
  size_t pos() const { return pos_; }

 private:
  const uint8_t* data_;
  size_t end_, pos_;
};

/// Parses and checks the header. With `table` (decode) also the caller's expectations: rank == src,
/// world size, round, table hash and tensor count, sizes against numel; without (inspect) only what the
/// buffer says about itself.
LocoContributionInfo parse(const uint8_t* data, size_t size, uint32_t src, uint32_t world, uint64_t round,
                           const std::vector<LocoTensorSpec>* table, LocoValues expected_values) {
  auto fail = [&](uint64_t at, const std::string& why, const std::string& tensor = std::string()) {
    return LocoError(src, round, tensor, at, why);
  };
  if (size == 0 || (data == nullptr)) throw fail(0, "empty buffer");
  if (size < sizeof kMagic)
    throw fail(0, "truncated: " + std::to_string(size) + " bytes, shorter than the magic");
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0)
    throw fail(0, "bad magic (not a PULSELoCo contribution)");
  if (size < kFixedHeaderBytes + kChecksumBytes)
    throw fail(size, "truncated: " + std::to_string(size) + " bytes, shorter than the fixed header");
  ByteReader r(data, size, sizeof kMagic);
  const uint32_t version = r.u32("format_version");
  if (version < kLocoFormatVersionOldest || version > kLocoFormatVersion)
    throw fail(8, "format version " + std::to_string(version) + ", this reader knows versions " +
                      std::to_string(kLocoFormatVersionOldest) + " to " + std::to_string(kLocoFormatVersion));
  // Version 1's field 12 is flags (always 0): FP32 values, version 2's value mode 0.
  const uint32_t value_mode = r.u32(version == 1 ? "flags" : "value_mode");
  if (version == 1 && value_mode != 0) throw fail(12, "unknown flags " + std::to_string(value_mode));
  if (value_mode > static_cast<uint32_t>(LocoValues::Ulp))
    throw fail(12, "unknown value mode " + std::to_string(value_mode));
  const auto values = static_cast<LocoValues>(value_mode);
  const bool ulp = values == LocoValues::Ulp;
  const uint64_t total = r.u64("total_bytes");
  if (total != size)
    throw fail(16, (size < total ? "truncated: " : "overlong: ") + std::to_string(size) +
                       " bytes received, header says " + std::to_string(total));
  const uint64_t stored_sum = read_u64(data + size - kChecksumBytes);
  const uint64_t computed = xxh3_64(data, size - kChecksumBytes);
  if (stored_sum != computed)
    throw fail(size - kChecksumBytes,
               "checksum mismatch: stored " + hash_hex(stored_sum) + ", computed " + hash_hex(computed));
  LocoContributionInfo info;
  info.version = version;
  info.values = values;
  info.total_bytes = size;
  info.rank = r.u32("rank");
  info.world_size = r.u32("world_size");
  info.round = r.u64("round");
  info.table_hash = r.u64("table_hash");
  const uint64_t n = r.u64("n_tensors");
  const size_t end = size - kChecksumBytes;
  if (table) {
    if (values != expected_values)
      throw fail(12, std::string("buffer has ") + loco_values_name(values) + " values, expected " +
                         loco_values_name(expected_values) + " (multi.values differs between ranks?)");
    if (info.rank != src)
      throw fail(24, "buffer says it comes from rank " + std::to_string(info.rank) + ", received from rank " +
                         std::to_string(src));
    if (info.world_size != world)
      throw fail(28, "buffer says world size " + std::to_string(info.world_size) + ", expected " +
                         std::to_string(world));
    if (info.round != round)
      throw fail(32, "buffer is for round " + std::to_string(info.round) + ", expected round " +
                         std::to_string(round));
    const uint64_t want = loco_table_hash(*table);
    if (info.table_hash != want)
      throw fail(40, "tensor table hash " + hash_hex(info.table_hash) + " differs from this rank's " +
                         hash_hex(want) + " (different model, tensor names, sizes or order)");
    if (n != table->size())
      throw fail(48,
                 "buffer has " + std::to_string(n) + " tensors, the table " + std::to_string(table->size()));
  }
  // Every entry takes >= 2 bytes: a bound on n before anything is allocated.
  if (n > (end - kFixedHeaderBytes) / 2)
    throw fail(48, "n_tensors " + std::to_string(n) + " cannot fit in " + std::to_string(size) + " bytes");
  info.tensors.resize(n);
  EntryReader er(data, end, kFixedHeaderBytes);
  std::string err;
  for (uint64_t t = 0; t < n; ++t) {
    const std::string name = table ? (*table)[t].name : "#" + std::to_string(t);
    LocoTensorInfo& ti = info.tensors[t];
    const size_t at = er.pos();
    const uint8_t codings = er.u8("tensor entry", err);
    if (!err.empty()) throw fail(at, err, name);
    const uint8_t ic = codings & 3, xc = (codings >> 2) & 3, vc = (codings >> 4) & 3;
    if (ic > 2 || xc > 1 || vc > (ulp ? 1 : 2) || (codings >> 6))
      throw fail(at, "unknown codings byte " + std::to_string(codings), name);
    ti.index_coding = static_cast<LocoIndexCoding>(ic);
    ti.index_codec = static_cast<LocoStreamCodec>(xc);
    ti.value_codec = static_cast<LocoStreamCodec>(vc);
    ti.count = er.uleb("count", err);
    if (!err.empty()) throw fail(er.pos(), err, name);
    if (ti.count == 0) {
      if (codings != 0)
        throw fail(at, "codings byte " + std::to_string(codings) + " on a tensor with nothing fired", name);
      continue;
    }
    const size_t sizes_at = er.pos();
    ti.index_raw_bytes = er.uleb("index_raw_bytes", err);
    if (err.empty()) ti.index_stored_bytes = er.uleb("index_stored_bytes", err);
    if (ulp) {
      if (err.empty()) ti.count_raw_bytes = er.uleb("count_raw_bytes", err);
      if (err.empty()) ti.count_stored_bytes = er.uleb("count_stored_bytes", err);
      if (err.empty()) ti.escapes = er.uleb("escapes", err);
      if (err.empty()) {
        if (ti.count <= kMaxNumel &&  // a larger count is refused below
            (ti.count_raw_bytes < ti.count || ti.count_raw_bytes > kMaxCountCodeBytes * ti.count))
          throw fail(sizes_at,
                     "count stream has " + std::to_string(ti.count_raw_bytes) + " bytes for " +
                         std::to_string(ti.count) + " entries (needs 1..4 per entry)",
                     name);
        if (ti.value_codec == LocoStreamCodec::Raw && ti.count_stored_bytes != ti.count_raw_bytes)
          throw fail(sizes_at,
                     "count stream stored raw with " + std::to_string(ti.count_stored_bytes) +
                         " bytes, raw size " + std::to_string(ti.count_raw_bytes),
                     name);
        if (ti.value_codec == LocoStreamCodec::Zstd && ti.count_stored_bytes == 0)
          throw fail(sizes_at, "zstd count stream is empty", name);
        if (ti.count_stored_bytes > size) throw fail(sizes_at, "count stream larger than the buffer", name);
        if (ti.escapes > ti.count)
          throw fail(sizes_at,
                     std::to_string(ti.escapes) + " escapes for " + std::to_string(ti.count) + " entries",
                     name);
        // Both terms are bounded (size, 2^64 / 8): no overflow.
        ti.value_stored_bytes = ti.count_stored_bytes + 4 * ti.escapes;
      }
    } else if (ti.value_codec == LocoStreamCodec::BytePlanes) {
      const size_t mask_at = er.pos();
      if (err.empty()) ti.plane_zstd_mask = er.u8("plane mask", err);
      if (err.empty() && (ti.plane_zstd_mask == 0 || ti.plane_zstd_mask > 15))
        throw fail(mask_at, "plane mask " + std::to_string(ti.plane_zstd_mask) + " (needs 1..15)", name);
      for (int b = 0; b < 4 && err.empty(); ++b) {
        if (ti.plane_zstd_mask >> b & 1) {
          const size_t plane_at = er.pos();
          ti.plane_stored_bytes[b] = er.uleb("plane stored bytes", err);
          if (err.empty() && (ti.plane_stored_bytes[b] == 0 || ti.plane_stored_bytes[b] > size))
            throw fail(plane_at,
                       "zstd plane " + std::to_string(b) + " of " + std::to_string(ti.plane_stored_bytes[b]) +
                           " bytes",
                       name);
        } else {
          ti.plane_stored_bytes[b] = ti.count;
        }
        ti.value_stored_bytes += ti.plane_stored_bytes[b];  // each <= size or count <= 2^32: no overflow
      }
    } else if (err.empty()) {
      ti.value_stored_bytes = er.uleb("value_stored_bytes", err);
    }
    if (!err.empty()) throw fail(er.pos(), err, name);
    if (ti.count > kMaxNumel || (table && ti.count > (*table)[t].numel))
      throw fail(at,
                 "count " + std::to_string(ti.count) + " exceeds numel" +
                     (table ? " " + std::to_string((*table)[t].numel) : std::string(" limit 2^32")),
                 name);
    // Sizes consistent with the codings.
    const std::string pre = std::string(index_coding_name(ti.index_coding)) + " index stream ";
    switch (ti.index_coding) {
      case LocoIndexCoding::Dense:
        if (ti.index_raw_bytes != 0 || ti.index_stored_bytes != 0 || ti.index_codec != LocoStreamCodec::Raw)
          throw fail(sizes_at, "dense tensor declares an index stream", name);
        if (table && ti.count != (*table)[t].numel)
          throw fail(at,
                     "dense coding with count " + std::to_string(ti.count) + " != numel " +
                         std::to_string((*table)[t].numel),
                     name);
        break;
      case LocoIndexCoding::Bitmap:
        if (table && ti.index_raw_bytes != bitmap_bytes((*table)[t].numel))
          throw fail(sizes_at,
                     pre + "has " + std::to_string(ti.index_raw_bytes) + " bytes, numel " +
                         std::to_string((*table)[t].numel) + " needs " +
                         std::to_string(bitmap_bytes((*table)[t].numel)),
                     name);
        if (ti.index_raw_bytes > bitmap_bytes(kMaxNumel)) throw fail(sizes_at, pre + "too large", name);
        break;
      case LocoIndexCoding::VarintGaps:
        if (ti.index_raw_bytes < ti.count || ti.index_raw_bytes > kMaxGapBytes * ti.count)
          throw fail(sizes_at,
                     pre + "has " + std::to_string(ti.index_raw_bytes) + " bytes for " +
                         std::to_string(ti.count) + " entries (needs 1..5 per entry)",
                     name);
        break;
    }
    if (ti.index_codec == LocoStreamCodec::Raw && ti.index_stored_bytes != ti.index_raw_bytes)
      throw fail(sizes_at,
                 pre + "stored raw with " + std::to_string(ti.index_stored_bytes) + " bytes, raw size " +
                     std::to_string(ti.index_raw_bytes),
                 name);
    if (ti.index_codec == LocoStreamCodec::Zstd && ti.index_stored_bytes == 0)
      throw fail(sizes_at, pre + "zstd stream is empty", name);
    if (!ulp && ti.value_codec == LocoStreamCodec::Raw && ti.value_stored_bytes != 4 * ti.count)
      throw fail(sizes_at,
                 "raw value stream has " + std::to_string(ti.value_stored_bytes) + " bytes for " +
                     std::to_string(ti.count) + " FP32 values",
                 name);
    if (!ulp && ti.value_codec == LocoStreamCodec::Zstd && ti.value_stored_bytes == 0)
      throw fail(sizes_at, "zstd value stream is empty", name);
  }
  info.header_bytes = er.pos();
  // Streams back to back after the entries; every size bounded by what is left (no overflow).
  uint64_t pos = info.header_bytes;
  for (uint64_t t = 0; t < n; ++t) {
    LocoTensorInfo& ti = info.tensors[t];
    if (ti.count == 0) {
      ti.index_offset = ti.value_offset = pos;
      continue;
    }
    const std::string name = table ? (*table)[t].name : "#" + std::to_string(t);
    ti.index_offset = pos;
    if (ti.index_stored_bytes > end - pos)
      throw fail(pos,
                 "index stream of " + std::to_string(ti.index_stored_bytes) +
                     " bytes runs past the payload end " + std::to_string(end),
                 name);
    pos += ti.index_stored_bytes;
    ti.value_offset = pos;
    if (ti.value_stored_bytes > end - pos)
      throw fail(pos,
                 "value stream of " + std::to_string(ti.value_stored_bytes) +
                     " bytes runs past the payload end " + std::to_string(end),
                 name);
    ti.escape_offset = pos + ti.count_stored_bytes;
    pos += ti.value_stored_bytes;
    info.fired += ti.count;
  }
  if (pos != end)
    throw fail(pos, std::to_string(end - pos) + " trailing bytes between the last stream and the checksum");
  info.payload_bytes = end - info.header_bytes;
  return info;
}

/// Decompresses a zstd stream to exactly `raw_bytes` into `out`; returns an error text or "".
std::string unzstd(const uint8_t* src, size_t n, std::vector<uint8_t>& out, uint64_t raw_bytes) {
  out.resize(raw_bytes);
  PooledDCtx dctx;
  ZSTD_DCtx_reset(dctx.get(), ZSTD_reset_session_and_parameters);
  const size_t r = ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), src, n);
  if (ZSTD_isError(r)) return std::string("zstd: ") + ZSTD_getErrorName(r);
  if (r != raw_bytes)
    return "decompressed to " + std::to_string(r) + " bytes, header says " + std::to_string(raw_bytes);
  return "";
}

/// The reason for a PatchError of validate_index_stream, without its "patch tensor 'NAME': " prefix.
std::string index_reason(LocoIndexCoding coding, uint64_t numel, const std::string& tensor,
                         const std::string& what, bool compressed) {
  const std::string prefix = "patch tensor '" + tensor + "': ";
  const std::string inner = what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what;
  return std::string(index_coding_name(coding)) + " index stream invalid for numel " + std::to_string(numel) +
         ": " + inner + (compressed ? " (offset in the decompressed stream)" : " (offset in the buffer)");
}

/// The Ulp count and escape streams of a tensor whose indices are decoded (out.indices).
void decode_counts(const uint8_t* data, const LocoTensorInfo& ti, const LocoTensorSpec& spec, uint32_t src,
                   uint64_t round, LocoContribution::Tensor& out) {
  auto fail = [&](uint64_t at, const std::string& why) { return LocoError(src, round, spec.name, at, why); };
  std::vector<uint8_t> scratch;
  const uint8_t* c = data + ti.value_offset;
  const bool compressed = ti.value_codec == LocoStreamCodec::Zstd;
  if (compressed) {
    const std::string e = unzstd(c, ti.count_stored_bytes, scratch, ti.count_raw_bytes);
    if (!e.empty()) throw fail(ti.value_offset, "count stream " + e);
    c = scratch.data();
  }
  const char* where = compressed ? " (offset in the decompressed stream)" : " (offset in the buffer)";
  const uint64_t base = compressed ? 0 : ti.value_offset;
  out.counts.resize(ti.count);
  out.values.assign(ti.count, 0.0f);
  uint64_t pos = 0, escapes = 0;
  for (uint64_t j = 0; j < ti.count; ++j) {
    const uint64_t at = pos;
    uint64_t code = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= ti.count_raw_bytes)
        throw fail(ti.value_offset, "count stream ends inside entry " + std::to_string(j) + " at byte " +
                                        std::to_string(base + at) + where);
      const uint8_t b = c[pos++];
      code |= static_cast<uint64_t>(b & 127) << shift;
      if (!(b & 128)) break;
      if (shift >= 21)  // a 5th byte: more than kMaxCountCodeBytes
        throw fail(ti.value_offset, "count code of entry " + std::to_string(j) +
                                        " longer than 4 bytes at byte " + std::to_string(base + at) + where);
    }
    if (code > kMaxCountCode)
      throw fail(ti.value_offset, "count code " + std::to_string(code) + " of entry " + std::to_string(j) +
                                      " beyond |count| <= 2^24 at byte " + std::to_string(base + at) + where);
    if (code != 0) {
      out.counts[j] = count_of_code(code);
      continue;
    }
    if (escapes == ti.escapes)
      throw fail(ti.value_offset, "more escape codes than the " + std::to_string(ti.escapes) + " declared");
    const uint32_t bits = read_u32(data + ti.escape_offset + 4 * escapes);
    if (!is_finite_bits(bits))
      throw fail(ti.escape_offset + 4 * escapes,
                 "non-finite escape value (bits 0x" + hash_hex(bits).substr(8) + ") at entry " +
                     std::to_string(j) + ", index " + std::to_string(out.indices[j]));
    ++escapes;
    out.counts[j] = kernels::kLocoUlpEscape;
    std::memcpy(&out.values[j], &bits, 4);
  }
  if (pos != ti.count_raw_bytes)
    throw fail(ti.value_offset,
               std::to_string(ti.count_raw_bytes - pos) + " trailing bytes in the count stream");
  if (escapes != ti.escapes)
    throw fail(ti.value_offset,
               std::to_string(escapes) + " escape codes, the header declares " + std::to_string(ti.escapes));
}

void decode_tensor(const uint8_t* data, const LocoTensorInfo& ti, const LocoTensorSpec& spec, uint32_t src,
                   uint64_t round, LocoValues values, LocoContribution::Tensor& out) {
  auto fail = [&](uint64_t at, const std::string& why) { return LocoError(src, round, spec.name, at, why); };
  if (ti.count == 0) return;
  // Index stream.
  std::vector<uint8_t> scratch;
  const uint8_t* index = data + ti.index_offset;
  if (ti.index_codec == LocoStreamCodec::Zstd) {
    const std::string e = unzstd(index, ti.index_stored_bytes, scratch, ti.index_raw_bytes);
    if (!e.empty()) throw fail(ti.index_offset, "index stream " + e);
    index = scratch.data();
  }
  const uint8_t coding = static_cast<uint8_t>(ti.index_coding);
  const bool compressed = ti.index_codec == LocoStreamCodec::Zstd;
  try {
    validate_index_stream(spec.name, coding, index, ti.index_raw_bytes, ti.count, spec.numel,
                          compressed ? 0 : ti.index_offset);
  } catch (const PatchError& e) {
    throw fail(ti.index_offset, index_reason(ti.index_coding, spec.numel, spec.name, e.what(), compressed));
  }
  out.indices.resize(ti.count);
  if (ti.index_coding == LocoIndexCoding::Dense) {
    std::iota(out.indices.begin(), out.indices.end(), uint32_t{0});
  } else {
    PositionIter it(coding, index, ti.index_raw_bytes, ti.count, spec.numel);
    for (uint64_t j = 0; j < ti.count; ++j) out.indices[j] = static_cast<uint32_t>(it.next());
  }
  if (values == LocoValues::Ulp) return decode_counts(data, ti, spec, src, round, out);
  // Value stream: `v` = 4 * count raw bytes, interleaved or (planes) as 4 planes of count bytes.
  const uint64_t vbytes = 4 * ti.count;
  const uint8_t* v = data + ti.value_offset;
  std::vector<uint8_t> vscratch;
  const bool planes = ti.value_codec == LocoStreamCodec::BytePlanes;
  if (ti.value_codec == LocoStreamCodec::Zstd) {
    const std::string e = unzstd(v, ti.value_stored_bytes, vscratch, vbytes);
    if (!e.empty()) throw fail(ti.value_offset, "value stream " + e);
    v = vscratch.data();
  } else if (planes) {
    vscratch.resize(vbytes);
    std::vector<uint8_t> plane;
    uint64_t at = ti.value_offset;
    for (int b = 0; b < 4; ++b) {
      uint8_t* dst = vscratch.data() + b * ti.count;
      if (ti.plane_zstd_mask >> b & 1) {
        const std::string e = unzstd(data + at, ti.plane_stored_bytes[b], plane, ti.count);
        if (!e.empty()) throw fail(at, "value byte plane " + std::to_string(b) + " " + e);
        std::memcpy(dst, plane.data(), ti.count);
      } else {
        std::memcpy(dst, data + at, ti.count);
      }
      at += ti.plane_stored_bytes[b];
    }
    v = vscratch.data();
  }
  out.values.resize(ti.count);
  for (uint64_t j = 0; j < ti.count; ++j) {
    uint32_t bits;
    if (planes) {
      bits = static_cast<uint32_t>(v[j]) | static_cast<uint32_t>(v[ti.count + j]) << 8 |
             static_cast<uint32_t>(v[2 * ti.count + j]) << 16 |
             static_cast<uint32_t>(v[3 * ti.count + j]) << 24;
    } else {
      bits = read_u32(v + 4 * j);
    }
    if (!is_finite_bits(bits))
      throw fail(ti.value_offset, "non-finite value (bits 0x" + hash_hex(bits).substr(8) + ") at entry " +
                                      std::to_string(j) + ", index " + std::to_string(out.indices[j]));
    std::memcpy(&out.values[j], &bits, 4);
  }
}

void check_sums(const std::vector<LocoSumView>& sums, size_t n_tensors, const char* fn, LocoValues values) {
  if (sums.size() != n_tensors)
    throw std::invalid_argument(std::string(fn) + ": " + std::to_string(sums.size()) + " sum buffers for " +
                                std::to_string(n_tensors) + " tensors");
  for (size_t t = 0; t < sums.size(); ++t) {
    if (!sums[t].data && sums[t].numel > 0)
      throw std::invalid_argument(std::string(fn) + ": sum buffer " + std::to_string(t) + " is null");
    if (values == LocoValues::Ulp && !sums[t].global && sums[t].numel > 0)
      throw std::invalid_argument(std::string(fn) + ": ulp sums need the global weights of tensor " +
                                  std::to_string(t));
  }
}

void check_indices_fit(const LocoContribution& c, const std::vector<LocoSumView>& sums, const char* fn) {
  for (size_t t = 0; t < sums.size(); ++t) {
    const auto& ct = c.tensors[t];
    if (ct.values.size() != ct.indices.size() ||
        ct.counts.size() != (c.values == LocoValues::Ulp ? ct.indices.size() : 0))
      throw std::invalid_argument(std::string(fn) + ": tensor " + std::to_string(t) + " has " +
                                  std::to_string(ct.indices.size()) + " indices, " +
                                  std::to_string(ct.values.size()) + " values and " +
                                  std::to_string(ct.counts.size()) + " counts");
    for (uint32_t i : ct.indices)
      if (i >= sums[t].numel)
        throw std::invalid_argument(std::string(fn) + ": rank " + std::to_string(c.rank) + " tensor " +
                                    std::to_string(t) + " index " + std::to_string(i) + " >= sum numel " +
                                    std::to_string(sums[t].numel));
  }
}

void add_tensor(const LocoContribution::Tensor& ct, float* sum) {
  const size_t m = ct.indices.size();
  const uint32_t* idx = ct.indices.data();
  const float* val = ct.values.data();
  for (size_t j = 0; j < m; ++j) sum[idx[j]] += val[j];
}

/// Ulp: counts into the exact int64 sums, escapes into the FP32 sums.
void add_counts(const LocoContribution::Tensor& ct, int64_t* counts, float* escapes) {
  const size_t m = ct.indices.size();
  for (size_t j = 0; j < m; ++j) {
    if (ct.counts[j] == kernels::kLocoUlpEscape)
      escapes[ct.indices[j]] += ct.values[j];
    else
      counts[ct.indices[j]] += ct.counts[j];
  }
}

/// Ulp: sum[i] = float(counts[i]) * step(global[i]) + sum[i] (the escapes' sum).
void finish_ulp_sum(const int64_t* counts, const float* global, float* sum, uint64_t numel) {
  for (uint64_t i = 0; i < numel; ++i)
    sum[i] = static_cast<float>(counts[i]) * kernels::loco_ulp_step(global[i]) + sum[i];
}

}  // namespace

LocoError::LocoError(uint32_t source_rank_, uint64_t round_, std::string tensor_, uint64_t byte_offset_,
                     const std::string& reason_)
    : std::runtime_error(error_text(source_rank_, round_, tensor_, byte_offset_, reason_)),
      source_rank(source_rank_),
      round(round_),
      tensor(std::move(tensor_)),
      byte_offset(byte_offset_),
      reason(reason_) {}

const char* loco_values_name(LocoValues v) {
  switch (v) {
    case LocoValues::Fp32:
      return "fp32";
    case LocoValues::Ulp:
      return "ulp";
  }
  return "?";
}

bool loco_values_from(const char* name, LocoValues* v) {
  const std::string s = name ? name : "";
  if (s == "fp32") return *v = LocoValues::Fp32, true;
  if (s == "ulp") return *v = LocoValues::Ulp, true;
  return false;
}

uint64_t loco_table_hash(const std::vector<LocoTensorSpec>& table) {
  std::vector<uint8_t> rec;
  ByteWriter w(rec);
  w.u64(table.size());
  for (const auto& t : table) {
    w.u64(t.name.size());
    w.bytes(t.name.data(), t.name.size());
    w.u64(t.numel);
  }
  return xxh3_64(rec.data(), rec.size());
}

std::vector<uint8_t> encode_loco_contribution(uint32_t rank, uint32_t world_size, uint64_t round,
                                              const std::vector<LocoTensorSpec>& table,
                                              const std::vector<LocoFiredView>& fired,
                                              const LocoEncodeOptions& options) {
  if (world_size == 0 || rank >= world_size)
    throw std::invalid_argument("encode_loco_contribution: rank " + std::to_string(rank) +
                                " outside world size " + std::to_string(world_size));
  if (fired.size() != table.size())
    throw std::invalid_argument("encode_loco_contribution: " + std::to_string(fired.size()) +
                                " fired sets for a table of " + std::to_string(table.size()) + " tensors");
  if (options.values != LocoValues::Fp32 && options.values != LocoValues::Ulp)
    throw std::invalid_argument("encode_loco_contribution: unknown value mode " +
                                std::to_string(static_cast<uint32_t>(options.values)));
  const int level = std::clamp(options.zstd_level, 0, ZSTD_maxCLevel());
  std::vector<EncodedTensor> enc(table.size());
  std::vector<size_t> order(table.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return fired[a].count > fired[b].count; });
  parallel_for(order.size(), options.threads, [&](size_t k) {
    enc[order[k]] = encode_tensor(table[order[k]], fired[order[k]], level, options.values);
  });

  std::vector<uint8_t> entries;
  uint64_t payload = 0;
  for (const auto& e : enc) {
    entries.push_back(e.codings);
    put_uleb(entries, e.count);
    if (e.count == 0) continue;
    put_uleb(entries, e.index_raw);
    put_uleb(entries, e.index.size());
    if (options.values == LocoValues::Ulp) {
      put_uleb(entries, e.count_raw);
      put_uleb(entries, e.values.size());
      put_uleb(entries, e.escapes.size() / 4);
    } else if ((e.codings >> 4) == static_cast<uint8_t>(LocoStreamCodec::BytePlanes)) {
      entries.push_back(e.plane_mask);
      for (int b = 0; b < 4; ++b)
        if (e.plane_mask >> b & 1) put_uleb(entries, e.plane_bytes[b]);
    } else {
      put_uleb(entries, e.values.size());
    }
    payload += e.index.size() + e.values.size() + e.escapes.size();
  }
  const uint64_t total = kFixedHeaderBytes + entries.size() + payload + kChecksumBytes;
  std::vector<uint8_t> out;
  out.reserve(total);
  ByteWriter w(out);
  w.bytes(kMagic, sizeof kMagic);
  w.u32(kLocoFormatVersion);
  w.u32(static_cast<uint32_t>(options.values));
  w.u64(total);
  w.u32(rank);
  w.u32(world_size);
  w.u64(round);
  w.u64(loco_table_hash(table));
  w.u64(table.size());
  w.bytes(entries.data(), entries.size());
  for (const auto& e : enc) {
    w.bytes(e.index.data(), e.index.size());
    w.bytes(e.values.data(), e.values.size());
    w.bytes(e.escapes.data(), e.escapes.size());
  }
  w.u64(xxh3_64(out.data(), out.size()));
  return out;
}

LocoContributionInfo inspect_loco_contribution(const uint8_t* data, size_t size, uint32_t source_rank,
                                               uint64_t round) {
  return parse(data, size, source_rank, 0, round, nullptr, LocoValues::Fp32);
}

LocoContribution decode_loco_contribution(const uint8_t* data, size_t size, uint32_t source_rank,
                                          uint32_t world_size, uint64_t round,
                                          const std::vector<LocoTensorSpec>& table, LocoValues values) {
  if (world_size == 0 || source_rank >= world_size)
    throw std::invalid_argument("decode_loco_contribution: source rank " + std::to_string(source_rank) +
                                " outside world size " + std::to_string(world_size));
  const LocoContributionInfo info = parse(data, size, source_rank, world_size, round, &table, values);
  LocoContribution c;
  c.values = info.values;
  c.rank = info.rank;
  c.world_size = info.world_size;
  c.round = info.round;
  c.tensors.resize(table.size());
  for (size_t t = 0; t < table.size(); ++t)
    decode_tensor(data, info.tensors[t], table[t], source_rank, round, info.values, c.tensors[t]);
  return c;
}

void loco_accumulate(const LocoContribution& contribution, const std::vector<LocoSumView>& sums) {
  check_sums(sums, contribution.tensors.size(), "loco_accumulate", contribution.values);
  check_indices_fit(contribution, sums, "loco_accumulate");
  for (size_t t = 0; t < sums.size(); ++t) {
    const auto& ct = contribution.tensors[t];
    if (contribution.values != LocoValues::Ulp) {
      add_tensor(ct, sums[t].data);
      continue;
    }
    for (size_t j = 0; j < ct.indices.size(); ++j) {
      const uint32_t i = ct.indices[j];
      sums[t].data[i] += ct.counts[j] == kernels::kLocoUlpEscape
                             ? ct.values[j]
                             : static_cast<float>(ct.counts[j]) * kernels::loco_ulp_step(sums[t].global[i]);
    }
  }
}

void loco_sum_in_rank_order(const std::vector<LocoContribution>& by_rank,
                            const std::vector<LocoSumView>& sums, int threads) {
  const char* fn = "loco_sum_in_rank_order";
  if (by_rank.empty()) throw std::invalid_argument(std::string(fn) + ": no contributions");
  for (size_t r = 0; r < by_rank.size(); ++r) {
    const auto& c = by_rank[r];
    if (c.values != by_rank[0].values)
      throw std::invalid_argument(std::string(fn) + ": rank " + std::to_string(r) + " sent " +
                                  loco_values_name(c.values) + " values, rank 0 " +
                                  loco_values_name(by_rank[0].values));
    if (c.rank != r || c.world_size != by_rank.size() || c.round != by_rank[0].round)
      throw std::invalid_argument(std::string(fn) + ": entry " + std::to_string(r) + " is rank " +
                                  std::to_string(c.rank) + " of " + std::to_string(c.world_size) +
                                  ", round " + std::to_string(c.round) + "; expected rank " +
                                  std::to_string(r) + " of " + std::to_string(by_rank.size()) + ", round " +
                                  std::to_string(by_rank[0].round));
    check_sums(sums, c.tensors.size(), fn, c.values);
    check_indices_fit(c, sums, fn);
  }
  const bool ulp = by_rank[0].values == LocoValues::Ulp;
  // Biggest tensors first; each tensor's elements are summed by one thread in rank order.
  std::vector<size_t> order(sums.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sums[a].numel > sums[b].numel; });
  parallel_for(order.size(), threads, [&](size_t k) {
    const size_t t = order[k];
    std::fill(sums[t].data, sums[t].data + sums[t].numel, 0.0f);
    if (!ulp) {
      for (const auto& c : by_rank) add_tensor(c.tensors[t], sums[t].data);
      return;
    }
    std::vector<int64_t> counts(sums[t].numel, 0);  // |sum| <= W 2^24 < 2^56 for any uint32 W
    for (const auto& c : by_rank) add_counts(c.tensors[t], counts.data(), sums[t].data);
    finish_ulp_sum(counts.data(), sums[t].global, sums[t].data, sums[t].numel);
  });
}

std::vector<LocoContribution> loco_decode_and_sum(const std::vector<LocoBufferView>& buffers, uint64_t round,
                                                  const std::vector<LocoTensorSpec>& table,
                                                  const std::vector<LocoSumView>& sums, int threads,
                                                  LocoValues values) {
  if (buffers.empty()) throw std::invalid_argument("loco_decode_and_sum: no buffers");
  check_sums(sums, table.size(), "loco_decode_and_sum", values);
  for (size_t t = 0; t < table.size(); ++t)
    if (sums[t].numel != table[t].numel)
      throw std::invalid_argument("loco_decode_and_sum: sum buffer of tensor '" + table[t].name + "' has " +
                                  std::to_string(sums[t].numel) + " elements, the table " +
                                  std::to_string(table[t].numel));
  const auto world = static_cast<uint32_t>(buffers.size());
  std::vector<LocoContribution> by_rank(buffers.size());
  std::vector<std::exception_ptr> errors(buffers.size());
  parallel_for(buffers.size(), threads, [&](size_t r) {
    try {
      by_rank[r] = decode_loco_contribution(buffers[r].data, buffers[r].size, static_cast<uint32_t>(r), world,
                                            round, table, values);
    } catch (...) {
      errors[r] = std::current_exception();  // keep going: the lowest rank's error is reported
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  loco_sum_in_rank_order(by_rank, sums, threads);
  return by_rank;
}

uint64_t loco_dense_bytes(const std::vector<LocoTensorSpec>& table) {
  uint64_t n = 0;
  for (const auto& t : table) n += t.numel;
  return 4 * n;
}

uint64_t loco_reference_padded_bytes(const std::vector<std::vector<uint64_t>>& counts) {
  if (counts.empty()) return 0;
  const size_t n = counts[0].size();
  uint64_t total = 0;
  for (const auto& row : counts)
    if (row.size() != n)
      throw std::invalid_argument("loco_reference_padded_bytes: ragged counts (" +
                                  std::to_string(row.size()) + " vs " + std::to_string(n) + " tensors)");
  for (size_t t = 0; t < n; ++t) {
    uint64_t m = 0;
    for (const auto& row : counts) m = std::max(m, row[t]);
    total += 12 * m;
  }
  return total;
}

uint64_t loco_reference_unpadded_bytes(const std::vector<uint64_t>& counts) {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return 12 * n;
}

std::vector<uint64_t> loco_fired_counts(const std::vector<LocoFiredView>& fired) {
  std::vector<uint64_t> out;
  out.reserve(fired.size());
  for (const auto& f : fired) out.push_back(f.count);
  return out;
}

}  // namespace pulse::sync
