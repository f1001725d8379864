// kernels/xxh3_cuda.h: XXH3-64 of device memory. CPU reference: libxxhash XXH3_64bits.
#include <xxhash.h>

#include <algorithm>
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

/// What the 1024-byte `block` adds to accumulator `lane` over its 16 stripes (XXH3_accumulate_512:
/// acc[i ^ 1] += data[i]; acc[i] += lo32(data[i] ^ key[i]) * hi32(data[i] ^ key[i])).
__device__ __forceinline__ uint64_t block_contrib(const uint8_t* block, int lane, bool aligned,
                                                  const Secret& secret) {
  uint64_t c = 0;
#pragma unroll
  for (int s = 0; s < 16; ++s) {
    const uint64_t d = load64(block + 64 * s + 8 * lane, aligned);
    const uint64_t swapped = load64(block + 64 * s + 8 * (lane ^ 1), aligned);
    const uint64_t dk = d ^ secret.w[s + lane];
    c += (dk & 0xffffffffu) * (dk >> 32) + swapped;
  }
  return c;
}

/// contrib[8 b + i] = what block b adds to accumulator i.
__global__ void __launch_bounds__(256)
    contrib_kernel(const uint8_t* data, uint64_t blocks, bool aligned, Secret secret, uint64_t* contrib) {
  const uint64_t gid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t b = gid >> 3;
  if (b >= blocks) return;
  contrib[gid] = block_contrib(data + b * 1024, static_cast<int>(gid & 7), aligned, secret);
}

/// The sequential part of one lane: acc = scramble(acc + contrib[8 b + lane]) for every block b, from
/// `acc` (the lane's initial accumulator); returns the last.
__device__ __forceinline__ uint64_t chain(const uint64_t* contrib, uint64_t blocks, int lane, uint64_t acc,
                                          uint64_t key) {
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
  return acc;
}

/// One input's chain on threads 0..7.
__global__ void chain_kernel(const uint64_t* contrib, uint64_t blocks, Secret secret, Init init,
                             uint64_t* acc_out) {
  const int lane = threadIdx.x;
  if (lane >= 8) return;
  acc_out[lane] = chain(contrib, blocks, lane, init.acc[lane], secret.w[16 + lane]);
}

/// One input of a batch (xxh3_64_cuda_many): its blocks' contributions start at contrib + 8 first_block;
/// its `copy_bytes` last bytes (from data + copy_from) go to the staging area at `stage_at`.
struct Item {
  const uint8_t* data;
  uint64_t first_block;  ///< prefix sum of the batch's block counts (ascending)
  uint64_t blocks;
  uint64_t copy_from;
  uint64_t stage_at;
  uint32_t copy_bytes;
  uint32_t aligned;
};

