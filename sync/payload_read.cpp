// Reading a patch's payload: chunk checksums, then decompression of every chunk (in parallel) into a
// pooled scratch buffer.
#include <zstd.h>

#include <cstring>

#include "sync/hash.h"
#include "sync/parallel.h"
#include "sync/patch_container.h"
#include "sync/zstd_context.h"

namespace pulse::sync {

ScratchBuffer read_payload(const Container& c, const uint8_t* data, size_t size, int threads) {
  // Pooled and not zero-filled: every byte up to payload_raw_bytes is written by a chunk below (the
  // chunks' raw sizes sum to it, parse_container checked), and a recycled buffer has no fresh pages
  // to fault in.
  const uint64_t raw = c.info.payload_raw_bytes;
  ScratchBuffer payload(raw + kPayloadPadding);
  payload.set_size(raw);
  std::memset(payload.data() + raw, 0, kPayloadPadding);
  std::vector<uint64_t> raw_offsets(c.chunks.size());
  uint64_t off = 0;
  for (size_t i = 0; i < c.chunks.size(); ++i) {
    raw_offsets[i] = off;
    off += c.chunks[i].raw_bytes;
    if (c.chunks[i].file_offset + c.chunks[i].stored_bytes > size)
      throw PatchError("patch truncated inside chunk " + std::to_string(i) + " at byte offset " +
                       std::to_string(c.chunks[i].file_offset));
  }
  parallel_for(c.chunks.size(), threads, [&](size_t i) {
    const ChunkEntry& e = c.chunks[i];
    const uint8_t* src = data + e.file_offset;
    if (xxh3_64(src, e.stored_bytes) != e.checksum)
      throw PatchError("patch chunk " + std::to_string(i) + " at byte offset " +
                       std::to_string(e.file_offset) + ": checksum mismatch (corrupt patch)");
    uint8_t* dst = payload.data() + raw_offsets[i];
    if (e.codec == kChunkRaw) {
      std::memcpy(dst, src, e.raw_bytes);
      return;
    }
    const PooledDCtx dctx;
    const size_t n = ZSTD_decompressDCtx(dctx.get(), dst, e.raw_bytes, src, e.stored_bytes);
    if (ZSTD_isError(n) || n != e.raw_bytes)
      throw PatchError("patch chunk " + std::to_string(i) + " at byte offset " +
                       std::to_string(e.file_offset) + ": zstd frame does not decode to " +
                       std::to_string(e.raw_bytes) + " bytes");
  });
  return payload;
}

std::string check_patch_payload(const uint8_t* data, size_t size, int threads) {
  try {
    const Container c = parse_container(data, size, true);
    read_payload(c, data, size, threads);
    return "";
  } catch (const PatchError& e) {
    return e.what();
  }
}

}  // namespace pulse::sync
