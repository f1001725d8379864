// kernels/tree_hash_cuda.h: the tree hash of device memory. CPU reference: kernels/tree_hash.h.
#include <xxhash.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tile_scan_cuda.h"
#include "kernels/tree_hash.h"
#include "kernels/tree_hash_cuda.h"
#include "kernels/xxh3_long.h"

namespace pulse::kernels::cuda {
namespace {

constexpr int kLeafThreads = 128;
constexpr uint64_t kBlocksPerChunk = kTreeHashChunkBytes / kXxh3BlockBytes;  // 64

/// XXH3's default secret as 24 little-endian u64 words, and its initial accumulators.
struct Params {
  uint64_t secret[24];
  uint64_t init[8];
};

/// The 8 secret bytes at byte offset `off` (any; off + 8 <= 192), little-endian.
__device__ __forceinline__ uint64_t key_at(const Params& p, int off) {
  const int w = off >> 3, sh = (off & 7) * 8;
  return sh ? (p.secret[w] >> sh) | (p.secret[w + 1] << (64 - sh)) : p.secret[w];
}

__device__ __forceinline__ uint64_t load64(const uint8_t* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const uint64_t*>(p);
  uint64_t v = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b) v |= static_cast<uint64_t>(p[b]) << (8 * b);
  return v;
}

/// What the stripe at `stripe` adds to accumulator `lane` with the key at secret byte `key_off`
/// (XXH3_accumulate_512: acc[i ^ 1] += data[i]; acc[i] += lo32(data[i] ^ key[i]) * hi32(data[i] ^ key[i])).
__device__ __forceinline__ uint64_t stripe_lane(const uint8_t* stripe, int lane, bool aligned, uint64_t key) {
  const uint64_t d = load64(stripe + 8 * lane, aligned);
  const uint64_t dk = d ^ key;
  return (dk & 0xffffffffu) * (dk >> 32) + load64(stripe + 8 * (lane ^ 1), aligned);
}

/// One input: its chunks' leaves at leaves[first_chunk ..), and (when its last chunk is under 241 bytes)
/// that chunk's bytes copied to the staging area at stage_at.
struct Item {
  const uint8_t* data;
  uint64_t len;
  uint64_t first_chunk;  ///< prefix sum of the batch's chunk counts (ascending)
  uint64_t chunks;
  uint64_t stage_at;
  uint32_t stage_bytes;  ///< 0, or the last chunk's length (< 241)
  uint32_t aligned;
};

/// The item that holds global chunk c: the last one whose first_chunk <= c (an item without chunks
/// shares its first_chunk with the next one).
__device__ __forceinline__ uint32_t item_of(const Item* items, uint32_t count, uint64_t c) {
  uint32_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (items[mid].first_chunk <= c)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/// leaves[c] = XXH3_64bits of global chunk c (CUDA block c), for chunks of 241 bytes and more.
__global__ void __launch_bounds__(kLeafThreads)
    leaf_kernel(const Item* items, uint32_t count, Params params, uint64_t* leaves) {
  __shared__ uint64_t contrib[kBlocksPerChunk * 8];
  __shared__ uint64_t acc[8];
  const uint64_t c = blockIdx.x;
  const Item& it = items[item_of(items, count, c)];
  const uint64_t local = c - it.first_chunk;
  const uint64_t rest = it.len - local * kTreeHashChunkBytes;
  const uint64_t len = rest < kTreeHashChunkBytes ? rest : kTreeHashChunkBytes;
  if (len < kXxh3LongMinBytes) return;  // the host hashes it (staged)
  const uint8_t* chunk = it.data + local * kTreeHashChunkBytes;
  const bool aligned = it.aligned != 0;
  const uint64_t blocks = (len - 1) / kXxh3BlockBytes;  // <= 63: the last block is finished below
  const uint64_t done = blocks * kXxh3BlockBytes;
  const uint64_t stripes = (len - 1 - done) / 64;
  // Every full block's 16 stripes summed per lane, and (entry `blocks`) the last block's stripes plus the
  // last stripe (key at secret byte 121), all in parallel: consecutive threads read consecutive words.
  for (uint64_t i = threadIdx.x; i < (blocks + 1) * 8; i += kLeafThreads) {
    const int lane = static_cast<int>(i & 7);
    uint64_t sum = 0;
    if ((i >> 3) < blocks) {
      const uint8_t* block = chunk + (i >> 3) * kXxh3BlockBytes;
#pragma unroll
      for (int s = 0; s < 16; ++s) sum += stripe_lane(block + 64 * s, lane, aligned, params.secret[s + lane]);
    } else {
      for (uint64_t s = 0; s < stripes; ++s)
        sum += stripe_lane(chunk + done + 64 * s, lane, aligned, params.secret[s + lane]);
      sum += stripe_lane(chunk + len - 64, lane, aligned, key_at(params, 192 - 64 - 7 + 8 * lane));
    }
    contrib[i] = sum;
  }
  __syncthreads();
  if (threadIdx.x < 8) {
    // The sequential part: the scramble after each full block, then the last block's sum.
    const int lane = static_cast<int>(threadIdx.x);
    constexpr uint64_t kPrime32_1 = 0x9E3779B1u;
    const uint64_t scramble_key = params.secret[16 + lane];
    uint64_t a = params.init[lane];
    for (uint64_t b = 0; b < blocks; ++b) {
      a += contrib[8 * b + lane];
      a = ((a ^ (a >> 47)) ^ scramble_key) * kPrime32_1;
    }
    acc[lane] = a + contrib[8 * blocks + lane];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // XXH3_mergeAccs(acc, secret + 11, len * PRIME64_1), then XXH3_avalanche.
    uint64_t h = len * 0x9E3779B185EBCA87ull;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint64_t x = acc[2 * i] ^ key_at(params, 11 + 16 * i);
      const uint64_t y = acc[2 * i + 1] ^ key_at(params, 11 + 16 * i + 8);
      h += (x * y) ^ __umul64hi(x, y);
    }
    h ^= h >> 37;
    h *= 0x165667919E3779F9ull;
    h ^= h >> 32;
    leaves[c] = h;
  }
}

/// Copies every staged last chunk (one CUDA block per input; inputs without one return at once).
__global__ void stage_kernel(const Item* items, uint8_t* stage) {
  const Item& it = items[blockIdx.x];
  const uint8_t* from = it.data + (it.len - it.stage_bytes);
  for (uint32_t i = threadIdx.x; i < it.stage_bytes; i += blockDim.x) stage[it.stage_at + i] = from[i];
}

Params device_params() {
  Params p;
  std::memcpy(p.secret, xxh3_default_secret(), sizeof p.secret);
  Xxh3LongState state;
  xxh3_long_init(state);
  std::memcpy(p.init, state.acc, sizeof p.init);
  return p;
}

/// The items of a batch, in input order; sets the totals.
std::vector<Item> plan_items(const void* const* data, const uint64_t* lens, size_t count, uint64_t& chunks,
                             uint64_t& stage) {
  std::vector<Item> items(count);
  chunks = stage = 0;
  for (size_t i = 0; i < count; ++i) {
    Item& it = items[i];
    it.data = static_cast<const uint8_t*>(data ? data[i] : nullptr);
    it.len = lens[i];
    it.first_chunk = chunks;
    it.chunks = tree_hash_chunks(lens[i]);
    const uint64_t last = it.chunks ? tree_hash_chunk_len(lens[i], it.chunks - 1) : 0;
    it.stage_bytes = it.chunks && last < kXxh3LongMinBytes ? static_cast<uint32_t>(last) : 0;
    it.stage_at = stage;
    it.aligned = (reinterpret_cast<uintptr_t>(it.data) & 7u) == 0;
    chunks += it.chunks;
    stage += it.stage_bytes;
  }
  return items;
}

size_t round256(uint64_t b) {
  return static_cast<size_t>((b + 255) / 256 * 256);
}

}  // namespace

