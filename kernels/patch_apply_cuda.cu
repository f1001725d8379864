// kernels/patch_apply_cuda.h: device-side validation of a varint-gap index stream, then the scatter.
// Steps (each a tiled device-wide scan, kernels/tile_scan_cuda.h):
//   1. tail bytes: rank of every chain end; each chain start decodes its chain (checks length and the
//      64-bit rule) into chain_value[rank];
//   2. heads: rank of every head with bit 7 -> gap = head & 127 | chain_value[rank] << 7, gap1 = gap + 1;
//   3. gap1, saturating sum: position = prefix + gap; every position must be < n;
//   4. scatter, only if the device-side verdict is still "ok".
// The verdict is one u64, (at << 8) | code, lowered with atomicMin: the smallest offending offset wins,
// so the report does not depend on scheduling.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/patch_apply_cuda.h"
#include "kernels/tile_scan_cuda.h"

namespace pulse::kernels::cuda {
namespace {

constexpr unsigned long long kVerdictOk = ~0ull;

__device__ __forceinline__ void fail(unsigned long long* verdict, uint32_t code, uint64_t at) {
  atomicMin(verdict, (static_cast<unsigned long long>(at) << 8) | code);
}

/// 1 for a tail byte that ends a chain (bit 7 clear).
struct ChainEnd {
  const uint8_t* tail;
  __device__ uint64_t operator()(uint64_t i) const { return (tail[i] & 0x80u) ? 0 : 1; }
};

/// At each chain start (first byte, or after an end): decodes the chain under validate_index_stream's
/// rule and stores its value at chain_value[rank].
struct DecodeChains {
  const uint8_t* tail;
  uint64_t tail_bytes;
  uint64_t index_offset;  ///< the tail's offset in the index stream (= changed), for error offsets
  uint64_t* chain_value;
  unsigned long long* verdict;
  __device__ void operator()(uint64_t i, uint64_t rank, uint64_t) const {
    if (i && (tail[i - 1] & 0x80u)) return;  // inside a chain, not its start
    uint64_t rest = 0;
    int shift = 0;
    // A refused chain still gets a value (0): step 2 reads chain_value[rank] whatever the verdict, and the
    // workspace is not zeroed, so stale bytes there could add an out-of-bounds report that wins the
    // verdict's minimum over this one.
    for (uint64_t j = i;; ++j) {
      if (j == tail_bytes) {
        fail(verdict, kApplyTailTruncated, index_offset + tail_bytes);
        chain_value[rank] = 0;
        return;
      }
      const uint8_t b = tail[j];
      if (shift >= 57 || (shift == 56 && (b & 127u) > 1u)) {
        fail(verdict, kApplyGapOverflow, index_offset + j);
        chain_value[rank] = 0;
        return;
      }
      rest |= static_cast<uint64_t>(b & 127u) << shift;
      shift += 7;
      if (!(b & 128u)) break;
    }
    chain_value[rank] = rest;
  }
};

/// 1 for a head with bit 7 (it owns a tail chain).
struct Flagged {
  const uint8_t* head;
  __device__ uint64_t operator()(uint64_t j) const { return head[j] >> 7; }
};

/// gap1[j] = gap_j + 1 (saturating), the chain taken by rank.
struct MakeGaps {
  const uint8_t* head;
  const uint64_t* chain_value;
  const uint64_t* chains;  ///< device: the number of chain ends (step 1's total)
  uint64_t* gap1;
  __device__ void operator()(uint64_t j, uint64_t rank, uint64_t flagged) const {
    uint64_t gap = head[j] & 127u;
    if (flagged && rank < *chains) gap |= chain_value[rank] << 7;
    gap1[j] = gap + 1 ? gap + 1 : gap;  // gap 2^64 - 1 (the largest legal chain): saturate, still >= n
  }
};

struct LoadU64 {
  const uint64_t* a;
  __device__ uint64_t operator()(uint64_t j) const { return a[j]; }
};

/// position[j] = prefix + gap1 - 1 (in place over gap1); the first position >= n is reported.
struct MakePositions {
  uint64_t* pos;
  uint64_t n;
  unsigned long long* verdict;
  __device__ void operator()(uint64_t j, uint64_t prefix, uint64_t gap1) const {
    const uint64_t end = SatSumOp{}(prefix, gap1);  // position + 1, saturated
    pos[j] = end - 1;
    if (end > n) fail(verdict, kApplyOutOfBounds, j);
  }
};

/// One thread sets the chain-count verdict once both totals are known.
__global__ void check_counts_kernel(const uint64_t* chains, const uint64_t* flagged, uint64_t index_bytes,
                                    unsigned long long* verdict) {
  if (*chains != *flagged) fail(verdict, kApplyChainCount, index_bytes);
}

__global__ void __launch_bounds__(kTileThreads)
    scatter_kernel(uint16_t* weights, uint64_t n, const uint64_t* pos, const uint8_t* lo, const uint8_t* hi,
                   uint64_t changed, bool delta, uint16_t* undo, const unsigned long long* verdict) {
  if (*verdict != kVerdictOk) return;
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; j < changed;
       j += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t p = pos[j];
    if (p >= n) continue;  // cannot happen after validation; never write outside the tensor
    const uint16_t old = weights[p];
    if (undo) undo[j] = old;
    const uint16_t v = static_cast<uint16_t>(lo[j] | static_cast<uint16_t>(hi[j]) << 8);
    weights[p] = delta ? static_cast<uint16_t>(old + static_cast<uint16_t>((v >> 1) ^ (0u - (v & 1u)))) : v;
  }
}

__global__ void init_kernel(unsigned long long* verdict, uint64_t* chains) {
  *verdict = kVerdictOk;
  *chains = 0;
}

struct ApplyWorkspace {
  uint64_t* tail_sums;
  uint64_t* head_sums;
  uint64_t* gap_sums;
  uint64_t* chain_value;
  uint64_t* gap1;
  uint64_t* chains;
  uint64_t* flagged;
  uint64_t* gap_total;
  unsigned long long* verdict;
  size_t bytes;
};

ApplyWorkspace carve(void* base, uint64_t changed, uint64_t tail_bytes) {
  Carver c{static_cast<uint8_t*>(base)};
  ApplyWorkspace w;
  w.tail_sums = c.take<uint64_t>(tiled_scan_sums<uint64_t>(tail_bytes));
  w.head_sums = c.take<uint64_t>(tiled_scan_sums<uint64_t>(changed));
  w.gap_sums = c.take<uint64_t>(tiled_scan_sums<uint64_t>(changed));
  w.chain_value = c.take<uint64_t>(tail_bytes + 1);
  w.gap1 = c.take<uint64_t>(changed + 1);
  w.chains = c.take<uint64_t>(1);
  w.flagged = c.take<uint64_t>(1);
  w.gap_total = c.take<uint64_t>(1);
  w.verdict = c.take<unsigned long long>(1);
  w.bytes = c.used;
  return w;
}

}  // namespace

