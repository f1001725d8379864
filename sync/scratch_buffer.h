// Scratch byte buffers for the codec, recycled through a process-wide pool.
//
// Why: the encoder's streams, compressed frames and the decoder's payload and undo log are tens of MB
// per patch at RL densities. Fresh allocations of that size come from mmap, so every 4 KiB page costs
// a page fault and a kernel zero-fill on first touch, on every patch: measured ~8% of encode time at
// 7% density. Buffers returned to the pool keep their pages; the next patch reuses them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace pulse::sync {

/// An uninitialized byte buffer (capacity() bytes) taken from the scratch pool and given back to it on
/// destruction. Move-only. Throws std::bad_alloc when memory runs out.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  /// At least `bytes` bytes of capacity (contents unspecified).
  explicit ScratchBuffer(size_t bytes) { reserve(bytes); }
  ~ScratchBuffer() { release(); }
  ScratchBuffer(ScratchBuffer&& o) noexcept : data_(std::move(o.data_)), cap_(o.cap_), size_(o.size_) {
    o.cap_ = o.size_ = 0;
  }
  ScratchBuffer& operator=(ScratchBuffer&& o) noexcept;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t capacity() const { return cap_; }
  /// Bytes in use (the caller's bookkeeping; <= capacity()).
  size_t size() const { return size_; }
  void set_size(size_t n) { size_ = n; }
  /// Ensures capacity() >= bytes, keeping the first size() bytes.
  void reserve(size_t bytes);
  /// Room for `extra` bytes past size(); when it must grow, to at least `scale` x (size() + extra).
  void reserve_more(size_t extra, double scale = 1.0);
  /// Gives the memory back to the pool (size and capacity become 0).
  void release();

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t cap_ = 0, size_ = 0;
};

/// Bytes the pool holds now (buffers given back and not yet reused); for tests and benchmarks.
size_t scratch_pool_bytes();

/// Frees every pooled buffer (e.g. after a one-off huge patch).
void scratch_pool_clear();

}  // namespace pulse::sync
