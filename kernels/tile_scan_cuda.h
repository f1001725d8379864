// Device-side building blocks shared by the CUDA kernels (kernels/*.cu): warp and block scans with
// an arbitrary associative operator, the single-block scan of per-tile aggregates, a tiled device-wide
// exclusive scan (reduce tiles, scan the tile sums, scan inside each tile again), a workspace carver and
// the CUDA error check. Device code: include from .cu files only (everything lives in an anonymous
// namespace so that each .cu gets its own kernels, no cross-TU template kernel symbols).
//
// Tiles: kTileThreads threads x kTileItems consecutive items per thread = kTile items per tile (one
// thread block). Every kernel built on this header uses the same shape.
#pragma once
#ifndef __CUDACC__
#error "kernels/tile_scan_cuda.h holds device code: include it from .cu files only"
#endif
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

/// Every kernel launch of kernels/*.cu: PULSE_LAUNCH(grid, block, stream, kernel)(args...) is
/// kernel<<<grid, block, 0, stream>>>(args...) (the kernel last: a template's commas stay in
/// __VA_ARGS__). The CPU emulation the tests build (tests/kernels_cuda/emulation) defines it first, to run
/// the same kernels on the host.
#ifndef PULSE_LAUNCH
#define PULSE_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<(grid), (block), 0, (stream)>>>
#endif