/// The item that holds global block b < total blocks: the last one whose first_block <= b (an item
/// without blocks shares its first_block with the next, so the last of such a run is the one with
/// blocks).
__device__ __forceinline__ uint32_t item_of(const Item* items, uint32_t count, uint64_t b) {
  uint32_t lo = 0, hi = count;  // invariant: items[lo].first_block <= b < items[hi].first_block
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (items[mid].first_block <= b)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/// contrib[8 b + i] for every block b of every input of the batch (b global: first_block + local).
__global__ void __launch_bounds__(256)
    contrib_many_kernel(const Item* items, uint32_t count, uint64_t total_blocks, Secret secret,
                        uint64_t* contrib) {
  const uint64_t gid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t b = gid >> 3;
  if (b >= total_blocks) return;
  const Item& it = items[item_of(items, count, b)];
  contrib[gid] = block_contrib(it.data + (b - it.first_block) * 1024, static_cast<int>(gid & 7),
                               it.aligned != 0, secret);
}

/// Every input's chain side by side: thread 8 k + lane runs input k's lane.
__global__ void __launch_bounds__(256)
    chain_many_kernel(const Item* items, uint32_t count, const uint64_t* contrib, Secret secret, Init init,
                      uint64_t* acc_out) {
  const uint64_t gid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t k = gid >> 3;
  const int lane = static_cast<int>(gid & 7);
  if (k >= count) return;
  const Item& it = items[k];
  acc_out[gid] = chain(contrib + 8 * it.first_block, it.blocks, lane, init.acc[lane], secret.w[16 + lane]);
}

/// Copies every input's last bytes into the staging area (one CUDA block per input).
__global__ void gather_many_kernel(const Item* items, uint8_t* stage) {
  const Item& it = items[blockIdx.x];
  for (uint32_t i = threadIdx.x; i < it.copy_bytes; i += blockDim.x)
    stage[it.stage_at + i] = it.data[it.copy_from + i];
}

/// XXH3's default secret, as the kernels take it (by value).
Secret device_secret() {
  Secret secret;
  std::memcpy(secret.w, xxh3_default_secret(), sizeof secret.w);
  return secret;
}

/// XXH3's initial accumulators (XXH3_INIT_ACC), as the kernels take them.
Init device_init() {
  Xxh3LongState state;
  xxh3_long_init(state);
  Init init;
  std::memcpy(init.acc, state.acc, sizeof init.acc);
  return init;
}

/// Where a batch's parts lie in its workspace; with base == nullptr only `used` (its size) is meaningful.
struct ManyLayout {
  uint64_t* contrib = nullptr;
  Item* items = nullptr;
  uint64_t* acc = nullptr;  ///< 8 per input, then the staged bytes (one device-to-host copy)
  uint8_t* stage = nullptr;
  uint64_t total_blocks = 0;
  uint64_t stage_bytes = 0;
  size_t used = 0;
};

uint64_t blocks_of(uint64_t len) {
  return len >= kXxh3LongMinBytes ? xxh3_long_block_bytes(len) / kXxh3BlockBytes : 0;
}

/// The bytes of input `len` the host needs: the whole of a short one, else its tail.
uint64_t staged_bytes(uint64_t len) {
  return len >= kXxh3LongMinBytes ? len - xxh3_long_tail_offset(len) : len;
}

/// Workspace bytes of a batch of `count` inputs with these totals (Carver's 256-byte rounding).
size_t many_bytes(uint64_t total_blocks, size_t count, uint64_t stage_bytes) {
  const auto round = [](uint64_t b) { return static_cast<size_t>((b + 255) / 256 * 256); };
  return round(total_blocks * 64) + round(count * sizeof(Item)) + round(64 * count) + round(stage_bytes);
}

ManyLayout many_layout(const uint64_t* lens, size_t count, uint8_t* base) {
  ManyLayout l;
  for (size_t i = 0; i < count; ++i) {
    l.total_blocks += blocks_of(lens[i]);
    l.stage_bytes += staged_bytes(lens[i]);
  }
  Carver c{base};
  l.contrib = c.take<uint64_t>(l.total_blocks * 8);
  l.items = c.take<Item>(count);
  // acc and stage back to back, so that one copy brings both.
  l.acc = c.take<uint64_t>(8 * count);
  l.stage = base ? reinterpret_cast<uint8_t*>(l.acc + 8 * count) : nullptr;
  c.used += (l.stage_bytes + 255) / 256 * 256;
  l.used = c.used;
  return l;
}

/// The items of one batch (device pointers as given), in input order.
std::vector<Item> plan_items(const void* const* data, const uint64_t* lens, size_t count) {
  std::vector<Item> items(count);
  uint64_t first = 0, at = 0;
  for (size_t i = 0; i < count; ++i) {
    Item& it = items[i];
    it.data = static_cast<const uint8_t*>(data[i]);
    it.first_block = first;
    it.blocks = blocks_of(lens[i]);
    it.copy_bytes = static_cast<uint32_t>(staged_bytes(lens[i]));
    it.copy_from = lens[i] - it.copy_bytes;
    it.stage_at = at;
    it.aligned = (reinterpret_cast<uintptr_t>(it.data) & 7u) == 0;
    first += it.blocks;
    at += it.copy_bytes;
  }
  return items;
}

/// The host's part of a batch: each hash from its accumulators (8 per input) and its staged bytes.
void finish_items(const std::vector<Item>& items, const uint64_t* lens, const uint64_t* acc,
                  const uint8_t* staged, uint64_t* hashes) {
  Xxh3LongState state;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (lens[i] < kXxh3LongMinBytes) {
      hashes[i] = XXH3_64bits(lens[i] ? staged + it.stage_at : nullptr, lens[i]);
      continue;
    }
    std::memcpy(state.acc, acc + 8 * i, sizeof state.acc);
    hashes[i] = xxh3_long_finish_tail(state, staged + it.stage_at, it.copy_from, lens[i]);
  }
}

