// kernels/xxh3_cuda.h: XXH3-64 of device memory. CPU reference: libxxhash XXH3_64bits.
#include <xxhash.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tile_scan_cuda.h"
#include "kernels/xxh3_cuda.h"
#include "kernels/xxh3_long.h"
#include "kernels/xxh3_tail.h"

namespace pulse::kernels::cuda {
namespace {

/// XXH3's default secret as 24 little-endian u64 words (every key the device needs is word-aligned:
/// stripe s, lane i uses word s + i; the scramble uses words 16 + i).
struct Secret {
  uint64_t w[24];
};

/// The initial accumulators (XXH3_INIT_ACC).
struct Init {
  uint64_t acc[8];
};

__device__ __forceinline__ uint64_t load64(const uint8_t* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const uint64_t*>(p);
  uint64_t v = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b) v |= static_cast<uint64_t>(p[b]) << (8 * b);
  return v;
}

/// contrib[8 b + i] = what block b adds to accumulator i over its 16 stripes (XXH3_accumulate_512:
/// acc[i ^ 1] += data[i]; acc[i] += lo32(data[i] ^ key[i]) * hi32(data[i] ^ key[i])).
__global__ void __launch_bounds__(256)
    contrib_kernel(const uint8_t* data, uint64_t blocks, bool aligned, Secret secret, uint64_t* contrib) {
  const uint64_t gid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t b = gid >> 3;
  const int lane = static_cast<int>(gid & 7);
  if (b >= blocks) return;
  const uint8_t* block = data + b * 1024;
  uint64_t c = 0;
#pragma unroll
  for (int s = 0; s < 16; ++s) {
    const uint64_t d = load64(block + 64 * s + 8 * lane, aligned);
    const uint64_t swapped = load64(block + 64 * s + 8 * (lane ^ 1), aligned);
    const uint64_t dk = d ^ secret.w[s + lane];
    c += (dk & 0xffffffffu) * (dk >> 32) + swapped;
  }
  contrib[gid] = c;
}

/// The sequential part: per lane, acc = scramble(acc + contrib[b]) for every block b.
__global__ void chain_kernel(const uint64_t* contrib, uint64_t blocks, Secret secret, Init init,
                             uint64_t* acc_out) {
  const int lane = threadIdx.x;
  if (lane >= 8) return;
  uint64_t acc = init.acc[lane];
  const uint64_t key = secret.w[16 + lane];
  constexpr uint64_t kPrime32_1 = 0x9E3779B1u;
  // The chain is bound by the latency of its contrib loads, not by its few integer operations: batches
  // of kBatch blocks, the next batch's loads issued before the current batch is scrambled (double
  // buffered), so a load's ~1 us round trip hides behind kBatch dependent scrambles.
  constexpr int kBatch = 32;
  uint64_t cur[kBatch], next[kBatch];
  uint64_t b = 0;
  if (blocks >= kBatch) {
#pragma unroll
    for (int k = 0; k < kBatch; ++k) cur[k] = contrib[static_cast<uint64_t>(k) * 8 + lane];
  }
  for (; b + kBatch <= blocks; b += kBatch) {
    const bool more = b + 2 * kBatch <= blocks;
    if (more) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) next[k] = contrib[(b + kBatch + k) * 8 + lane];
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      acc += cur[k];
      acc = ((acc ^ (acc >> 47)) ^ key) * kPrime32_1;
    }
    if (more) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) cur[k] = next[k];
    }
  }
  for (; b < blocks; ++b) {
    acc += contrib[b * 8 + lane];
    acc = ((acc ^ (acc >> 47)) ^ key) * kPrime32_1;
  }
  acc_out[lane] = acc;
}

}  // namespace

size_t xxh3_cuda_workspace_bytes(uint64_t len) {
  const uint64_t blocks = len >= kXxh3LongMinBytes ? xxh3_long_block_bytes(len) / kXxh3BlockBytes : 0;
  Carver c{nullptr};
  c.take<uint64_t>(blocks * 8);
  c.take<uint64_t>(8);
  return c.used;
}

uint64_t xxh3_64_cuda(const void* data, uint64_t len, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  if (len == 0) return XXH3_64bits(nullptr, 0);
  if (!data) throw std::invalid_argument("xxh3_64_cuda: null device pointer");
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (len < kXxh3LongMinBytes) {
    uint8_t host[kXxh3LongMinBytes];
    check_cuda(cudaMemcpyAsync(host, bytes, len, cudaMemcpyDeviceToHost, stream), "xxh3_64_cuda: copy");
    check_cuda(cudaStreamSynchronize(stream), "xxh3_64_cuda: synchronize");
    return XXH3_64bits(host, len);
  }
  if (!workspace) throw std::invalid_argument("xxh3_64_cuda: null workspace");
  if (workspace_bytes < xxh3_cuda_workspace_bytes(len))
    throw std::invalid_argument("xxh3_64_cuda: workspace holds " + std::to_string(workspace_bytes) +
                                " bytes, needs " + std::to_string(xxh3_cuda_workspace_bytes(len)));
  const uint64_t blocks = xxh3_long_block_bytes(len) / kXxh3BlockBytes;
  Carver c{static_cast<uint8_t*>(workspace)};
  uint64_t* contrib = c.take<uint64_t>(blocks * 8);
  uint64_t* acc = c.take<uint64_t>(8);
  Secret secret;
  std::memcpy(secret.w, xxh3_default_secret(), sizeof secret.w);
  Xxh3LongState state;
  xxh3_long_init(state);
  Init init;
  std::memcpy(init.acc, state.acc, sizeof init.acc);
  const bool aligned = (reinterpret_cast<uintptr_t>(bytes) & 7u) == 0;
  if (blocks) {
    const uint64_t threads = blocks * 8;
    contrib_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(bytes, blocks, aligned,
                                                                                     secret, contrib);
    check_cuda(cudaGetLastError(), "xxh3_64_cuda: contrib_kernel");
  }
  chain_kernel<<<1, 32, 0, stream>>>(contrib, blocks, secret, init, acc);
  check_cuda(cudaGetLastError(), "xxh3_64_cuda: chain_kernel");
  const uint64_t tail_offset = xxh3_long_tail_offset(len);
  std::vector<uint8_t> tail(len - tail_offset);
  check_cuda(cudaMemcpyAsync(state.acc, acc, sizeof state.acc, cudaMemcpyDeviceToHost, stream),
             "xxh3_64_cuda: copy");
  check_cuda(cudaMemcpyAsync(tail.data(), bytes + tail_offset, tail.size(), cudaMemcpyDeviceToHost, stream),
             "xxh3_64_cuda: copy");
  check_cuda(cudaStreamSynchronize(stream), "xxh3_64_cuda: synchronize");
  return xxh3_long_finish_tail(state, tail.data(), tail_offset, len);
}

}  // namespace pulse::kernels::cuda
