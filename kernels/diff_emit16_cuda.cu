// kernels/diff_emit16_cuda.h: fused BF16 cast + diff + stream compaction on the GPU. CPU reference:
// kernels/bf16.h (fp32_to_bf16_rne) and kernels/diff_emit16.h (diff_emit16_portable).
#include <stdexcept>

#include "kernels/diff_emit16_cuda.h"
#include "kernels/tile_scan_cuda.h"

namespace pulse::kernels::cuda {
namespace {

/// One tile's compacted changes, positions inside the tile (-1: none).
struct TileInfo {
  uint32_t count;  ///< changes
  int32_t first;   ///< position of the first change
  int32_t last;    ///< position of the last change
  uint32_t tail;   ///< tail bytes of every change but the first (each at most 1: in-tile gaps < 4096)
};

/// Where a tile's streams go, from the scan of the tile records.
struct TileOffsets {
  uint64_t change;     ///< index of its first change in head / lo / hi
  uint64_t tail;       ///< byte offset of its first change's tail bytes
  uint64_t first_gap;  ///< gap of its first change (from the previous tile's last change)
};

struct Totals {
  uint64_t changed;
  uint64_t tail_bytes;
};

/// kernels/bf16.h fp32_to_bf16_rne on the bit pattern.
__device__ __forceinline__ uint16_t bf16_rne(uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/// kernels/int_coding.h zigzag for 16 bits.
__device__ __forceinline__ uint16_t zigzag16(uint16_t d) {
  return static_cast<uint16_t>(static_cast<uint16_t>(d << 1) ^ static_cast<uint16_t>(0u - (d >> 15)));
}

/// LEB128 bytes of a gap's tail (gap >> 7): 0 when r == 0.
__device__ __forceinline__ uint32_t tail_len(uint64_t r) {
  return r ? (64u - static_cast<uint32_t>(__clzll(static_cast<long long>(r))) + 6u) / 7u : 0u;
}

/// Loads 16 u16 at p (16-byte aligned) into words w[0..8) (element 2k in the low half of w[k]).
__device__ __forceinline__ void load16x16(const uint16_t* p, uint32_t (&w)[8]) {
  const uint4 a = reinterpret_cast<const uint4*>(p)[0];
  const uint4 b = reinterpret_cast<const uint4*>(p)[1];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

/// Phase 1: cast, compare, compact each tile's changes into its scratch area (tile * 4096 bytes on).
template <bool kCast, bool kDelta>
__global__ void __launch_bounds__(kTileThreads)
    emit_tiles_kernel(const float* master, const uint16_t* prev, uint16_t* target, uint64_t n, bool vec,
                      uint8_t* s_head, uint8_t* s_tail, uint8_t* s_lo, uint8_t* s_hi, TileInfo* info) {
  using CL = CountLast<uint32_t, int32_t>;
  __shared__ CL smem_cl[kTileThreads / 32];
  __shared__ uint32_t smem_u[kTileThreads / 32];
  __shared__ int32_t tile_first;
  const uint64_t tile = blockIdx.x;
  const int32_t t0 = static_cast<int32_t>(threadIdx.x) * kTileItems;  // in-tile offset
  const uint64_t base = tile * kTile + static_cast<uint64_t>(t0);
  if (threadIdx.x == 0) tile_first = -1;

  uint16_t nv[kTileItems], pv[kTileItems];
  if (vec && base + kTileItems <= n) {
    uint32_t pw[8];
    load16x16(prev + base, pw);
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) pv[k] = static_cast<uint16_t>(pw[k / 2] >> (16 * (k & 1)));
    if (kCast) {
      const float4* m4 = reinterpret_cast<const float4*>(master + base);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 f = m4[q];
        nv[4 * q + 0] = bf16_rne(__float_as_uint(f.x));
        nv[4 * q + 1] = bf16_rne(__float_as_uint(f.y));
        nv[4 * q + 2] = bf16_rne(__float_as_uint(f.z));
        nv[4 * q + 3] = bf16_rne(__float_as_uint(f.w));
      }
      uint4 a, b;
      a.x = nv[0] | static_cast<uint32_t>(nv[1]) << 16, a.y = nv[2] | static_cast<uint32_t>(nv[3]) << 16;
      a.z = nv[4] | static_cast<uint32_t>(nv[5]) << 16, a.w = nv[6] | static_cast<uint32_t>(nv[7]) << 16;
      b.x = nv[8] | static_cast<uint32_t>(nv[9]) << 16, b.y = nv[10] | static_cast<uint32_t>(nv[11]) << 16;
      b.z = nv[12] | static_cast<uint32_t>(nv[13]) << 16, b.w = nv[14] | static_cast<uint32_t>(nv[15]) << 16;
      reinterpret_cast<uint4*>(target + base)[0] = a;
      reinterpret_cast<uint4*>(target + base)[1] = b;
    } else {
      uint32_t tw[8];
      load16x16(target + base, tw);
#pragma unroll
      for (int k = 0; k < kTileItems; ++k) nv[k] = static_cast<uint16_t>(tw[k / 2] >> (16 * (k & 1)));
    }
  } else {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      if (base + k < n) {
        pv[k] = prev[base + k];
        if (kCast) {
          nv[k] = bf16_rne(__float_as_uint(master[base + k]));
          target[base + k] = nv[k];
        } else {
          nv[k] = target[base + k];
        }
      } else {
        pv[k] = nv[k] = 0;  // past the end: unchanged
      }
    }
  }

