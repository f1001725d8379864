#include "sync/zstd_context.h"

#include <zstd.h>

#include <mutex>
#include <new>
#include <vector>

namespace pulse::sync {

namespace {

// At most this many idle contexts of each kind are kept (one per thread of a busy machine).
constexpr size_t kMaxIdle = 64;

template <typename Ctx>
struct Pool {
  std::mutex mutex;
  std::vector<Ctx*> idle;
};

template <typename Ctx>
Pool<Ctx>& pool() {
  static auto* p = new Pool<Ctx>;  // never destroyed: contexts may come back during static destruction
  return *p;
}

template <typename Ctx, typename Create>
Ctx* take(Create create) {
  {
    Pool<Ctx>& p = pool<Ctx>();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (!p.idle.empty()) {
      Ctx* c = p.idle.back();
      p.idle.pop_back();
      return c;
    }
  }
  Ctx* c = create();
  if (!c) throw std::bad_alloc();
  return c;
}

template <typename Ctx, typename Free>
void give(Ctx* c, Free free_ctx) {
  Pool<Ctx>& p = pool<Ctx>();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.idle.size() < kMaxIdle) {
      p.idle.push_back(c);
      return;
    }
  }
  free_ctx(c);
}

}  // namespace

template <typename Ctx>
struct Traits;
template <>
struct Traits<ZSTD_CCtx> {
  static ZSTD_CCtx* create() { return ZSTD_createCCtx(); }
  static void destroy(ZSTD_CCtx* c) { ZSTD_freeCCtx(c); }
};
template <>
struct Traits<ZSTD_DCtx> {
  static ZSTD_DCtx* create() { return ZSTD_createDCtx(); }
  static void destroy(ZSTD_DCtx* c) { ZSTD_freeDCtx(c); }
};

template <typename Ctx>
PooledZstdContext<Ctx>::PooledZstdContext() : ctx_(take<Ctx>(Traits<Ctx>::create)) {}

template <typename Ctx>
PooledZstdContext<Ctx>::~PooledZstdContext() {
  give(ctx_, Traits<Ctx>::destroy);
}

template class PooledZstdContext<ZSTD_CCtx>;
template class PooledZstdContext<ZSTD_DCtx>;

}  // namespace pulse::sync
