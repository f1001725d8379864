#include "sync/patch_container.h"

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_compressSequences: literal-only frames (stable since zstd 1.5)
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "sync/byte_io.h"
#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/scratch_buffer.h"
#include "sync/value_coding.h"
#include "sync/zstd_context.h"

namespace pulse::sync {

namespace {
constexpr size_t kMaxNameBytes = 1 << 16;
constexpr uint32_t kMaxDims = 64;
constexpr uint64_t kMaxChunkBytes = 1ull << 31;
constexpr size_t kZstdBlockBytes = 128 << 10;  // ZSTD_BLOCKSIZE_MAX

/// A standard zstd frame holding only literals (Huffman coded, no LZ matches). On the near-random,
/// skewed bytes of index heads and value planes zstd's fast match finder takes matches that cost more
/// than they save (measured: 2.64 vs 2.25 bits per byte on BF16 delta planes); a pure entropy-coded
/// frame avoids that and stays decodable by any zstd. Returns 0 when it fails.
size_t compress_literals_only(ZSTD_CCtx* cctx, const uint8_t* src, size_t size, int level, uint8_t* out,
                              size_t capacity, bool entropy_coded = true) {
  std::vector<ZSTD_Sequence> seqs;
  for (size_t start = 0; start < size; start += kZstdBlockBytes)
    seqs.push_back(ZSTD_Sequence{0, static_cast<unsigned>(std::min(kZstdBlockBytes, size - start)), 0, 0});
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, std::max(level, 1));
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_blockDelimiters, ZSTD_sf_explicitBlockDelimiters);
  if (!entropy_coded) ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_disable);
  const size_t n = ZSTD_compressSequences(cctx, out, capacity, seqs.data(), seqs.size(), src, size);
  return ZSTD_isError(n) ? 0 : n;
}

// Pieces at least this long are compressed once (by entropy), shorter ones both ways. Trying both costs
// a level-3 normal frame, ~10x a literal-only one on skewed bytes (0.12 vs 1.1 GB/s on an absolute BF16
// high plane): with the old 256 KiB bound one 3.2 M-element tensor at 7% changed (three 225 KB planes)
// was a third of the zstd stage of a 20 M-element encode; the 32 KiB bound gives the same patch sizes
// there (7%: equal; 1%: +30 bytes of 261 K).
constexpr size_t kTryBothBytes = 32 << 10;
// Above this order-0 entropy (bits per byte) Huffman coding saves under 2.5% of the piece at ~1 GB/s;
// such pieces (the low byte of absolute BF16 values: mantissa bits) are framed with raw literals at
// ~10 GB/s instead.
constexpr double kRawLiteralBits = 7.8;

/// Order-0 entropy of the bytes in bits per byte, estimated from up to 16 KiB sampled evenly (16
/// pieces of 1 KiB): enough to tell a near-constant stream (< 1 bit) from a skewed one, at a fraction of
/// a full histogram's cost (64 KiB samples cost ~4% of encode time at 7% density).
double entropy_bits_per_byte(const uint8_t* p, size_t n) {
  constexpr size_t kPieces = 16, kPieceBytes = 1024;
  uint64_t hist[4][256] = {};
  auto count = [&](const uint8_t* q, size_t m) {
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
      ++hist[0][q[i]];
      ++hist[1][q[i + 1]];
      ++hist[2][q[i + 2]];
      ++hist[3][q[i + 3]];
    }
    for (; i < m; ++i) ++hist[0][q[i]];
  };
  size_t total = n;
  if (n <= kPieces * kPieceBytes) {
    count(p, n);
  } else {
    const size_t stride = n / kPieces;
    for (size_t k = 0; k < kPieces; ++k) count(p + k * stride, kPieceBytes);
    total = kPieces * kPieceBytes;
  }
  double bits = 0;
  for (int s = 0; s < 256; ++s) {
    const double c = static_cast<double>(hist[0][s] + hist[1][s] + hist[2][s] + hist[3][s]);
    if (c > 0) bits -= c * std::log2(c / static_cast<double>(total));
  }
  return bits / static_cast<double>(total);
}