size_t tree_hash_cuda_workspace_bytes(const uint64_t* lens, size_t count) {
  uint64_t chunks = 0, stage = 0;
  plan_items(nullptr, lens, count, chunks, stage);
  // Items, then the leaves and the staged bytes back to back (one device-to-host copy brings both).
  return round256(count * sizeof(Item)) + round256(8 * (chunks + (stage + 7) / 8));
}

void tree_hash_cuda_many(const void* const* data, const uint64_t* lens, size_t count, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream, uint64_t* hashes) {
  for (size_t i = 0; i < count; ++i)
    if (lens[i] && !data[i])
      throw std::invalid_argument("tree_hash_cuda_many: input " + std::to_string(i) +
                                  " is a null device pointer");
  if (count == 0) return;
  const size_t need = tree_hash_cuda_workspace_bytes(lens, count);
  if (!workspace || workspace_bytes < need)
    throw std::invalid_argument("tree_hash_cuda_many: the workspace holds " +
                                std::to_string(workspace ? workspace_bytes : 0) + " bytes, needs " +
                                std::to_string(need));
  if (count > UINT32_MAX) throw std::invalid_argument("tree_hash_cuda_many: over 2^32 inputs");
  uint64_t chunks = 0, stage_bytes = 0;
  const std::vector<Item> items = plan_items(data, lens, count, chunks, stage_bytes);
  if (chunks > 0x7fffffffu) throw std::invalid_argument("tree_hash_cuda_many: over 2^31 chunks in one batch");
  Carver carve{static_cast<uint8_t*>(workspace)};
  Item* d_items = carve.take<Item>(count);
  auto* d_leaves = carve.take<uint64_t>(chunks + (stage_bytes + 7) / 8);
  uint8_t* d_stage = reinterpret_cast<uint8_t*>(d_leaves + chunks);
  check_cuda(cudaMemcpyAsync(d_items, items.data(), count * sizeof(Item), cudaMemcpyHostToDevice, stream),
             "tree_hash_cuda_many: copy");
  const auto n = static_cast<uint32_t>(count);
  if (chunks) {
    PULSE_LAUNCH(static_cast<unsigned>(chunks), kLeafThreads, stream, leaf_kernel)
    (d_items, n, device_params(), d_leaves);
    check_cuda(cudaGetLastError(), "tree_hash_cuda_many: leaf_kernel");
  }
  if (stage_bytes) {
    PULSE_LAUNCH(n, 256, stream, stage_kernel)(d_items, d_stage);
    check_cuda(cudaGetLastError(), "tree_hash_cuda_many: stage_kernel");
  }
  std::vector<uint64_t> back(chunks + (stage_bytes + 7) / 8);
  if (!back.empty())
    check_cuda(
        cudaMemcpyAsync(back.data(), d_leaves, 8 * chunks + stage_bytes, cudaMemcpyDeviceToHost, stream),
        "tree_hash_cuda_many: copy");
  check_cuda(cudaStreamSynchronize(stream), "tree_hash_cuda_many: synchronize");
  const auto* staged = reinterpret_cast<const uint8_t*>(back.data() + chunks);
  for (size_t i = 0; i < count; ++i) {
    const Item& it = items[i];
    if (it.stage_bytes)
      back[it.first_chunk + it.chunks - 1] = XXH3_64bits(staged + it.stage_at, it.stage_bytes);
    hashes[i] = tree_hash_combine(back.data() + it.first_chunk, it.chunks);
  }
}

}  // namespace pulse::kernels::cuda
