// zstd compression and decompression contexts, recycled across calls and threads.
//
// Why: the codec's worker threads live for one parallel loop, so thread-local contexts were created,
// sized (hundreds of KB of tables, page-faulted in) and freed on every patch; ZSTD_decompress allocates
// a context per call. A context taken from the pool is reset by its user before use.
#pragma once

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace pulse::sync {

/// A zstd context (Ctx = ZSTD_CCtx_s or ZSTD_DCtx_s) from a process-wide pool, returned to it on
/// destruction. Throws std::bad_alloc when zstd cannot allocate one.
template <typename Ctx>
class PooledZstdContext {
 public:
  PooledZstdContext();
  ~PooledZstdContext();
  PooledZstdContext(const PooledZstdContext&) = delete;
  PooledZstdContext& operator=(const PooledZstdContext&) = delete;
  Ctx* get() const { return ctx_; }

 private:
  Ctx* ctx_;
};

using PooledCCtx = PooledZstdContext<ZSTD_CCtx_s>;
using PooledDCtx = PooledZstdContext<ZSTD_DCtx_s>;

extern template class PooledZstdContext<ZSTD_CCtx_s>;
extern template class PooledZstdContext<ZSTD_DCtx_s>;

}  // namespace pulse::sync