// Streams shorter than this share a frame with the next one (a frame costs ~6-12 bytes).
constexpr size_t kMinFrameBytes = 4096;

/// Compresses one stream piece as one zstd frame into `out` (size set): the smaller of a normal frame at
/// `level` and a literal-only frame. Big pieces are compressed once, chosen by the order-0 entropy:
/// Huffman cannot code a byte below one bit, so near-constant streams (high value planes, varint tails)
/// need zstd's matches; the rest is coded best without them, and near-uniform bytes are not worth
/// coding at all. Small pieces: both, keep the smaller.
void compress_piece(const uint8_t* p, size_t n, int level, ScratchBuffer& out) {
  const PooledCCtx pooled;
  ZSTD_CCtx* cctx = pooled.get();
  const double bits = n >= kTryBothBytes ? entropy_bits_per_byte(p, n) : -1;
  ScratchBuffer other;
  size_t na = SIZE_MAX, nb = 0;
  auto normal_frame = [&](ScratchBuffer& a) {
    a.reserve(ZSTD_compressBound(n));
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    na = ZSTD_compressCCtx(cctx, a.data(), a.capacity(), p, n, level);
    if (ZSTD_isError(na)) throw PatchError(std::string("zstd compression failed: ") + ZSTD_getErrorName(na));
  };
  if (bits < 1.0) normal_frame(out);
  if (bits < 0 || bits >= 1.0) {
    ScratchBuffer& b = bits < 0 ? other : out;
    b.reserve(ZSTD_compressBound(n) + 64);
    nb = compress_literals_only(cctx, p, n, level, b.data(), b.capacity(), bits < kRawLiteralBits);
    if (nb == 0 && na == SIZE_MAX) {  // literal-only refused: fall back to a normal frame
      normal_frame(out);
    } else if (bits < 0 && nb && nb < na) {
      out = std::move(other);
    }
    if (nb && (bits >= 1.0 || nb < na)) na = nb;
  }
  out.set_size(na);
}

/// Where a chunk of `size` bytes is cut into frames: at the stream starts `cuts` (relative offsets),
/// merging pieces shorter than kMinFrameBytes. Returns the bounds, 0 first and `size` last.
std::vector<size_t> frame_bounds(size_t size, const std::vector<size_t>& cuts) {
  std::vector<size_t> bounds{0};
  for (size_t cut : cuts)
    if (cut > bounds.back() && cut < size && cut - bounds.back() >= kMinFrameBytes) bounds.push_back(cut);
  if (size - bounds.back() < kMinFrameBytes && bounds.size() > 1) bounds.pop_back();
  bounds.push_back(size);
  return bounds;
}