/// One batch of xxh3_64_cuda_many (its workspace fits, checked by the caller).
void hash_batch(const void* const* data, const uint64_t* lens, size_t count, uint8_t* workspace,
                cudaStream_t stream, uint64_t* hashes) {
  const ManyLayout l = many_layout(lens, count, workspace);
  const std::vector<Item> items = plan_items(data, lens, count);
  const Secret secret = device_secret();
  const Init init = device_init();
  check_cuda(cudaMemcpyAsync(l.items, items.data(), count * sizeof(Item), cudaMemcpyHostToDevice, stream),
             "xxh3_64_cuda_many: copy");
  const auto n = static_cast<uint32_t>(count);
  if (l.total_blocks) {
    const uint64_t threads = l.total_blocks * 8;
    PULSE_LAUNCH(static_cast<unsigned>((threads + 255) / 256), 256, stream, contrib_many_kernel)
    (l.items, n, l.total_blocks, secret, l.contrib);
    check_cuda(cudaGetLastError(), "xxh3_64_cuda_many: contrib_many_kernel");
  }
  PULSE_LAUNCH(static_cast<unsigned>((8 * count + 255) / 256), 256, stream, chain_many_kernel)
  (l.items, n, l.contrib, secret, init, l.acc);
  check_cuda(cudaGetLastError(), "xxh3_64_cuda_many: chain_many_kernel");
  if (l.stage_bytes) {
    PULSE_LAUNCH(n, 256, stream, gather_many_kernel)(l.items, l.stage);
    check_cuda(cudaGetLastError(), "xxh3_64_cuda_many: gather_many_kernel");
  }
  std::vector<uint64_t> back(8 * count + (l.stage_bytes + 7) / 8);
  check_cuda(cudaMemcpyAsync(back.data(), l.acc, 64 * count + l.stage_bytes, cudaMemcpyDeviceToHost, stream),
             "xxh3_64_cuda_many: copy");
  check_cuda(cudaStreamSynchronize(stream), "xxh3_64_cuda_many: synchronize");
  finish_items(items, lens, back.data(), reinterpret_cast<const uint8_t*>(back.data() + 8 * count), hashes);
}

}  // namespace

size_t xxh3_cuda_many_workspace_bytes(const uint64_t* lens, size_t count) {
  const ManyLayout l = many_layout(lens, count, nullptr);
  return many_bytes(l.total_blocks, count, l.stage_bytes);
}

size_t xxh3_cuda_many_workspace_capped(const uint64_t* lens, size_t count, size_t cap) {
  const size_t all = xxh3_cuda_many_workspace_bytes(lens, count);
  if (all <= cap) return all;
  size_t largest = 0;
  for (size_t i = 0; i < count; ++i) largest = std::max(largest, xxh3_cuda_many_workspace_bytes(lens + i, 1));
  return std::max(cap, largest);
}

namespace {

/// Throws std::invalid_argument for a null pointer with lens[i] > 0.
void check_pointers(const void* const* data, const uint64_t* lens, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (lens[i] && !data[i])
      throw std::invalid_argument("xxh3_64_cuda_many: input " + std::to_string(i) +
                                  " is a null device pointer");
}

}  // namespace

std::vector<size_t> xxh3_cuda_many_batch_ends(const uint64_t* lens, size_t count, size_t workspace_bytes) {
  for (size_t i = 0; i < count; ++i)
    if (xxh3_cuda_many_workspace_bytes(lens + i, 1) > workspace_bytes)
      throw std::invalid_argument("xxh3_cuda_many_batch_ends: input " + std::to_string(i) + " (" +
                                  std::to_string(lens[i]) + " bytes) needs " +
                                  std::to_string(xxh3_cuda_many_workspace_bytes(lens + i, 1)) +
                                  " workspace bytes, the workspace holds " + std::to_string(workspace_bytes));
  // Greedy batches of consecutive inputs that fit the workspace; the count fits a launch's grid.
  constexpr size_t kMaxBatch = size_t{1} << 24;
  std::vector<size_t> ends;
  for (size_t i = 0; i < count;) {
    uint64_t blocks = blocks_of(lens[i]), stage = staged_bytes(lens[i]);
    size_t j = i + 1;
    for (; j < count && j - i < kMaxBatch; ++j) {
      const uint64_t b = blocks + blocks_of(lens[j]), st = stage + staged_bytes(lens[j]);
      if (many_bytes(b, j + 1 - i, st) > workspace_bytes) break;
      blocks = b, stage = st;
    }
    ends.push_back(j);
    i = j;
  }
  return ends;
}

void xxh3_64_cuda_many(const void* const* data, const uint64_t* lens, size_t count, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream, uint64_t* hashes) {
  check_pointers(data, lens, count);
  const std::vector<size_t> ends = xxh3_cuda_many_batch_ends(lens, count, workspace_bytes);
  if (count && !workspace) throw std::invalid_argument("xxh3_64_cuda_many: null workspace");
  size_t i = 0;
  for (size_t end : ends) {
    hash_batch(data + i, lens + i, end - i, static_cast<uint8_t*>(workspace), stream, hashes + i);
    i = end;
  }
}

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
  const Secret secret = device_secret();
  const Init init = device_init();
  Xxh3LongState state;  // its acc is overwritten with the device's before the finish
  const bool aligned = (reinterpret_cast<uintptr_t>(bytes) & 7u) == 0;
  if (blocks) {
    const uint64_t threads = blocks * 8;
    PULSE_LAUNCH(static_cast<unsigned>((threads + 255) / 256), 256, stream, contrib_kernel)
    (bytes, blocks, aligned, secret, contrib);
    check_cuda(cudaGetLastError(), "xxh3_64_cuda: contrib_kernel");
  }
  PULSE_LAUNCH(1, 32, stream, chain_kernel)(contrib, blocks, secret, init, acc);
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