namespace pulse::kernels::cuda {
namespace {

constexpr int kTileThreads = 256;
constexpr int kTileItems = 16;
constexpr uint64_t kTile = static_cast<uint64_t>(kTileThreads) * kTileItems;  // 4096
constexpr int kScanThreads = 1024;  ///< threads of the single-block tile-sum scan

/// Throws std::runtime_error naming `what` when the last CUDA call (or launch) failed.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Tiles covering n items.
inline uint64_t tiles_of(uint64_t n) {
  return (n + kTile - 1) / kTile;
}

/// Bump allocator over a caller-provided device workspace; every piece 256-byte aligned.
struct Carver {
  uint8_t* base;
  size_t used = 0;
  template <typename T>
  T* take(uint64_t count) {
    T* p = reinterpret_cast<T*>(base ? base + used : nullptr);
    used += (static_cast<size_t>(count) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
};

// ---- operators -------------------------------------------------------------------------------------

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

/// Saturating u64 sum (associative for unsigned values): the tiled scans of gap + 1 stay exact up to
/// 2^64 - 1 and never wrap.
struct SatSumOp {
  __device__ __forceinline__ uint64_t operator()(uint64_t a, uint64_t b) const {
    const uint64_t s = a + b;
    return s < a ? ~uint64_t{0} : s;
  }
};

// ---- shuffles of the value types the scans use -------------------------------------------------

__device__ __forceinline__ uint32_t shfl_up(uint32_t v, int d) {
  return __shfl_up_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ int32_t shfl_up(int32_t v, int d) {
  return __shfl_up_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ uint64_t shfl_up(uint64_t v, int d) {
  return __shfl_up_sync(0xffffffffu, static_cast<unsigned long long>(v), d);
}
__device__ __forceinline__ int64_t shfl_up(int64_t v, int d) {
  return __shfl_up_sync(0xffffffffu, static_cast<long long>(v), d);
}

/// Count (sum) and last position (max) scanned together.
template <typename C, typename P>
struct CountLast {
  C count;
  P last;
};
template <typename C, typename P>
__device__ __forceinline__ CountLast<C, P> shfl_up(CountLast<C, P> v, int d) {
  return {shfl_up(v.count, d), shfl_up(v.last, d)};
}
struct CountLastOp {
  template <typename C, typename P>
  __device__ __forceinline__ CountLast<C, P> operator()(CountLast<C, P> a, CountLast<C, P> b) const {
    return {static_cast<C>(a.count + b.count), a.last > b.last ? a.last : b.last};
  }
};

// ---- warp and block scans ---------------------------------------------------------------------------

/// Inclusive scan across the 32 lanes of a warp (every lane must call it).
template <typename T, typename Op>
__device__ __forceinline__ T warp_inclusive_scan(T v, Op op) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const T o = shfl_up(v, d);
    if (lane >= d) v = op(o, v);
  }
  return v;
}

/// Exclusive scan across the block (kThreads threads, a multiple of 32, <= 1024; every thread must call
/// it): returns op of the values of the threads before this one (`identity` for thread 0) and sets
/// `total` to op of all. `smem` holds kThreads / 32 values. Ends with a barrier, so smem may be reused.
template <int kThreads, typename T, typename Op>
__device__ __forceinline__ T block_exclusive_scan(T v, Op op, T identity, T* smem, T& total) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T inc = warp_inclusive_scan(v, op);
  if (lane == 31) smem[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    T w = lane < kWarps ? smem[lane] : identity;
    w = warp_inclusive_scan(w, op);
    if (lane < kWarps) smem[lane] = w;
  }
  __syncthreads();
  const T warp_prefix = warp ? smem[warp - 1] : identity;
  total = smem[kWarps - 1];
  T excl = shfl_up(inc, 1);
  if (lane == 0) excl = identity;
  __syncthreads();
  return lane == 0 ? warp_prefix : op(warp_prefix, excl);
}

// ---- tiled device-wide exclusive scan ---------------------------------------------------------------

/// Phase 2 of every tiled scan: one block of kScanThreads threads turns sums[0..tiles) into their
/// exclusive prefixes in place and writes op of all to *total. Each thread takes a contiguous run of
/// tiles (reduced, then one block scan, then written out), so the latency is one block scan whatever
/// the tile count.
template <typename T, typename Op>
__global__ void __launch_bounds__(kScanThreads)
    scan_tile_sums_kernel(T* sums, uint64_t tiles, Op op, T identity, T* total) {
  __shared__ T smem[kScanThreads / 32];
  const uint64_t per = (tiles + kScanThreads - 1) / kScanThreads;
  const uint64_t begin = min(tiles, threadIdx.x * per), end = min(tiles, begin + per);
  T local = identity;
  for (uint64_t i = begin; i < end; ++i) local = op(local, sums[i]);
  T all;
  T run = block_exclusive_scan<kScanThreads>(local, op, identity, smem, all);
  for (uint64_t i = begin; i < end; ++i) {
    const T v = sums[i];
    sums[i] = run;
    run = op(run, v);
  }
  if (threadIdx.x == 0) *total = all;
}

/// Phase 1: sums[tile] = op of item(i) over the tile's items (items past n are identity).
template <typename T, typename Op, typename Item>
__global__ void __launch_bounds__(kTileThreads)
    reduce_tiles_kernel(Item item, uint64_t n, Op op, T identity, T* sums) {
  __shared__ T smem[kTileThreads / 32];
  const uint64_t first = blockIdx.x * kTile + static_cast<uint64_t>(threadIdx.x) * kTileItems;
  T acc = identity;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k)
    if (first + k < n) acc = op(acc, item(first + k));
  T total;
  block_exclusive_scan<kTileThreads>(acc, op, identity, smem, total);
  if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

/// Phase 3: for every i < n, calls consume(i, exclusive prefix of item over [0, i), item(i)), in
/// increasing i per thread. `prefix` holds the scanned tile sums of phase 2.
template <typename T, typename Op, typename Item, typename Consume>
__global__ void __launch_bounds__(kTileThreads)
    scan_tiles_kernel(Item item, uint64_t n, Op op, T identity, const T* prefix, Consume consume) {
  __shared__ T smem[kTileThreads / 32];
  const uint64_t first = blockIdx.x * kTile + static_cast<uint64_t>(threadIdx.x) * kTileItems;
  T v[kTileItems];
  T acc = identity;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    v[k] = first + k < n ? item(first + k) : identity;
    acc = op(acc, v[k]);
  }
  T total;
  T run = op(prefix[blockIdx.x], block_exclusive_scan<kTileThreads>(acc, op, identity, smem, total));
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    if (first + k < n) consume(first + k, run, v[k]);
    run = op(run, v[k]);
  }
}

/// Workspace of tiled_exclusive_scan for n items of T: the tile sums.
template <typename T>
uint64_t tiled_scan_sums(uint64_t n) {
  return tiles_of(n) + 1;
}

/// Device-wide exclusive scan of item(i), i < n, delivered to consume (phase 3 above); op of all items is
/// written to *total (device memory). `sums` holds tiles_of(n) values. Launches three kernels on
/// `stream`; n == 0 writes identity to *total with a one-thread scan.
template <typename T, typename Op, typename Item, typename Consume>
void tiled_exclusive_scan(Item item, uint64_t n, Op op, T identity, T* sums, T* total, Consume consume,
                          cudaStream_t stream, const char* what) {
  const uint64_t tiles = tiles_of(n);
  if (tiles)
    PULSE_LAUNCH(static_cast<unsigned>(tiles), kTileThreads, stream, reduce_tiles_kernel)
    (item, n, op, identity, sums);
  check_cuda(cudaGetLastError(), what);
  PULSE_LAUNCH(1, kScanThreads, stream, scan_tile_sums_kernel)(sums, tiles, op, identity, total);
  check_cuda(cudaGetLastError(), what);
  if (tiles)
    PULSE_LAUNCH(static_cast<unsigned>(tiles), kTileThreads, stream, scan_tiles_kernel)
    (item, n, op, identity, sums, consume);
  check_cuda(cudaGetLastError(), what);
}

}  // namespace
}  // namespace pulse::kernels::cuda