/// The container header (FORMAT.md) through its checksum.
std::vector<uint8_t> header_bytes_of(const PatchInfo& info, int zstd_level, uint64_t chunk_bytes,
                                     uint64_t payload_bytes, const std::vector<ChunkEntry>& chunks) {
  // The reader's limits (FORMAT.md), refused here so that no patch is written that no reader accepts.
  if (info.model_id.size() > kMaxNameBytes)
    throw PatchError("model_id is " + std::to_string(info.model_id.size()) +
                     " bytes; the format allows at most " + std::to_string(kMaxNameBytes));
  for (const auto& t : info.tensors) {
    if (t.name.size() > kMaxNameBytes)
      throw PatchError("tensor name '" + t.name.substr(0, 64) + "...' is " + std::to_string(t.name.size()) +
                       " bytes; the format allows at most " + std::to_string(kMaxNameBytes));
    if (t.shape.size() > kMaxDims)
      throw PatchError("tensor '" + t.name + "' has " + std::to_string(t.shape.size()) +
                       " dims; the format allows at most " + std::to_string(kMaxDims));
  }
  const uint64_t n_chunks = chunks.size();
  std::vector<uint8_t> out;
  ByteWriter w(out);
  w.bytes(kPatchMagic, 8);
  w.u32(kPatchFormatVersion);
  w.u32(info.anchor ? kFlagAnchor : 0);
  w.u64(0);  // header_bytes, patched below
  w.u8(static_cast<uint8_t>(info.values));
  w.u8(0);
  w.u8(0);
  w.u8(0);
  w.u32(static_cast<uint32_t>(zstd_level));
  w.u64(chunk_bytes);
  w.str(info.model_id);
  w.u64(info.base_version);
  w.u64(info.base_root_hash);
  w.u64(info.target_version);
  w.u64(info.target_root_hash);
  w.u64(info.tensors.size());
  for (const auto& t : info.tensors) {
    w.str(t.name);
    w.u8(static_cast<uint8_t>(t.dtype));
    w.u8(t.index_coding);
    w.u16(0);
    w.u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.u64(static_cast<uint64_t>(d));
    w.u64(t.changed);
    w.u64(t.raw_offset);
    w.u64(t.index_bytes);
    w.u64(t.value_bytes);
    w.u64(t.target_hash);
  }
  w.u64(payload_bytes);
  w.u64(n_chunks);
  for (const auto& c : chunks) {
    w.u8(c.codec);
    for (int i = 0; i < 7; ++i) w.u8(0);
    w.u64(c.raw_bytes);
    w.u64(c.stored_bytes);
    w.u64(c.checksum);
  }
  const uint64_t header_bytes = out.size() + 8;
  for (int i = 0; i < 8; ++i) out[16 + i] = static_cast<uint8_t>(header_bytes >> (8 * i));
  w.u64(xxh3_64(out.data(), out.size()));
  return out;
}
}  // namespace

std::vector<uint8_t> write_container(PatchInfo& info, const uint8_t* payload, size_t payload_bytes,
                                     int zstd_level, size_t chunk_bytes, int threads,
                                     const std::vector<uint64_t>& stream_starts) {
  std::vector<PayloadSegment> segments;
  uint64_t at = 0;
  for (uint64_t cut : stream_starts)
    if (cut > at && cut < payload_bytes) {
      segments.push_back({payload + at, cut - at});
      at = cut;
    }
  if (payload_bytes > at) segments.push_back({payload + at, payload_bytes - at});
  return write_container(info, segments, zstd_level, chunk_bytes, threads);
}

namespace {

/// Copies `n` bytes of the segments' concatenation, starting at byte `begin` of it, to dst.
void gather(const std::vector<PayloadSegment>& segs, uint64_t begin, uint64_t n, uint8_t* dst) {
  for (const auto& sg : segs) {
    if (n == 0) break;
    if (begin >= sg.size) {
      begin -= sg.size;
      continue;
    }
    const uint64_t take = std::min<uint64_t>(n, sg.size - begin);
    std::memcpy(dst, sg.data + begin, take);
    dst += take, n -= take, begin = 0;
  }
}

}  // namespace

uint64_t CompressedChunk::stored_bytes() const {
  if (codec == kChunkRaw) return raw_bytes;
  uint64_t n = 0;
  for (const auto& f : frames) n += f.size();
  return n;
}

std::vector<std::vector<PayloadSegment>> cut_chunks(const std::vector<PayloadSegment>& segments,
                                                    size_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes > kMaxChunkBytes) throw PatchError("chunk_bytes must be in 1..2^31");
  std::vector<std::vector<PayloadSegment>> chunks;
  uint64_t room = 0;  // bytes left in the last chunk
  for (const auto& sg : segments) {
    for (uint64_t at = 0; at < sg.size;) {
      if (room == 0) {
        chunks.emplace_back();
        room = chunk_bytes;
      }
      const uint64_t take = std::min<uint64_t>(room, sg.size - at);
      chunks.back().push_back({sg.data + at, take});
      at += take, room -= take;
    }
  }
  return chunks;
}

