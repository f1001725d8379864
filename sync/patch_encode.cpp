// Encoder: diff scan (SIMD, fused with the emission of the streams and the tree hashes' chunks: one pass
// over memory), per-tensor index coding choice, byte-plane value streams, then the chunked container
// (sync/patch_container.cpp), compressed straight from the stream buffers.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>

#include "kernels/diff_emit16.h"
#include "kernels/diff_scan.h"
#include "kernels/tree_hash.h"
#include "kernels/xxh3_long.h"
#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/patch.h"
#include "sync/patch_container.h"
#include "sync/scratch_buffer.h"
#include "sync/value_coding.h"

namespace pulse::sync {

// The scan kernels (kernels/).
using kernels::diff_emit16;
using kernels::diff_emit16_fuses_hash;
using kernels::diff_masks;
using kernels::emit16_room;
using kernels::emit16_tail_room;
using kernels::Emit16Cursor;
using kernels::Emit16Hash;
using kernels::kDiffGroup;
using kernels::kXxh3LongMinBytes;
using kernels::xxh3_default_secret;
using kernels::xxh3_long_block_bytes;
using kernels::xxh3_long_finish;
using kernels::xxh3_long_init;
using kernels::Xxh3LongState;

namespace {

// Tensor bytes per group (FORMAT.md, format version 2): a group's streams are compressed by the task that
// scanned it, into chunks of their own.
constexpr uint64_t kGroupTensorBytes = 4u << 20;

// Queued frame compressions (bytes of stream) above which a thread compresses instead of starting the next
// scan: bounds how far the streams drift out of cache (L3) before they are compressed.
constexpr uint64_t kCompressBacklogBytes = 16u << 20;

// Elements the scan compares and hashes per step: 64 KiB of each side stays in L2 while it is hashed.
constexpr size_t kScanBlockBytes = 64 << 10;

/// One tensor's streams before they are laid into the payload (FORMAT.md): the index stream is `head`
/// then `tail` (varint gaps) or `head` alone (bitmap; empty for dense); the value stream is the w byte
/// planes `planes[0..w)` (zigzag already applied in delta mode). Buffers come from the scratch pool.
struct EncodedTensor {
  PatchTensorInfo info;
  ScratchBuffer head, tail;
  std::vector<ScratchBuffer> planes;
  uint64_t base_hash = 0;
};

/// Room for `extra` more bytes in `buf` after `done` of the tensor's `n` elements were scanned. Growing
/// copies what is there, so a buffer that must grow is sized for the whole tensor at the density seen so
/// far (+1/8) plus `extra`: it grows about once.
void grow_for(ScratchBuffer& buf, uint64_t extra, uint64_t n, uint64_t done) {
  if (buf.size() + extra <= buf.capacity()) return;
  const double projected =
      done ? 1.125 * static_cast<double>(buf.size()) * static_cast<double>(n) / static_cast<double>(done)
           : 0.0;
  buf.reserve(std::max<uint64_t>(buf.size() + extra, static_cast<uint64_t>(projected) + extra));
}

/// Room for `changes` more changes (plus the kernels' vector slack) and `tail_bytes` more tail bytes.
void reserve_block(EncodedTensor& out, uint64_t changes, uint64_t tail_bytes, uint64_t n, uint64_t done) {
  grow_for(out.head, emit16_room(changes), n, done);
  grow_for(out.tail, tail_bytes, n, done);
  for (auto& p : out.planes) grow_for(p, emit16_room(changes), n, done);
}

/// Scans base vs target (n elements of type U) block by block: the SIMD diff masks (kernels/diff_scan.h),
/// then, per changed element, its varint gap (head byte + tail bytes) and its stored value's bytes,
/// written straight into the streams; both sides are hashed while the block is in L2 (sets
/// out.info.target_hash and, with hash_base, out.base_hash: tree hashes, a block being one leaf chunk).
/// 2-byte elements go through the fused kernel of kernels/diff_emit16.h.
template <typename U>
void scan_tensor(const uint8_t* base, const uint8_t* target, uint64_t n, bool delta, EncodedTensor& out,
                 bool hash_base) {
  static_assert(kScanBlockBytes == kernels::kTreeHashChunkBytes, "a scan block is one tree hash leaf");
  constexpr size_t w = sizeof(U);
  TreeLeaves base_leaves, target_leaves;
  // The SIMD kernels for 2-byte elements (AVX-512, AVX2) accumulate each chunk's XXH3 blocks from the
  // registers they scan with (chunks of 241 bytes and more); the chunk's last block is finished from L2.
  const bool fuses = sizeof(U) == 2 && diff_emit16_fuses_hash();
  Xxh3LongState base_state, target_state;
  const uint64_t block_elems = kScanBlockBytes / w;  // a multiple of kDiffGroup
  std::vector<uint64_t> masks(sizeof(U) == 2 ? 0 : block_elems / kDiffGroup);
  uint64_t next = 0;    // position after the previous change (gap origin)
  uint64_t recent = 0;  // diff_emit16's density hint, carried from block to block (Emit16Cursor)
  for (uint64_t start = 0; start < n; start += block_elems) {
    const uint64_t cnt = std::min(block_elems, n - start);
    const uint8_t* a = base + start * w;
    const uint8_t* b = target + start * w;
    const uint64_t chunk_bytes = cnt * w;
    const bool fused = fuses && chunk_bytes >= kXxh3LongMinBytes;
    Emit16Hash fused_hash;
    if (fused) {
      xxh3_long_init(base_state);
      xxh3_long_init(target_state);
      // block_bytes counts from the tensor's start (a chunk starts at a multiple of 1024 bytes).
      fused_hash = {hash_base ? &base_state : nullptr, &target_state,
                    start * w + xxh3_long_block_bytes(chunk_bytes), xxh3_default_secret()};
    }
    if constexpr (sizeof(U) == 2) {
      reserve_block(out, cnt, emit16_tail_room(cnt), n, start);
      Emit16Cursor c{out.head.data() + out.head.size(),
                     out.tail.data() + out.tail.size(),
                     out.planes[0].data() + out.planes[0].size(),
                     out.planes[1].data() + out.planes[1].size(),
                     next,
                     recent};
      const uint64_t k = diff_emit16(a, b, start, cnt, delta, c, fused ? &fused_hash : nullptr);
      out.head.set_size(out.head.size() + k);
      out.tail.set_size(static_cast<size_t>(c.tail - out.tail.data()));
      out.planes[0].set_size(out.planes[0].size() + k);
      out.planes[1].set_size(out.planes[1].size() + k);
      next = c.next;
      recent = c.recent_changes;
    } else {
      const uint64_t changed = diff_masks(a, b, cnt, w, masks.data());
      if (changed) {
        // Within a block only the first gap can exceed the block (9 LEB128 bytes); every other gap >= 128
        // spans >= 128 elements of it and needs <= 2 tail bytes (blocks are < 2^21 elements).
        reserve_block(out, changed, 9 + 2 * (cnt / 128 + 1), n, start + cnt);
        uint8_t* h = out.head.data() + out.head.size();
        uint8_t* t = out.tail.data() + out.tail.size();
        uint8_t* v[w];
        for (size_t p = 0; p < w; ++p) v[p] = out.planes[p].data() + out.planes[p].size();
        const size_t groups = (cnt + kDiffGroup - 1) / kDiffGroup;
        for (size_t g = 0; g < groups; ++g) {
          for (uint64_t m = masks[g]; m; m &= m - 1) {
            const uint64_t off = g * kDiffGroup + static_cast<uint64_t>(__builtin_ctzll(m));
            const uint64_t pos = start + off;
            const uint64_t gap = pos - next;
            next = pos + 1;
            const U vb = load_le<U>(b + off * w);
            const U val = delta ? zigzag(static_cast<U>(vb - load_le<U>(a + off * w))) : vb;
            for (size_t p = 0; p < w; ++p) *v[p]++ = static_cast<uint8_t>(val >> (8 * p));
            *h++ = static_cast<uint8_t>((gap & 127) | (gap >= 128 ? 128 : 0));
            if (gap >= 128) t = write_gap_tail(t, gap >> 7);
          }
        }
        out.head.set_size(static_cast<size_t>(h - out.head.data()));
        out.tail.set_size(static_cast<size_t>(t - out.tail.data()));
        for (size_t p = 0; p < w; ++p)
          out.planes[p].set_size(static_cast<size_t>(v[p] - out.planes[p].data()));
      }
    }
    if (fused) {
      if (hash_base) base_leaves.add(xxh3_long_finish(base_state, a, chunk_bytes));
      target_leaves.add(xxh3_long_finish(target_state, b, chunk_bytes));
    } else {
      if (hash_base) base_leaves.add(kernels::xxh3_64bits(a, chunk_bytes));  // else the caller knows it
      target_leaves.add(kernels::xxh3_64bits(b, chunk_bytes));
    }
  }
  if (hash_base) out.base_hash = base_leaves.digest();
  out.info.target_hash = target_leaves.digest();
}

/// The bitmap index stream (FORMAT.md coding 1) of the changes held as varint gaps in e.head/e.tail.
ScratchBuffer bitmap_from_gaps(const EncodedTensor& e, uint64_t n) {
  ScratchBuffer tmp(e.head.size() + e.tail.size() + 1);
  if (e.head.size()) std::memcpy(tmp.data(), e.head.data(), e.head.size());
  if (e.tail.size()) std::memcpy(tmp.data() + e.head.size(), e.tail.data(), e.tail.size());
  ScratchBuffer bitmap(bitmap_bytes(n) + 1);
  std::memset(bitmap.data(), 0, bitmap_bytes(n));
  bitmap.set_size(bitmap_bytes(n));
  PositionIter it(kIndexVarintGaps, tmp.data(), e.head.size() + e.tail.size(), e.head.size(), n);
  for (uint64_t pos; (pos = it.next()) != UINT64_MAX;)
    bitmap.data()[pos >> 3] |= static_cast<uint8_t>(1u << (pos & 7));
  return bitmap;
}

/// Every element as stored in a dense value stream: absolute = the target itself, delta = zigzag(target -
/// base) (0 where unchanged), split into byte planes.
template <typename U>
void dense_planes(const TensorView& base, const TensorView& target, bool delta, EncodedTensor& out) {
  const uint64_t n = target.nbytes / sizeof(U);
  for (auto& p : out.planes) {
    p.reserve(n + 1);
    p.set_size(n);
  }
  uint8_t* v[sizeof(U)];
  for (size_t p = 0; p < sizeof(U); ++p) v[p] = out.planes[p].data();
  if (sizeof(U) == 1 && !delta) {
    if (n) std::memcpy(v[0], target.data, n);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    const U vb = load_le<U>(target.data + i * sizeof(U));
    const U val = delta ? zigzag(static_cast<U>(vb - load_le<U>(base.data + i * sizeof(U)))) : vb;
    for (size_t p = 0; p < sizeof(U); ++p) v[p][i] = static_cast<uint8_t>(val >> (8 * p));
  }
}

template <typename U>
void encode_tensor_typed(const TensorView& base, const TensorView& target, bool delta, bool anchor,
                         bool hash_base, int force_coding, EncodedTensor& out) {
  const uint64_t n = target.nbytes / sizeof(U);
  out.planes.resize(sizeof(U));
  if (!anchor) {
    const size_t guess = static_cast<size_t>(std::min<uint64_t>(n, n / 64 + 1024));  // ~1.5%; grows
    out.head.reserve(guess);
    out.tail.reserve(guess / 2);
    for (auto& p : out.planes) p.reserve(guess);
    scan_tensor<U>(base.data, target.data, n, delta, out, hash_base);
  } else {
    out.info.target_hash = tensor_hash(target);
  }

  const uint64_t k = anchor ? n : out.head.size();
  uint8_t coding = kIndexDense;
  if (!anchor) {
    coding = choose_index_coding(n, k, out.head.size() + out.tail.size(), delta, sizeof(U), force_coding);
  }
  out.info.changed = k;
  out.info.index_coding = coding;

  if (coding == kIndexBitmap) {
    ScratchBuffer bitmap = bitmap_from_gaps(out, n);
    out.tail.release();
    out.head = std::move(bitmap);
  } else if (coding == kIndexDense) {
    out.head.release();
    out.tail.release();
    dense_planes<U>(base, target, delta && !anchor, out);
  }
  out.info.index_bytes = out.head.size() + out.tail.size();
  out.info.value_bytes = value_stream_bytes(delta && !anchor, out.planes[0].size(), sizeof(U));
}

void check_view(const TensorView& t, const char* side) {
  const uint64_t expect = static_cast<uint64_t>(numel(t.shape)) * dtype_size(t.dtype);
  if (expect != t.nbytes)
    throw PatchError(std::string(side) + " tensor '" + t.name + "' holds " + std::to_string(t.nbytes) +
                     " bytes, shape x dtype needs " + std::to_string(expect));
  if (t.nbytes && !t.data) throw PatchError(std::string(side) + " tensor '" + t.name + "' has no data");
}

std::vector<uint8_t> encode(const std::vector<TensorView>* base, const std::vector<TensorView>& target,
                            const PatchOptions& options, bool anchor) {
  options.validate();
  // Pair tensors by name, sorted by name (the patch's tensor order).
  std::vector<const TensorView*> targets;
  for (const auto& t : target) {
    check_view(t, "target");
    targets.push_back(&t);
  }
  std::sort(targets.begin(), targets.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (size_t i = 1; i < targets.size(); ++i)
    if (targets[i]->name == targets[i - 1]->name)
      throw PatchError("target tensor '" + targets[i]->name + "' appears twice");
  std::vector<const TensorView*> bases(targets.size(), nullptr);
  // Claimed base hashes (PatchOptions), by base tensor address.
  std::map<const TensorView*, uint64_t> known_hash;
  if (!anchor && !options.known_base_root && options.known_base_tensor_hashes) {
    if (options.known_base_tensor_hashes->size() != base->size())
      throw PatchError("known_base_tensor_hashes holds " +
                       std::to_string(options.known_base_tensor_hashes->size()) + " hashes for " +
                       std::to_string(base->size()) + " base tensors");
    for (size_t i = 0; i < base->size(); ++i)
      known_hash[&(*base)[i]] = (*options.known_base_tensor_hashes)[i];
  }
  const bool hash_base = !anchor && !options.known_base_root && !options.known_base_tensor_hashes;
  if (!anchor) {
    std::map<std::string, const TensorView*> by_name;
    for (const auto& b : *base) {
      check_view(b, "base");
      if (!by_name.emplace(b.name, &b).second) throw PatchError("base tensor '" + b.name + "' appears twice");
    }
    if (by_name.size() != targets.size()) {
      for (const auto& [name, b] : by_name)
        if (!std::binary_search(targets.begin(), targets.end(), b,
                                [](auto* x, auto* y) { return x->name < y->name; }))
          throw PatchError("base tensor '" + name + "' is missing from the target");
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      auto it = by_name.find(targets[i]->name);
      if (it == by_name.end())
        throw PatchError("target tensor '" + targets[i]->name + "' is missing from the base");
      const TensorView& b = *it->second;
      if (b.dtype != targets[i]->dtype || b.shape != targets[i]->shape) {
        auto layout = [](const TensorView& t) {
          return std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape);
        };
        throw PatchError("tensor '" + b.name + "': base is " + layout(b) + ", target is " +
                         layout(*targets[i]) + " (a patch needs the same dtype and shape on both sides)");
      }
      bases[i] = &b;
    }
  }

  const bool delta = !anchor && options.values == ValueMode::Delta;
  // Tensors in payload order form groups of at least kGroupTensorBytes; one task per group scans its
  // tensors (biggest groups first), then each frame of the group's own chunks (format version 2: a chunk
  // ends at every group) is compressed as a follow-up task (sync/parallel.h parallel_two_stage): the
  // threads' memory-bound scans overlap with other threads' compute-bound compression, and the short
  // frame tasks even out the threads' ends (whole-group tasks gave one of 2 threads 23 of the 40 MB
  // of the synthetic 20 M-element workload's 5 groups).
  std::vector<size_t> group_start{0};
  for (size_t i = 0, bytes = 0; i < targets.size(); ++i) {
    bytes += targets[i]->nbytes;
    if (bytes >= kGroupTensorBytes && i + 1 < targets.size()) {
      group_start.push_back(i + 1);
      bytes = 0;
    }
  }
  group_start.push_back(targets.size());
  const size_t n_groups = group_start.size() - 1;
  std::vector<uint64_t> group_bytes(n_groups, 0);
  for (size_t g = 0; g < n_groups; ++g)
    for (size_t i = group_start[g]; i < group_start[g + 1]; ++i) group_bytes[g] += targets[i]->nbytes;
  std::vector<size_t> order(n_groups);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return group_bytes[a] > group_bytes[b]; });
  std::vector<EncodedTensor> encoded(targets.size());
  std::vector<std::vector<ChunkPlan>> group_plans(n_groups);
  parallel_two_stage(order.size(), options.threads, kCompressBacklogBytes, [&](size_t o, FollowUps& follow) {
    const size_t g = order[o];
    std::vector<PayloadSegment> segments;
    for (size_t i = group_start[g]; i < group_start[g + 1]; ++i) {
      const TensorView& t = *targets[i];
      EncodedTensor& e = encoded[i];
      e.info.name = t.name;
      e.info.dtype = t.dtype;
      e.info.shape = t.shape;
      const TensorView empty{};
      const TensorView& b = anchor ? empty : *bases[i];
      switch (dtype_size(t.dtype)) {
        case 1:
          encode_tensor_typed<uint8_t>(b, t, delta, anchor, hash_base, options.force_index_coding, e);
          break;
        case 2:
          encode_tensor_typed<uint16_t>(b, t, delta, anchor, hash_base, options.force_index_coding, e);
          break;
        case 4:
          encode_tensor_typed<uint32_t>(b, t, delta, anchor, hash_base, options.force_index_coding, e);
          break;
        default:
          encode_tensor_typed<uint64_t>(b, t, delta, anchor, hash_base, options.force_index_coding, e);
          break;
      }
      // The payload is the streams back to back (FORMAT.md), compressed straight from their buffers.
      for (const ScratchBuffer* sb : {&e.head, &e.tail})
        if (sb->size()) segments.push_back({sb->data(), sb->size()});
      for (const auto& p : e.planes)
        if (p.size()) segments.push_back({p.data(), p.size()});
    }
    // Every frame of the group's chunks is a follow-up of its own; the plans are complete (their
    // addresses fixed) before the first one is queued.
    std::vector<ChunkPlan>& plans = group_plans[g];
    for (const auto& chunk : cut_chunks(segments, options.chunk_bytes))
      plans.push_back(plan_chunk(chunk, options.zstd_level));
    for (ChunkPlan& plan : plans)
      for (size_t f = 0; f < plan.pieces.size(); ++f)
        follow.submit([&plan, f] { compress_planned_frame(plan, f); }, plan.pieces[f].size);
  });