const char* apply_error_name(uint32_t error) {
  switch (error) {
    case kApplyOk:
      return "ok";
    case kApplyGapOverflow:
      return "varint gap overflows 64 bits";
    case kApplyTailTruncated:
      return "varint tail truncated";
    case kApplyChainCount:
      return "tail chains do not match the heads with bit 7 (truncated or trailing bytes)";
    case kApplyOutOfBounds:
      return "position out of bounds";
    case kApplyBadSizes:
      return "sizes inconsistent (changed > numel or index stream shorter than the heads)";
    default:
      return "unknown error";
  }
}

size_t apply_u16_cuda_workspace_bytes(uint64_t changed, uint64_t index_bytes) {
  return carve(nullptr, changed, index_bytes > changed ? index_bytes - changed : 0).bytes;
}

void apply_varint_u16_cuda(uint16_t* weights, uint64_t n, const uint8_t* index, uint64_t index_bytes,
                           uint64_t changed, const uint8_t* values, bool delta, uint16_t* undo,
                           void* workspace, size_t workspace_bytes, ApplyStatus* status,
                           cudaStream_t stream) {
  if (!status) throw std::invalid_argument("apply_varint_u16_cuda: status is null");
  *status = ApplyStatus{};
  if (changed > n || index_bytes < changed) {
    *status = ApplyStatus{kApplyBadSizes, 0};
    return;
  }
  if (changed == 0) {
    if (index_bytes != 0) *status = ApplyStatus{kApplyChainCount, index_bytes};  // tail bytes without heads
    return;
  }
  if (!weights || !index || !values || !workspace)
    throw std::invalid_argument("apply_varint_u16_cuda: null device pointer");
  const uint64_t tail_bytes = index_bytes - changed;
  if (tiles_of(changed) > 0x7fffffffu || tiles_of(tail_bytes) > 0x7fffffffu)
    throw std::invalid_argument("apply_varint_u16_cuda: stream too large for one grid");
  const ApplyWorkspace w = carve(workspace, changed, tail_bytes);
  if (workspace_bytes < w.bytes)
    throw std::invalid_argument("apply_varint_u16_cuda: workspace holds " + std::to_string(workspace_bytes) +
                                " bytes, needs " + std::to_string(w.bytes));
  PULSE_LAUNCH(1, 1, stream, init_kernel)(w.verdict, w.chains);
  check_cuda(cudaGetLastError(), "apply_varint_u16_cuda: init");
  const uint8_t* tail = index + changed;
  if (tail_bytes)
    tiled_exclusive_scan(ChainEnd{tail}, tail_bytes, SumOp{}, uint64_t{0}, w.tail_sums, w.chains,
                         DecodeChains{tail, tail_bytes, changed, w.chain_value, w.verdict}, stream,
                         "apply_varint_u16_cuda: tail chains");
  tiled_exclusive_scan(Flagged{index}, changed, SumOp{}, uint64_t{0}, w.head_sums, w.flagged,
                       MakeGaps{index, w.chain_value, w.chains, w.gap1}, stream,
                       "apply_varint_u16_cuda: heads");
  PULSE_LAUNCH(1, 1, stream, check_counts_kernel)(w.chains, w.flagged, index_bytes, w.verdict);
  check_cuda(cudaGetLastError(), "apply_varint_u16_cuda: chain count");
  tiled_exclusive_scan(LoadU64{w.gap1}, changed, SatSumOp{}, uint64_t{0}, w.gap_sums, w.gap_total,
                       MakePositions{w.gap1, n, w.verdict}, stream, "apply_varint_u16_cuda: positions");
  const uint64_t blocks = std::min<uint64_t>((changed + kTileThreads - 1) / kTileThreads, 65536);
  PULSE_LAUNCH(static_cast<unsigned>(blocks), kTileThreads, stream, scatter_kernel)
  (weights, n, w.gap1, values, values + changed, changed, delta, undo, w.verdict);
  check_cuda(cudaGetLastError(), "apply_varint_u16_cuda: scatter");
  // The verdict, decoded on the host: the call returns after the stream reached it.
  unsigned long long verdict_host = kVerdictOk;
  check_cuda(cudaMemcpyAsync(&verdict_host, w.verdict, sizeof verdict_host, cudaMemcpyDeviceToHost, stream),
             "apply_varint_u16_cuda: verdict copy");
  check_cuda(cudaStreamSynchronize(stream), "apply_varint_u16_cuda: synchronize");
  if (verdict_host != kVerdictOk)
    *status =
        ApplyStatus{static_cast<uint32_t>(verdict_host & 0xffu), static_cast<uint64_t>(verdict_host >> 8)};
}

}  // namespace pulse::kernels::cuda