ChunkPlan plan_chunk(const std::vector<PayloadSegment>& chunk, int zstd_level) {
  if (zstd_level < 0 || zstd_level > ZSTD_maxCLevel())
    throw PatchError("zstd level " + std::to_string(zstd_level) + " out of range 0.." +
                     std::to_string(ZSTD_maxCLevel()));
  ChunkPlan plan;
  plan.zstd_level = zstd_level;
  plan.chunk.raw = chunk;
  std::vector<size_t> cuts;  // stream starts inside the chunk
  for (const auto& sg : chunk) {
    cuts.push_back(static_cast<size_t>(plan.chunk.raw_bytes));
    plan.chunk.raw_bytes += sg.size;
  }
  if (zstd_level == 0 || plan.chunk.raw_bytes == 0) return plan;
  // One frame per stream piece (pieces under kMinFrameBytes merged with the next).
  const std::vector<size_t> bounds = frame_bounds(static_cast<size_t>(plan.chunk.raw_bytes), cuts);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const uint64_t begin = bounds[i], n = bounds[i + 1] - bounds[i];
    ChunkPlan::Piece piece;
    piece.size = n;
    // In place when the piece lies in one segment, else gathered.
    uint64_t seg_begin = 0;
    for (const auto& sg : chunk) {
      if (begin >= seg_begin && begin + n <= seg_begin + sg.size) {
        piece.data = sg.data + (begin - seg_begin);
        break;
      }
      seg_begin += sg.size;
    }
    if (!piece.data) {
      piece.gathered.reserve(n);
      gather(chunk, begin, n, piece.gathered.data());
      piece.data = piece.gathered.data();
    }
    plan.pieces.push_back(std::move(piece));
  }
  plan.chunk.frames.resize(plan.pieces.size());
  plan.frames_left = std::make_unique<std::atomic<size_t>>(plan.pieces.size());
  return plan;
}