  PatchInfo info;
  info.anchor = anchor;
  info.values = anchor ? ValueMode::Absolute : options.values;
  info.model_id = options.model_id;
  info.base_version = anchor ? 0 : options.base_version;
  info.target_version = options.target_version;
  std::vector<TensorView> sorted_targets;
  std::vector<uint64_t> target_hashes, base_hashes;
  uint64_t raw = 0;
  for (size_t i = 0; i < encoded.size(); ++i) {
    encoded[i].info.raw_offset = raw;
    raw += encoded[i].info.index_bytes + encoded[i].info.value_bytes;
    sorted_targets.push_back(*targets[i]);
    target_hashes.push_back(encoded[i].info.target_hash);
    base_hashes.push_back(known_hash.empty() ? encoded[i].base_hash : known_hash.at(bases[i]));
  }
  info.target_root_hash = root_hash(sorted_targets, target_hashes);
  // The base holds the same names/dtypes/shapes as the target.
  info.base_root_hash = anchor                    ? 0
                        : options.known_base_root ? *options.known_base_root
                                                  : root_hash(sorted_targets, base_hashes);
  for (auto& e : encoded) info.tensors.push_back(e.info);
  std::vector<CompressedChunk> chunks;
  for (auto& plans : group_plans)
    for (auto& plan : plans) chunks.push_back(finish_chunk(std::move(plan)));
  return assemble_container(info, chunks, options.zstd_level, options.chunk_bytes, options.threads);
}

}  // namespace

std::vector<uint8_t> encode_patch(const std::vector<TensorView>& base, const std::vector<TensorView>& target,
                                  const PatchOptions& options) {
  return encode(&base, target, options, false);
}

std::vector<uint8_t> encode_anchor(const std::vector<TensorView>& target, const PatchOptions& options) {
  return encode(nullptr, target, options, true);
}

}  // namespace pulse::sync
