// The encoder settings' range rules (sync/patch.h PatchOptions::validate), shared by the CPU and CUDA
// encoders and the run config.
#include <string>

#include "sync/index_coding.h"
#include "sync/patch.h"

namespace pulse::sync {
namespace {

/// An integer setting in [lo, hi]; throws PatchError "KEY: must be >= lo (got v)" / "<= hi".
void int_in(const char* key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo)
    throw PatchError(std::string(key) + ": must be >= " + std::to_string(lo) + " (got " + std::to_string(v) +
                     ")");
  if (v > hi)
    throw PatchError(std::string(key) + ": must be <= " + std::to_string(hi) + " (got " + std::to_string(v) +
                     ")");
}

}  // namespace

void PatchOptions::validate() const {
  int_in("sync.zstd_level", zstd_level, 0, 22);
  int_in("sync.threads", threads, 0, 1024);
  if (chunk_bytes == 0 || chunk_bytes > (size_t{1} << 31))
    throw PatchError("chunk_bytes: must be in 1..2^31 (got " + std::to_string(chunk_bytes) + ")");
  int_in("force_index_coding", force_index_coding, -1, kIndexDense);
}

}  // namespace pulse::sync