void compress_planned_frame(ChunkPlan& plan, size_t i) {
  const ChunkPlan::Piece& piece = plan.pieces.at(i);
  compress_piece(piece.data, static_cast<size_t>(piece.size), plan.zstd_level, plan.chunk.frames.at(i));
  // acq_rel: the last call sees every other call's frame.
  if (plan.frames_left->fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Xxh3Stream stream;
  for (const auto& f : plan.chunk.frames) stream.update(f.data(), f.size());
  plan.chunk.frames_checksum = stream.digest();
  plan.chunk.frames_checksummed = true;
}

CompressedChunk finish_chunk(ChunkPlan&& plan) {
  CompressedChunk out = std::move(plan.chunk);
  plan.pieces.clear();  // gathered copies are no longer needed
  if (out.frames.empty()) return out;
  uint64_t total = 0;
  for (const auto& f : out.frames) total += f.size();
  if (total < out.raw_bytes) {
    out.codec = kChunkZstd;
  } else {  // did not shrink: stored raw
    out.frames.clear();
    out.frames_checksummed = false;
  }
  return out;
}

CompressedChunk compress_chunk(const std::vector<PayloadSegment>& chunk, int zstd_level) {
  ChunkPlan plan = plan_chunk(chunk, zstd_level);
  for (size_t i = 0; i < plan.pieces.size(); ++i) compress_planned_frame(plan, i);
  return finish_chunk(std::move(plan));
}

std::vector<uint8_t> assemble_container(PatchInfo& info, std::vector<CompressedChunk>& compressed,
                                        int zstd_level, size_t chunk_bytes, int threads) {
  if (zstd_level < 0 || zstd_level > ZSTD_maxCLevel())
    throw PatchError("zstd level " + std::to_string(zstd_level) + " out of range 0.." +
                     std::to_string(ZSTD_maxCLevel()));
  if (chunk_bytes == 0 || chunk_bytes > kMaxChunkBytes) throw PatchError("chunk_bytes must be in 1..2^31");
  const size_t n_chunks = compressed.size();
  std::vector<ChunkEntry> chunks(n_chunks);
  uint64_t payload_bytes = 0;
  for (size_t c = 0; c < n_chunks; ++c) {
    if (compressed[c].raw_bytes > chunk_bytes)
      throw PatchError("a chunk holds more than chunk_bytes raw bytes");
    chunks[c].raw_bytes = compressed[c].raw_bytes;
    chunks[c].codec = compressed[c].codec;
    chunks[c].stored_bytes = compressed[c].stored_bytes();
    payload_bytes += chunks[c].raw_bytes;
  }

  // The header's size does not depend on the checksums: lay it out first, fill it in at the end.
  std::vector<uint8_t> out = header_bytes_of(info, zstd_level, chunk_bytes, payload_bytes, chunks);

  uint64_t stored = 0;
  for (const auto& e : chunks) stored += e.stored_bytes;
  const size_t header_end = out.size();
  const bool all_checksummed =
      std::all_of(compressed.begin(), compressed.end(),
                  [](const CompressedChunk& c) { return c.codec == kChunkZstd && c.frames_checksummed; });
  if (all_checksummed) {
    // Appended in one pass: a resize would first zero-fill the whole patch on this thread (measured
    // 0.19 ms for a 2.9 MB patch, AMD EPYC Zen 3, the memory not in cache), a cost as big as the copy.
    out.reserve(header_end + stored);
    for (size_t c = 0; c < n_chunks; ++c) {
      for (auto& f : compressed[c].frames) {
        out.insert(out.end(), f.data(), f.data() + f.size());
        f.release();
      }
      chunks[c].checksum = compressed[c].frames_checksum;
    }
  } else {
    // Chunks stored raw (level 0, incompressible streams): each written once into place (in parallel),
    // then checksummed.
    out.resize(header_end + stored);
    std::vector<uint64_t> at(n_chunks, header_end);
    for (size_t c = 1; c < n_chunks; ++c) at[c] = at[c - 1] + chunks[c - 1].stored_bytes;
    parallel_for(n_chunks, threads, [&](size_t c) {
      uint8_t* dst = out.data() + at[c];
      if (chunks[c].codec == kChunkRaw) {
        gather(compressed[c].raw, 0, chunks[c].raw_bytes, dst);
      } else {
        for (auto& f : compressed[c].frames) {
          std::memcpy(dst, f.data(), f.size());
          dst += f.size();
          f.release();
        }
      }
      chunks[c].checksum = compressed[c].frames_checksummed
                               ? compressed[c].frames_checksum
                               : xxh3_64(out.data() + at[c], chunks[c].stored_bytes);
    });
  }
  const std::vector<uint8_t> header = header_bytes_of(info, zstd_level, chunk_bytes, payload_bytes, chunks);
  std::memcpy(out.data(), header.data(), header.size());

  info.format_version = kPatchFormatVersion;
  info.zstd_level = zstd_level;
  info.chunk_bytes = chunk_bytes;
  info.n_chunks = n_chunks;
  info.header_bytes = header.size();
  info.payload_raw_bytes = payload_bytes;
  info.payload_compressed_bytes = stored;
  info.total_bytes = out.size();
  return out;
}

std::vector<uint8_t> write_container(PatchInfo& info, const std::vector<PayloadSegment>& segments,
                                     int zstd_level, size_t chunk_bytes, int threads) {
  std::vector<PayloadSegment> nonempty;
  for (const auto& sg : segments)
    if (sg.size) nonempty.push_back(sg);
  const auto slices = cut_chunks(nonempty, chunk_bytes);
  std::vector<CompressedChunk> chunks(slices.size());
  parallel_for(slices.size(), threads, [&](size_t c) { chunks[c] = compress_chunk(slices[c], zstd_level); });
  return assemble_container(info, chunks, zstd_level, chunk_bytes, threads);
}

Container parse_container(const uint8_t* data, size_t size, bool require_complete) {
  if (size == 0) throw PatchError("patch is empty (0 bytes)");
  if (size < 24 || std::memcmp(data, kPatchMagic, 8) != 0) {
    const bool magic_prefix = std::memcmp(data, kPatchMagic, std::min<size_t>(size, 8)) == 0;
    if (!magic_prefix) throw PatchError("not a PULSESync patch: bad magic at byte offset 0");
    throw PatchError("patch truncated: " + std::to_string(size) + " bytes, header needs at least 24");
  }
  ByteReader r(data, size, 8);
  Container c;
  PatchInfo& info = c.info;
  info.format_version = r.u32("format_version");
  if (info.format_version < kOldestReadableFormatVersion || info.format_version > kPatchFormatVersion)
    throw PatchError("patch format version " + std::to_string(info.format_version) +
                     " at byte offset 8 is not supported (this reader knows versions " +
                     std::to_string(kOldestReadableFormatVersion) + " to " +
                     std::to_string(kPatchFormatVersion) + ")");
  const uint32_t flags = r.u32("flags");
  const uint64_t header_bytes = r.u64("header_bytes");
  if (header_bytes < 64 || header_bytes > size)
    throw PatchError("patch truncated or corrupt: header_bytes " + std::to_string(header_bytes) +
                     " at byte offset 16 exceeds the " + std::to_string(size) + "-byte patch");
  uint64_t stored_sum = 0;
  std::memcpy(&stored_sum, data + header_bytes - 8, 8);
  if (xxh3_64(data, header_bytes - 8) != stored_sum)
    throw PatchError("patch header checksum mismatch (header byte offsets 0.." +
                     std::to_string(header_bytes) + "): corrupt or truncated patch");
  if (flags & ~kFlagAnchor) throw PatchError("patch header: unknown flags at byte offset 12");
  info.anchor = flags & kFlagAnchor;
  info.header_bytes = header_bytes;
  ByteReader h(data, header_bytes - 8, r.offset());
  const uint8_t mode = h.u8("value_mode");
  if (mode > 1)
    throw PatchError("patch header: unknown value mode " + std::to_string(mode) + " at byte offset 24");
  info.values = static_cast<ValueMode>(mode);
  h.u8("reserved");
  h.u8("reserved");
  h.u8("reserved");
  info.zstd_level = static_cast<int>(h.u32("zstd_level"));
  info.chunk_bytes = h.u64("chunk_bytes");
  if (info.chunk_bytes == 0 || info.chunk_bytes > kMaxChunkBytes)
    throw PatchError("patch header: chunk_bytes " + std::to_string(info.chunk_bytes) +
                     " at byte offset 32 is outside 1..2^31");
  info.model_id = h.str("model_id", kMaxNameBytes);
  info.base_version = h.u64("base_version");
  info.base_root_hash = h.u64("base_root_hash");
  info.target_version = h.u64("target_version");
  info.target_root_hash = h.u64("target_root_hash");
  const uint64_t n_tensors = h.u64("n_tensors");
  if (n_tensors > h.remaining() / 50)
    throw PatchError("patch header: tensor count " + std::to_string(n_tensors) + " out of range");
  uint64_t expect_offset = 0;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const size_t at = h.offset();
    PatchTensorInfo t;
    t.name = h.str("tensor name", kMaxNameBytes);
    auto bad = [&](const std::string& what) {
      return PatchError("patch tensor '" + t.name + "' (header byte offset " + std::to_string(at) +
                        "): " + what);
    };
    const uint8_t dtype = h.u8("dtype");
    if (!dtype_valid(dtype)) throw bad("unknown dtype " + std::to_string(dtype));
    t.dtype = static_cast<DType>(dtype);
    t.index_coding = h.u8("index_coding");
    if (t.index_coding > kIndexDense) throw bad("unknown index coding " + std::to_string(t.index_coding));
    h.u16("reserved");
    const uint32_t ndim = h.u32("ndim");
    if (ndim > kMaxDims) throw bad("too many dims");
    for (uint32_t d = 0; d < ndim; ++d) t.shape.push_back(static_cast<int64_t>(h.u64("dim")));
    uint64_t n = 0;
    try {
      n = static_cast<uint64_t>(numel(t.shape));
    } catch (const std::exception& e) {
      throw bad(std::string("bad shape: ") + e.what());
    }
    const uint64_t w = dtype_size(t.dtype);
    if (n > (UINT64_MAX >> 4) / w) throw bad("tensor too large");
    t.changed = h.u64("changed");
    t.raw_offset = h.u64("raw_offset");
    t.index_bytes = h.u64("index_bytes");
    t.value_bytes = h.u64("value_bytes");
    t.target_hash = h.u64("target_hash");
    if (i > 0 && !(info.tensors.back().name < t.name)) throw bad("tensors not sorted by name or duplicated");
    if (t.changed > n) throw bad("more changes than elements");
    if (info.anchor && (t.index_coding != kIndexDense || t.changed != n))
      throw bad("anchor tensor is not dense");
    const bool delta = info.values == ValueMode::Delta;
    const uint64_t stored = t.index_coding == kIndexDense ? n : t.changed;
    uint64_t index_expect_min = 0, index_expect_max = 0;
    if (t.index_coding == kIndexVarintGaps) {
      index_expect_min = t.changed;
      index_expect_max = t.changed * 10;
    } else if (t.index_coding == kIndexBitmap) {
      index_expect_min = index_expect_max = bitmap_bytes(n);
    }
    if (t.index_bytes < index_expect_min || t.index_bytes > index_expect_max)
      throw bad("index stream size out of range");
    if (t.value_bytes != value_stream_bytes(delta, stored, w))
      throw bad("value stream size does not match its count");
    if (t.raw_offset != expect_offset)
      throw bad("stream offset " + std::to_string(t.raw_offset) + " is not " + std::to_string(expect_offset));
    if (__builtin_add_overflow(expect_offset, t.index_bytes + t.value_bytes, &expect_offset))
      throw bad("payload size overflows 64 bits");
    info.tensors.push_back(std::move(t));
  }
  info.payload_raw_bytes = h.u64("payload_raw_bytes");
  if (info.payload_raw_bytes != expect_offset)
    throw PatchError("patch header: payload size disagrees with the tensor table");
  const uint64_t n_chunks = h.u64("n_chunks");
  if (n_chunks > h.remaining() / 32) throw PatchError("patch header: chunk count out of range");
  info.n_chunks = n_chunks;
  uint64_t raw_sum = 0, file_offset = header_bytes;
  for (uint64_t i = 0; i < n_chunks; ++i) {
    ChunkEntry e;
    e.codec = h.u8("chunk codec");
    for (int k = 0; k < 7; ++k) h.u8("reserved");
    e.raw_bytes = h.u64("chunk raw_bytes");
    e.stored_bytes = h.u64("chunk stored_bytes");
    e.checksum = h.u64("chunk checksum");
    if (e.codec > kChunkZstd || e.raw_bytes == 0 || e.raw_bytes > info.chunk_bytes ||
        (e.codec == kChunkRaw && e.stored_bytes != e.raw_bytes) || e.stored_bytes > kMaxChunkBytes)
      throw PatchError("patch header: chunk " + std::to_string(i) + " entry is invalid");
    e.file_offset = file_offset;
    file_offset += e.stored_bytes;
    raw_sum += e.raw_bytes;
    c.chunks.push_back(e);
  }
  if (raw_sum != info.payload_raw_bytes)
    throw PatchError("patch header: chunk sizes disagree with the payload size");
  if (h.remaining() != 0)
    throw PatchError("patch header: " + std::to_string(h.remaining()) +
                     " unexpected bytes before the checksum");
  info.payload_compressed_bytes = file_offset - header_bytes;
  info.total_bytes = file_offset;
  if (require_complete && size != file_offset)
    throw PatchError(size < file_offset
                         ? "patch truncated: " + std::to_string(size) + " bytes, header promises " +
                               std::to_string(file_offset)
                         : "patch has " + std::to_string(size - file_offset) +
                               " trailing bytes after byte offset " + std::to_string(file_offset));
  return c;
}

}  // namespace pulse::sync
