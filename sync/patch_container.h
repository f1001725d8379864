// The patch container: header (magic, version, settings, tensor table, chunk table, checksum) and the
// payload of independently compressed chunks. Layout: sync/FORMAT.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "sync/patch.h"
#include "sync/scratch_buffer.h"

namespace pulse::sync {

constexpr char kPatchMagic[8] = {'P', 'U', 'L', 'S', 'E', 'S', 'Y', 'N'};
/// The version this code writes. Version 3 (this one) has the layout of version 2 with tree tensor hashes
/// (sync/hash.h HashScheme::Tree); version 2 lets a chunk end before chunk_bytes raw bytes (the encoder
/// ends one at every tensor group); version 1 filled every chunk but the last. All three are read.
constexpr uint32_t kPatchFormatVersion = 3;
constexpr uint32_t kOldestReadableFormatVersion = 1;
constexpr uint32_t kFlagAnchor = 1;

enum ChunkCodec : uint8_t { kChunkRaw = 0, kChunkZstd = 1 };

/// One payload chunk as stored.
struct ChunkEntry {
  uint8_t codec = kChunkRaw;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t checksum = 0;     ///< XXH3-64 of the stored bytes
  uint64_t file_offset = 0;  ///< derived: where the stored bytes start in the patch
};

/// A parsed header.
struct Container {
  PatchInfo info;
  std::vector<ChunkEntry> chunks;
};

/// One stream (or part of one) of the raw payload, in payload order.
struct PayloadSegment {
  const uint8_t* data;
  uint64_t size;  ///< bytes
};

/// The container of a payload given as segments back to back (each segment one stream: an index head or
/// tail, a value plane): cut_chunks, compress_chunk on `threads` threads, assemble_container.
std::vector<uint8_t> write_container(PatchInfo& info, const std::vector<PayloadSegment>& segments,
                                     int zstd_level, size_t chunk_bytes, int threads);

/// One chunk of the payload, compressed (or stored) but not yet laid into the container.
struct CompressedChunk {
  uint64_t raw_bytes = 0;
  uint8_t codec = kChunkRaw;
  std::vector<ScratchBuffer> frames;  ///< kChunkZstd: the chunk's frames, back to back
  std::vector<PayloadSegment> raw;    ///< the chunk's raw bytes (pointers into the caller's streams)
  /// XXH3-64 of `frames` back to back (the container's chunk checksum when the chunk is stored
  /// compressed), set by the compress_planned_frame call that finished the last frame.
  uint64_t frames_checksum = 0;
  bool frames_checksummed = false;
  /// Bytes the chunk takes in the container.
  uint64_t stored_bytes() const;
};

/// Cuts the concatenation of `segments` into chunks of chunk_bytes raw bytes (the last one shorter); a
/// segment crossing a chunk end is split. Throws PatchError for chunk_bytes outside 1..2^31.
std::vector<std::vector<PayloadSegment>> cut_chunks(const std::vector<PayloadSegment>& segments,
                                                    size_t chunk_bytes);

/// Compresses one chunk (its segments back to back, each segment a stream or part of one) on the calling
/// thread: one zstd frame per stream piece (pieces under 4 KiB merged with the next), each the smaller of
/// a normal level-`zstd_level` frame and a literal-only one (chosen by order-0 entropy for big pieces);
/// stored raw when that is not smaller, or with level 0. The segments' memory must outlive the result.
CompressedChunk compress_chunk(const std::vector<PayloadSegment>& chunk, int zstd_level);

/// compress_chunk in steps, so that one chunk's frames can be compressed on different threads:
/// plan_chunk, then compress_planned_frame(plan, i) for every i < pieces.size() (in any order, each once,
/// concurrently allowed: each writes only frame i), then finish_chunk. The result equals compress_chunk's.
struct ChunkPlan {
  /// One future frame: `size` bytes at `data` (into the caller's segments, or into `gathered` when the
  /// piece spans segments).
  struct Piece {
    const uint8_t* data = nullptr;
    uint64_t size = 0;
    ScratchBuffer gathered;
  };
  int zstd_level = 0;
  std::vector<Piece> pieces;  ///< empty with level 0 or an empty chunk (stored raw)
  CompressedChunk chunk;      ///< raw_bytes and raw set; frames[i] filled by compress_planned_frame
  /// Frames not compressed yet (= pieces.size() from plan_chunk); the call that takes it to 0 checksums
  /// the frames, so that the checksums are computed on the compressing threads, not in the serial
  /// assembly.
  std::unique_ptr<std::atomic<size_t>> frames_left;
};

/// The frames `chunk` is cut into at `zstd_level` (see compress_chunk). Throws PatchError for a level
/// outside 0..22.
ChunkPlan plan_chunk(const std::vector<PayloadSegment>& chunk, int zstd_level);

/// Compresses piece i of `plan` into plan.chunk.frames[i]; the call that completes the last frame also
/// sets plan.chunk.frames_checksum. Throws PatchError when zstd fails.
void compress_planned_frame(ChunkPlan& plan, size_t i);

/// The compressed chunk once every frame of `plan` is done: zstd when the frames are smaller than the
/// raw bytes, else raw.
CompressedChunk finish_chunk(ChunkPlan&& plan);

/// Header + the chunks in payload order (each at most chunk_bytes raw bytes): the container. `info`
/// supplies everything but the chunk/size fields, which are filled in. Chunks stored compressed are
/// appended in one pass with the checksums of their frames (no zero fill of the patch first); a chunk
/// stored raw is copied and checksummed here, on `threads` threads. Throws PatchError for a zstd level
/// outside 0..22, chunk_bytes outside 1..2^31 or a chunk over chunk_bytes.
std::vector<uint8_t> assemble_container(PatchInfo& info, std::vector<CompressedChunk>& chunks, int zstd_level,
                                        size_t chunk_bytes, int threads);

/// Compresses `payload` (payload_bytes) into chunks (every frame in parallel) and returns header + chunks.
/// `info` supplies everything but the chunk/size fields, which are filled in (info is updated).
/// `stream_starts` (sorted payload offsets where an index or value plane begins) lets each chunk be entropy
/// coded per stream: every chunk is compressed both as a normal zstd frame and as a literal-only frame with
/// blocks cut at stream starts; the smaller is kept (or the raw bytes, when neither is smaller).
std::vector<uint8_t> write_container(PatchInfo& info, const uint8_t* payload, size_t payload_bytes,
                                     int zstd_level, size_t chunk_bytes, int threads,
                                     const std::vector<uint64_t>& stream_starts = {});

/// The same for a payload held in a vector.
inline std::vector<uint8_t> write_container(PatchInfo& info, const std::vector<uint8_t>& payload,
                                            int zstd_level, size_t chunk_bytes, int threads,
                                            const std::vector<uint64_t>& stream_starts = {}) {
  return write_container(info, payload.data(), payload.size(), zstd_level, chunk_bytes, threads,
                         stream_starts);
}

/// Parses the header of [data, data+size): magic, version, header checksum, field ranges, tensor order
/// and stream offsets. With `require_complete`, the size must equal header + every stored chunk.
/// Throws PatchError naming the byte offset.
Container parse_container(const uint8_t* data, size_t size, bool require_complete);

/// Bytes past the payload's end that read_payload allocates and zeroes, so that SIMD kernels may load a
/// whole vector at the end of the last stream.
constexpr size_t kPayloadPadding = 64;

/// Verifies each chunk's checksum and decompresses the payload (in parallel) into a pooled buffer:
/// size() = payload_raw_bytes, followed by kPayloadPadding zero bytes. Throws PatchError naming the chunk
/// and its byte offset.
ScratchBuffer read_payload(const Container& container, const uint8_t* data, size_t size, int threads);

}  // namespace pulse::sync
