// kernels/loco_gate_cuda.h: the PULSELoCo gate on the GPU. CPU reference: kernels/loco_gate.h.
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/loco_gate_cuda.h"
#include "kernels/tile_scan_cuda.h"

namespace pulse::kernels::cuda {
namespace {

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kExpMask = 0x7f800000u;
constexpr uint32_t kCanonicalNan = 0x7fc00000u;
constexpr uint32_t kQuietBit = 0x00400000u;
constexpr uint32_t kDefaultNan = 0xffc00000u;  ///< x86's "real indefinite" (inf - inf and the like)

__device__ __forceinline__ uint16_t bf16_rne(uint32_t bits) {
  if ((bits & kAbsMask) > kExpMask) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ bool is_nan(uint32_t bits) {
  return (bits & kAbsMask) > kExpMask;
}

/// The bit pattern x86 (SSE/AVX subss/subps, what the CPU variants run) gives for g - s: IEEE RNE for
/// non-NaN results; a NaN operand propagates quieted, the first one when both are NaN; an invalid
/// operation (inf - inf) gives the default NaN 0xffc00000. CUDA would give 0x7fffffff for all of them.
__device__ __forceinline__ uint32_t x86_sub_bits(float g, float s) {
  const uint32_t gb = __float_as_uint(g), sb = __float_as_uint(s);
  const uint32_t d = __float_as_uint(__fsub_rn(g, s));
  if (!is_nan(d)) return d;
  if (is_nan(gb)) return gb | kQuietBit;
  if (is_nan(sb)) return sb | kQuietBit;
  return kDefaultNan;
}

template <bool kOpen>
__global__ void __launch_bounds__(kTileThreads)
    gate_tiles_kernel(const float* g, const float* l, float* r, uint64_t n, bool vec, uint32_t index_base,
                      uint32_t* s_index, float* s_value, uint64_t* counts, unsigned int* nonfinite) {
  __shared__ uint32_t smem[kTileThreads / 32];
  const uint64_t tile = blockIdx.x;
  const uint64_t base = tile * kTile + static_cast<uint64_t>(threadIdx.x) * kTileItems;
  float gv[kTileItems], lv[kTileItems], rv[kTileItems];
  const bool full = base + kTileItems <= n;
  if (vec && full) {
#pragma unroll
    for (int q = 0; q < kTileItems / 4; ++q) {
      const float4 a = reinterpret_cast<const float4*>(g + base)[q];
      const float4 b = reinterpret_cast<const float4*>(l + base)[q];
      const float4 c = reinterpret_cast<const float4*>(r + base)[q];
      gv[4 * q] = a.x, gv[4 * q + 1] = a.y, gv[4 * q + 2] = a.z, gv[4 * q + 3] = a.w;
      lv[4 * q] = b.x, lv[4 * q + 1] = b.y, lv[4 * q + 2] = b.z, lv[4 * q + 3] = b.w;
      rv[4 * q] = c.x, rv[4 * q + 1] = c.y, rv[4 * q + 2] = c.z, rv[4 * q + 3] = c.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      const bool in = base + k < n;
      gv[k] = in ? g[base + k] : 0.0f;
      lv[k] = in ? l[base + k] : 0.0f;
      rv[k] = in ? r[base + k] : 0.0f;
    }
  }
  uint32_t fire = 0;
  bool bad = false;
  float sv[kTileItems];
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    const float delta = __fsub_rn(gv[k], lv[k]);
    uint32_t sb = __float_as_uint(__fadd_rn(rv[k], delta));
    if (is_nan(sb)) sb = kCanonicalNan;
    const float s = __uint_as_float(sb);
    sv[k] = s;
    const bool live = base + k < n;
    bad |= live && (sb & kExpMask) == kExpMask;
    const bool f = kOpen || bf16_rne(__float_as_uint(gv[k])) != bf16_rne(x86_sub_bits(gv[k], s));
    fire |= static_cast<uint32_t>(live && f) << k;
    rv[k] = f ? 0.0f : s;
  }
  if (vec && full) {
#pragma unroll
    for (int q = 0; q < kTileItems / 4; ++q)
      reinterpret_cast<float4*>(r + base)[q] =
          make_float4(rv[4 * q], rv[4 * q + 1], rv[4 * q + 2], rv[4 * q + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k)
      if (base + k < n) r[base + k] = rv[k];
  }
  uint32_t total;
  uint32_t o =
      block_exclusive_scan<kTileThreads>(static_cast<uint32_t>(__popc(fire)), SumOp{}, 0u, smem, total);
  const uint64_t s0 = tile * kTile;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    if (fire >> k & 1u) {
      s_index[s0 + o] = index_base + static_cast<uint32_t>(base + k);
      s_value[s0 + o] = sv[k];
      ++o;
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(nonfinite, 1u);
  if (threadIdx.x == 0) counts[tile] = total;
}

__global__ void __launch_bounds__(kTileThreads)
    place_fired_kernel(const uint64_t* counts_prefix, uint64_t tiles, const uint64_t* total,
                       const uint32_t* s_index, const float* s_value, uint32_t* out_index, float* out_value) {
  const uint64_t tile = blockIdx.x;
  const uint64_t begin = counts_prefix[tile];
  const uint64_t end = tile + 1 < tiles ? counts_prefix[tile + 1] : *total;
  const uint64_t s0 = tile * kTile;
  for (uint64_t j = threadIdx.x; j < end - begin; j += kTileThreads) {
    out_index[begin + j] = s_index[s0 + j];
    out_value[begin + j] = s_value[s0 + j];
  }
}

// ---- ulp value coding (kernels/loco_ulp.h: the CPU reference, loco_ulp_quantize) -------------------

constexpr int32_t kUlpMaxCount = int32_t{1} << 24;  // = kLocoUlpMaxCount
constexpr int32_t kUlpEscape = INT32_MIN;           // = kLocoUlpEscape

/// loco_ulp_step_bits: integer code, the same bits as on the CPU.
__device__ __forceinline__ uint32_t ulp_step_bits(uint32_t gb) {
  if ((gb & kExpMask) == kExpMask) return 0;
  const uint32_t b = (gb + 0x7fffu + ((gb >> 16) & 1u)) >> 16;
  uint32_t e = (b >> 7) & 0xffu;
  if (e == 0xffu) return 0;
  if (e == 0) e = 1;
  const int k = static_cast<int>(e) - 134;
  return k >= -126 ? static_cast<uint32_t>(k + 127) << 23 : 1u << (k + 149);
}

__global__ void __launch_bounds__(kTileThreads)
    ulp_quantize_kernel(const float* g, float* r, const uint32_t* fired_index, float* fired_value,
                        int32_t* fired_count, uint64_t n_fired, uint32_t index_base) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kTileThreads;
  for (uint64_t k = static_cast<uint64_t>(blockIdx.x) * kTileThreads + threadIdx.x; k < n_fired;
       k += stride) {
    const uint64_t i = fired_index[k] - index_base;
    const float s = fired_value[k];
    const float step = __uint_as_float(ulp_step_bits(__float_as_uint(g[i])));
    const float q = __fdiv_rn(s, step);
    int32_t c = kUlpEscape;
    float sent = s, rest = 0.0f;
    if (fabsf(q) <= static_cast<float>(kUlpMaxCount)) {
      const float cf = rintf(q);
      const float p = __fmul_rn(cf, step);
      if (cf == 0.0f) {
        c = 0, sent = 0.0f, rest = s;
      } else if ((__float_as_uint(p) & kExpMask) != kExpMask) {
        c = static_cast<int32_t>(cf), sent = p, rest = __fsub_rn(s, p);
      }
    }
    fired_count[k] = c;
    fired_value[k] = sent;
    r[i] = rest;
  }
}

struct GateWorkspace {
  uint32_t* index;
  float* value;
  uint64_t* counts;
  uint64_t* total;
  unsigned int* nonfinite;
  size_t bytes;
};

GateWorkspace carve(void* base, uint64_t n) {
  const uint64_t tiles = tiles_of(n);
  Carver c{static_cast<uint8_t*>(base)};
  GateWorkspace w;
  w.index = c.take<uint32_t>(tiles * kTile);
  w.value = c.take<float>(tiles * kTile);
  w.counts = c.take<uint64_t>(tiles + 1);
  w.total = c.take<uint64_t>(1);
  w.nonfinite = c.take<unsigned int>(1);
  w.bytes = c.used;
  return w;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

size_t loco_gate_cuda_workspace_bytes(uint64_t n) {
  return carve(nullptr, n).bytes;
}

LocoGateResult loco_gate_cuda(const float* global, const float* local, float* residual, uint64_t n,
                              bool gate_open, uint32_t* fired_index, float* fired_value, uint32_t index_base,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (static_cast<uint64_t>(index_base) + n > (uint64_t{1} << 32))
    throw std::invalid_argument(
        "loco_gate_cuda: index_base + n = " + std::to_string(static_cast<uint64_t>(index_base) + n) +
        " exceeds 2^32 (indices are uint32)");
  LocoGateResult res;
  if (n == 0) return res;
  if (!global || !local || !residual || !fired_index || !fired_value || !workspace)
    throw std::invalid_argument("loco_gate_cuda: null device pointer");
  const GateWorkspace w = carve(workspace, n);
  if (workspace_bytes < w.bytes)
    throw std::invalid_argument("loco_gate_cuda: workspace holds " + std::to_string(workspace_bytes) +
                                " bytes, needs " + std::to_string(w.bytes));
  const uint64_t tiles = tiles_of(n);
  check_cuda(cudaMemsetAsync(w.nonfinite, 0, sizeof(unsigned int), stream), "loco_gate_cuda: memset");
  const bool vec = aligned16(global) && aligned16(local) && aligned16(residual);
  if (gate_open) PULSE_LAUNCH(static_cast<unsigned>(tiles), kTileThreads, stream, gate_tiles_kernel<true>)
  (global, local, residual, n, vec, index_base, w.index, w.value, w.counts, w.nonfinite);
  else PULSE_LAUNCH(static_cast<unsigned>(tiles), kTileThreads, stream, gate_tiles_kernel<false>)(
      global, local, residual, n, vec, index_base, w.index, w.value, w.counts, w.nonfinite);
  check_cuda(cudaGetLastError(), "loco_gate_cuda: gate_tiles_kernel");
  PULSE_LAUNCH(1, kScanThreads, stream, scan_tile_sums_kernel)
  (w.counts, tiles, SumOp{}, uint64_t{0}, w.total);
  check_cuda(cudaGetLastError(), "loco_gate_cuda: scan");
  PULSE_LAUNCH(static_cast<unsigned>(tiles), kTileThreads, stream, place_fired_kernel)
  (w.counts, tiles, w.total, w.index, w.value, fired_index, fired_value);
  check_cuda(cudaGetLastError(), "loco_gate_cuda: place_fired_kernel");
  uint64_t total = 0;
  unsigned int nonfinite = 0;
  check_cuda(cudaMemcpyAsync(&total, w.total, sizeof total, cudaMemcpyDeviceToHost, stream),
             "loco_gate_cuda: copy");
  check_cuda(cudaMemcpyAsync(&nonfinite, w.nonfinite, sizeof nonfinite, cudaMemcpyDeviceToHost, stream),
             "loco_gate_cuda: copy");
  check_cuda(cudaStreamSynchronize(stream), "loco_gate_cuda: synchronize");
  res.fired = total;
  res.nonfinite = nonfinite != 0;
  return res;
}

void loco_ulp_quantize_cuda(const float* global, float* residual, const uint32_t* fired_index,
                            float* fired_value, int32_t* fired_count, uint64_t n_fired, uint32_t index_base,
                            cudaStream_t stream) {
  if (n_fired == 0) return;
  if (!global || !residual || !fired_index || !fired_value || !fired_count)
    throw std::invalid_argument("loco_ulp_quantize_cuda: null device pointer");
  const uint64_t blocks = std::min<uint64_t>((n_fired + kTileThreads - 1) / kTileThreads, uint64_t{1} << 16);
  PULSE_LAUNCH(static_cast<unsigned>(blocks), kTileThreads, stream, ulp_quantize_kernel)
  (global, residual, fired_index, fired_value, fired_count, n_fired, index_base);
  check_cuda(cudaGetLastError(), "loco_ulp_quantize_cuda: ulp_quantize_kernel");
  check_cuda(cudaStreamSynchronize(stream), "loco_ulp_quantize_cuda: synchronize");
}

}  // namespace pulse::kernels::cuda