  uint32_t mask = 0;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) mask |= static_cast<uint32_t>(nv[k] != pv[k]) << k;
  const uint32_t count = static_cast<uint32_t>(__popc(mask));
  const int32_t first_k = mask ? __ffs(static_cast<int>(mask)) - 1 : 0;
  const int32_t last_k = mask ? 31 - __clz(static_cast<int>(mask)) : 0;

  // Changes before this thread and the tile's last change before it.
  CL tile_total;
  const CL before = block_exclusive_scan<kTileThreads>(CL{count, mask ? t0 + last_k : -1}, CountLastOp{},
                                                       CL{0u, -1}, smem_cl, tile_total);
  // Only a thread's first change can have a gap >= 128 (in-thread gaps are < 16), and inside a tile that
  // gap is < 4096: one tail byte at most. The tile's first change waits for phase 2.
  uint32_t tail = 0;
  if (count && before.last >= 0) tail = (t0 + first_k - before.last - 1) >= 128;
  if (count && before.last < 0) tile_first = t0 + first_k;
  uint32_t tail_total;
  const uint32_t tail_before =
      block_exclusive_scan<kTileThreads>(tail, SumOp{}, 0u, smem_u, tail_total);  // also orders tile_first

  const uint64_t s = tile * kTile;
  uint32_t o = before.count;
  int32_t prevpos = before.last;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    if (mask >> k & 1u) {
      const int32_t pos = t0 + k;
      uint8_t head = 0;  // the tile's first change: written in phase 3
      if (prevpos >= 0) {
        const uint32_t gap = static_cast<uint32_t>(pos - prevpos - 1);
        head = static_cast<uint8_t>((gap & 127u) | (gap >= 128u ? 128u : 0u));
        if (gap >= 128u) s_tail[s + tail_before] = static_cast<uint8_t>(gap >> 7);
      }
      const uint16_t val = kDelta ? zigzag16(static_cast<uint16_t>(nv[k] - pv[k])) : nv[k];
      s_head[s + o] = head;
      s_lo[s + o] = static_cast<uint8_t>(val);
      s_hi[s + o] = static_cast<uint8_t>(val >> 8);
      ++o;
      prevpos = pos;
    }
  }
  if (threadIdx.x == 0) info[tile] = TileInfo{tile_total.count, tile_first, tile_total.last, tail_total};
}

