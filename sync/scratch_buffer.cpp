#include "sync/scratch_buffer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

namespace pulse::sync {

namespace {

// The pool keeps at most this many bytes: enough for the streams of a patch of a multi-billion
// parameter model at RL densities, small next to the weights themselves.
constexpr size_t kMaxPooledBytes = size_t{1} << 30;
// A pooled buffer serves a request only when it is at most this many times bigger: a small request
// must not take the big buffer that the next big request needs.
constexpr size_t kMaxWaste = 4;
// Smaller buffers come from malloc's own free lists (no page faults); the pool is for big ones.
constexpr size_t kMinPooledBytes = 64 << 10;

struct Pool {
  std::mutex mutex;
  std::multimap<size_t, std::unique_ptr<uint8_t[]>> free;  // by capacity
  size_t bytes = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: buffers may be given back during static destruction
  return *p;
}

std::unique_ptr<uint8_t[]> take(size_t want, size_t& cap) {
  if (want >= kMinPooledBytes) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    auto it = p.free.lower_bound(want);
    if (it != p.free.end() && it->first / kMaxWaste <= want) {
      cap = it->first;
      std::unique_ptr<uint8_t[]> d = std::move(it->second);
      p.free.erase(it);
      p.bytes -= cap;
      return d;
    }
  }
  cap = want;
  return std::unique_ptr<uint8_t[]>(new uint8_t[want]);
}

void give(std::unique_ptr<uint8_t[]> d, size_t cap) {
  if (!d || cap < kMinPooledBytes) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  // Full: drop the smallest buffers first while that makes room (big ones are the costly ones).
  while (p.bytes + cap > kMaxPooledBytes && !p.free.empty() && p.free.begin()->first < cap) {
    p.bytes -= p.free.begin()->first;
    p.free.erase(p.free.begin());
  }
  if (p.bytes + cap > kMaxPooledBytes) return;  // d is freed here
  p.bytes += cap;
  p.free.emplace(cap, std::move(d));
}

}  // namespace

ScratchBuffer& ScratchBuffer::operator=(ScratchBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::move(o.data_);
    cap_ = o.cap_;
    size_ = o.size_;
    o.cap_ = o.size_ = 0;
  }
  return *this;
}

void ScratchBuffer::reserve(size_t bytes) {
  if (bytes <= cap_) return;
  size_t cap = 0;
  std::unique_ptr<uint8_t[]> d = take(bytes, cap);
  if (size_) std::memcpy(d.get(), data_.get(), size_);
  give(std::move(data_), cap_);
  data_ = std::move(d);
  cap_ = cap;
}

void ScratchBuffer::reserve_more(size_t extra, double scale) {
  const size_t need = size_ + extra;
  if (need <= cap_) return;
  const size_t want =
      std::max({need, static_cast<size_t>(scale * static_cast<double>(need)), cap_ + cap_ / 2, size_t{256}});
  reserve(want);
}

void ScratchBuffer::release() {
  give(std::move(data_), cap_);
  data_.reset();
  cap_ = size_ = 0;
}

size_t scratch_pool_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.bytes;
}

void scratch_pool_clear() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.free.clear();
  p.bytes = 0;
}

}  // namespace pulse::sync
