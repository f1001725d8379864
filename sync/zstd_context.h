// zstd compression and decompression contexts, recycled across calls and threads.
//
// Why: the codec's worker threads live for one parallel loop, so thread-local contexts were created,
// sized (hundreds of KB of tables, page-faulted in) and freed on every patch; ZSTD_decompress allocates
// a context per call. For the small models of RL tests and per-step patches of a few MB that setup
// dominated. A context taken from the pool is reset by its user before use.
#pragma once
#include <memory>

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace pulse::sync {

/// A compression context from the process-wide pool, returned to it on destruction. Throws
/// std::bad_alloc when zstd cannot allocate one.
class PooledCCtx {
 public:
  PooledCCtx();
  ~PooledCCtx();
  PooledCCtx(const PooledCCtx&) = delete;
  PooledCCtx& operator=(const PooledCCtx&) = delete;
  ZSTD_CCtx_s* get() const { return ctx_; }

 private:
  ZSTD_CCtx_s* ctx_;
};

/// The same for decompression contexts.
class PooledDCtx {
 public:
  PooledDCtx();
  ~PooledDCtx();
  PooledDCtx(const PooledDCtx&) = delete;
  PooledDCtx& operator=(const PooledDCtx&) = delete;
  ZSTD_DCtx_s* get() const { return ctx_; }

 private:
  ZSTD_DCtx_s* ctx_;
};

}  // namespace pulse::sync