/// Phase 2 (one block): per tile, where its changes and tail bytes go and the gap of its first change.
/// Each thread takes a contiguous run of tiles: (count, last) reduced and block-scanned, then the tail
/// bytes of its tiles (which need the last change before each) reduced and block-scanned, then written.
__global__ void __launch_bounds__(kScanThreads)
    scan_tile_info_kernel(const TileInfo* info, uint64_t tiles, TileOffsets* offsets, Totals* totals) {
  using CL = CountLast<uint64_t, int64_t>;
  __shared__ CL smem_cl[kScanThreads / 32];
  __shared__ uint64_t smem_u[kScanThreads / 32];
  const uint64_t per = (tiles + kScanThreads - 1) / kScanThreads;
  const uint64_t begin = min(tiles, threadIdx.x * per), end = min(tiles, begin + per);
  auto summary = [&](uint64_t i, const TileInfo& ti) {
    return CL{ti.count, ti.count ? static_cast<int64_t>(i * kTile) + ti.last : -1};
  };
  auto first_gap = [&](uint64_t i, const TileInfo& ti, const CL& before) {
    return static_cast<uint64_t>(static_cast<int64_t>(i * kTile) + ti.first - (before.last + 1));
  };
  CL local{0, -1};
  for (uint64_t i = begin; i < end; ++i) local = CountLastOp{}(local, summary(i, info[i]));
  CL all;
  const CL before = block_exclusive_scan<kScanThreads>(local, CountLastOp{}, CL{0, -1}, smem_cl, all);
  uint64_t tail_local = 0;
  CL run = before;
  for (uint64_t i = begin; i < end; ++i) {
    const TileInfo ti = info[i];
    if (ti.count) tail_local += tail_len(first_gap(i, ti, run) >> 7) + ti.tail;
    run = CountLastOp{}(run, summary(i, ti));
  }
  uint64_t tail_all;
  uint64_t tail_run = block_exclusive_scan<kScanThreads>(tail_local, SumOp{}, uint64_t{0}, smem_u, tail_all);
  run = before;
  for (uint64_t i = begin; i < end; ++i) {
    const TileInfo ti = info[i];
    const uint64_t gap = ti.count ? first_gap(i, ti, run) : 0;
    offsets[i] = TileOffsets{run.count, tail_run, gap};
    if (ti.count) tail_run += tail_len(gap >> 7) + ti.tail;
    run = CountLastOp{}(run, summary(i, ti));
  }
  if (threadIdx.x == 0) *totals = Totals{all.count, tail_all};
}

/// Phase 3: each non-empty tile writes its first change's head and tail, then copies the rest.
__global__ void __launch_bounds__(kTileThreads)
    place_tiles_kernel(const TileInfo* info, const TileOffsets* offsets, const uint8_t* s_head,
                       const uint8_t* s_tail, const uint8_t* s_lo, const uint8_t* s_hi, Emit16Streams out) {
  const uint64_t tile = blockIdx.x;
  const TileInfo ti = info[tile];
  if (ti.count == 0) return;
  const TileOffsets to = offsets[tile];
  const uint64_t s = tile * kTile;
  const uint64_t r = to.first_gap >> 7;
  const uint32_t first_tail = tail_len(r);
  if (threadIdx.x == 0) {
    out.head[to.change] = static_cast<uint8_t>((to.first_gap & 127u) | (r ? 128u : 0u));
    uint64_t rest = r;
    for (uint32_t b = 0; b < first_tail; ++b, rest >>= 7)
      out.tail[to.tail + b] = static_cast<uint8_t>((rest & 127u) | (b + 1 < first_tail ? 128u : 0u));
  }
  for (uint32_t j = threadIdx.x; j < ti.count; j += kTileThreads) {
    if (j) out.head[to.change + j] = s_head[s + j];
    out.lo[to.change + j] = s_lo[s + j];
    out.hi[to.change + j] = s_hi[s + j];
  }
  for (uint32_t j = threadIdx.x; j < ti.tail; j += kTileThreads)
    out.tail[to.tail + first_tail + j] = s_tail[s + j];
}

struct EmitWorkspace {
  uint8_t *head, *tail, *lo, *hi;
  TileInfo* info;
  TileOffsets* offsets;
  Totals* totals;
  size_t bytes;
};

EmitWorkspace carve(void* base, uint64_t n) {
  const uint64_t tiles = tiles_of(n);
  Carver c{static_cast<uint8_t*>(base)};
  EmitWorkspace w;
  w.head = c.take<uint8_t>(tiles * kTile);
  w.tail = c.take<uint8_t>(tiles * kTile);
  w.lo = c.take<uint8_t>(tiles * kTile);
  w.hi = c.take<uint8_t>(tiles * kTile);
  w.info = c.take<TileInfo>(tiles);
  w.offsets = c.take<TileOffsets>(tiles);
  w.totals = c.take<Totals>(1);
  w.bytes = c.used;
  return w;
}

template <bool kCast, bool kDelta>
void launch_emit(const float* master, const uint16_t* prev, uint16_t* target, uint64_t n, bool vec,
                 const EmitWorkspace& w, cudaStream_t stream) {
  PULSE_LAUNCH(static_cast<unsigned>(tiles_of(n)), kTileThreads, stream, emit_tiles_kernel<kCast, kDelta>)
  (master, prev, target, n, vec, w.head, w.tail, w.lo, w.hi, w.info);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

uint64_t emit16_cuda_tail_room(uint64_t n) {
  return n + 9 * tiles_of(n) + 16;
}

size_t emit16_cuda_workspace_bytes(uint64_t n) {
  return carve(nullptr, n).bytes;
}

void cast_diff_emit16_cuda(const float* master, const uint16_t* prev, uint16_t* target, uint64_t n,
                           bool delta, const Emit16Streams& out, void* workspace, size_t workspace_bytes,
                           Emit16Totals* totals, cudaStream_t stream) {
  if (!totals) throw std::invalid_argument("cast_diff_emit16_cuda: totals is null");
  if (n == 0) {
    *totals = Emit16Totals{};
    return;
  }
  if (!prev || !target || !out.head || !out.tail || !out.lo || !out.hi || !workspace)
    throw std::invalid_argument("cast_diff_emit16_cuda: null device pointer");
  const uint64_t tiles = tiles_of(n);
  if (tiles > 0x7fffffffu)
    throw std::invalid_argument("cast_diff_emit16_cuda: tensor too large for one grid");
  const EmitWorkspace w = carve(workspace, n);
  if (workspace_bytes < w.bytes)
    throw std::invalid_argument("cast_diff_emit16_cuda: workspace holds " + std::to_string(workspace_bytes) +
                                " bytes, needs " + std::to_string(w.bytes));
  const bool vec = aligned16(prev) && aligned16(target) && (!master || aligned16(master));
  if (master)
    delta ? launch_emit<true, true>(master, prev, target, n, vec, w, stream)
          : launch_emit<true, false>(master, prev, target, n, vec, w, stream);
  else
    delta ? launch_emit<false, true>(master, prev, target, n, vec, w, stream)
          : launch_emit<false, false>(master, prev, target, n, vec, w, stream);
  check_cuda(cudaGetLastError(), "cast_diff_emit16_cuda: emit_tiles_kernel");
  PULSE_LAUNCH(1, kScanThreads, stream, scan_tile_info_kernel)(w.info, tiles, w.offsets, w.totals);
  check_cuda(cudaGetLastError(), "cast_diff_emit16_cuda: scan_tile_info_kernel");
  PULSE_LAUNCH(static_cast<unsigned>(tiles), kTileThreads, stream, place_tiles_kernel)
  (w.info, w.offsets, w.head, w.tail, w.lo, w.hi, out);
  check_cuda(cudaGetLastError(), "cast_diff_emit16_cuda: place_tiles_kernel");
  static_assert(sizeof(Totals) == sizeof(Emit16Totals), "Totals mirrors Emit16Totals");
  check_cuda(cudaMemcpyAsync(totals, w.totals, sizeof(Totals), cudaMemcpyDeviceToHost, stream),
             "cast_diff_emit16_cuda: totals copy");
}

}  // namespace pulse::kernels::cuda
