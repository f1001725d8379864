// Decoder: validate everything (header and chunk checksums, stream sizes, every index, names/dtypes/
// shapes), then apply tensor by tensor with an undo log, hashing each 64 KiB block right before (the base
// root check, without a trusted root) and right after (every target hash) its changes are written, while
// it is in cache; roll everything back on a wrong base, a no-op or any failure.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "kernels/apply_kernels.h"
#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/patch.h"
#include "sync/patch_apply_checks.h"
#include "sync/patch_container.h"
#include "sync/scratch_buffer.h"
#include "sync/value_coding.h"

namespace pulse::sync {

namespace {

constexpr uint64_t kApplyBlockBytes = 64 << 10;

/// Old contents of what apply overwrote: the old values of the stored positions in order (sparse) or
/// the whole old tensor (dense).
struct Undo {
  ScratchBuffer old;  // pooled, not zero-filled: apply writes every byte before anything reads it
  bool applied = false;
};

/// Asks for every cache line of [p, p + n) at once. The changes of a block land on scattered lines
/// whose loads would otherwise each wait for memory in turn; the hash reads the whole block next anyway.
inline void prefetch_block(const uint8_t* p, size_t n) {
  for (size_t off = 0; off < n; off += 64) __builtin_prefetch(p + off, 1, 3);
}

/// The hashes of one tensor's apply pass, block by block while each block is in cache: `after` of the new
/// bytes right after a block's changes are written, `base` (when asked for: an apply without a trusted
/// root) of the old bytes right before (its last bytes copied up front, since they change before the end).
/// Without the base hash, a sparse tensor (`read_ahead`: fewer changes than cache lines) is still read in
/// order right before its changes (one load per cache line): the hardware prefetcher follows that stream
/// and the scattered writes then hit the cache. Measured, forced AVX2, 1 thread, trusted root: 1% changed
/// 0.6x memcpy without this read, 0.9-1.1x with it (as the base hash gives the untrusted apply); 7%
/// (nearly every line written) 0.78-0.82x without, 0.65-0.68x with it, so dense tensors skip it.
struct ApplyHashes {
  ApplyHashes(const MutableTensorView& w, HashScheme scheme, bool hash_base, bool read_ahead)
      : after(w.nbytes, scheme), base(w.nbytes, scheme), hash_base(hash_base), read_ahead(read_ahead) {
    if (hash_base) base.save_tail(w.data);
  }
  /// Before block [.., end) is written.
  void before(const uint8_t* data, uint64_t end) { read_old(data, end); }
  /// After block [.., end) was written, and before [end, next) is.
  void done(const uint8_t* data, uint64_t end, uint64_t next) {
    after.add(data, end);
    read_old(data, next);
  }
  TensorHashBlocks after, base;
  bool hash_base, read_ahead;

 private:
  void read_old(const uint8_t* data, uint64_t end) {
    if (hash_base) {
      base.add(data, end);
    } else if (read_ahead) {
      for (; read_ < end; read_ += 64) (void)*static_cast<const volatile uint8_t*>(data + read_);
    }
  }
  uint64_t read_ = 0;  // bytes read ahead so far (without the base hash)
};

/// Applies one tensor's streams to `w`, saving the old values into undo; returns its new tensor hash
/// (`scheme`: the patch's version's), hashed 64 KiB block by block right after the block's changes are
/// written (while it is in cache). With `base_hash`, also returns the hash of the tensor before apply there,
/// hashed block by block right before the block's changes are written (FORMAT.md, "Apply": the base hashes
/// come out of the same pass).
template <typename U>
uint64_t apply_tensor(MutableTensorView& w, const PatchTensorInfo& t, const uint8_t* streams, bool delta,
                      HashScheme scheme, Undo& undo, uint64_t* base_hash) {
  constexpr size_t kw = sizeof(U);
  const uint64_t n = w.nbytes / kw;
  const uint64_t stored = t.index_coding == kIndexDense ? n : t.changed;
  const ValueStreamReader<U> values(streams + t.index_bytes, stored, delta);
  const uint64_t block_elems = kApplyBlockBytes / kw;
  ApplyHashes hash(w, scheme, base_hash != nullptr,
                   t.index_coding != kIndexDense && t.changed * 64 < w.nbytes);
  const auto finish = [&]() {
    undo.applied = true;
    if (base_hash) *base_hash = hash.base.finish_saved();
    return hash.after.finish(w.data);
  };
  if (t.index_coding == kIndexDense) {
    undo.old.reserve(w.nbytes);
    undo.old.set_size(w.nbytes);
    for (uint64_t start = 0; start < n; start += block_elems) {
      const uint64_t end = std::min(n, start + block_elems);
      hash.before(w.data, end * kw);
      std::memcpy(undo.old.data() + start * kw, w.data + start * kw, (end - start) * kw);
      for (uint64_t i = start; i < end; ++i) {
        uint8_t* p = w.data + i * kw;
        store_le<U>(p, values.apply(i, load_le<U>(p)));
      }
      hash.done(w.data, end * kw, end * kw);
    }
    return finish();
  }
  undo.old.reserve(stored * kw);
  undo.old.set_size(stored * kw);
  uint8_t* old_values = undo.old.data();
  if constexpr (kw == 2) {
    if (t.index_coding == kIndexVarintGaps) {  // BF16/F16 at RL densities: the batched SIMD kernel
      // The kernel hands over each block after its changes and before any change of a later block, so
      // the next block's old bytes are hashed there, right before they are written (and block 0's here).
      struct Sink {
        ApplyHashes* hash;
        const uint8_t* w;
        uint64_t nbytes;
      } sink_ctx{&hash, w.data, w.nbytes};
      const kernels::BlockSink sink{[](void* ctx, const uint8_t* data, uint64_t bytes) {
                                      auto* c = static_cast<Sink*>(ctx);
                                      const uint64_t end = static_cast<uint64_t>(data - c->w) + bytes;
                                      c->hash->done(c->w, end, std::min(c->nbytes, end + kApplyBlockBytes));
                                    },
                                    &sink_ctx};
      hash.before(w.data, std::min(w.nbytes, kApplyBlockBytes));
      kernels::apply_varint_u16(w.data, n, streams, t.index_bytes, t.changed, delta, old_values, sink);
      return finish();
    }
  }
  if (t.index_coding == kIndexVarintGaps) {
    // Inline varint decoding (the stream was validated): the head byte, and without a branch the first
    // tail byte (a gap >= 128 at ~1/4 of the changes at 1% density would mispredict); longer tails are
    // rare. Reading one byte past the tail is safe: the value stream (>= 1 byte) follows it.
    const uint8_t* head = streams;
    const uint8_t* tail = streams + t.changed;
    uint64_t j = 0, next = 0;
    auto decode = [&]() -> uint64_t {
      const uint8_t h = head[j];
      const uint8_t b = *tail;
      const uint64_t more = h >> 7;
      uint64_t gap = (h & 127) | ((static_cast<uint64_t>(b & 127) << 7) & (0 - more));
      tail += more;
      if (more & (b >> 7)) gap = read_gap_tail(tail, gap, 14);  // a third LEB128 byte or more
      const uint64_t pos = next + gap;
      next = pos + 1;
      return pos;
    };
    uint64_t pos = t.changed ? decode() : n;
    prefetch_block(w.data, std::min(n, block_elems) * kw);
    for (uint64_t start = 0; start < n; start += block_elems) {
      const uint64_t end = std::min(n, start + block_elems);
      if (end < n) prefetch_block(w.data + end * kw, (std::min(n, end + block_elems) - end) * kw);
      hash.before(w.data, end * kw);
      while (pos < end) {
        uint8_t* p = w.data + pos * kw;
        const U old = load_le<U>(p);
        store_le<U>(old_values + j * kw, old);
        store_le<U>(p, values.apply(j, old));
        pos = ++j < t.changed ? decode() : n;
      }
      hash.done(w.data, end * kw, end * kw);
    }
  } else {
    PositionIter it(t.index_coding, streams, t.index_bytes, t.changed, n);
    uint64_t pos = it.next(), j = 0;
    for (uint64_t start = 0; start < n; start += block_elems) {
      const uint64_t end = std::min(n, start + block_elems);
      hash.before(w.data, end * kw);
      for (; pos < end; pos = it.next(), ++j) {
        uint8_t* p = w.data + pos * kw;
        const U old = load_le<U>(p);
        store_le<U>(old_values + j * kw, old);
        store_le<U>(p, values.apply(j, old));
      }
      hash.done(w.data, end * kw, end * kw);
    }
  }
  return finish();
}

template <typename U>
void rollback_tensor(MutableTensorView& w, const PatchTensorInfo& t, const uint8_t* streams, Undo& undo) {
  if (!undo.applied) return;
  if (t.index_coding == kIndexDense) {
    if (undo.old.size()) std::memcpy(w.data, undo.old.data(), undo.old.size());
  } else {
    PositionIter it(t.index_coding, streams, t.index_bytes, t.changed, w.nbytes / sizeof(U));
    uint64_t j = 0;
    for (uint64_t pos; (pos = it.next()) != UINT64_MAX; ++j)
      std::copy_n(undo.old.data() + j * sizeof(U), sizeof(U), w.data + pos * sizeof(U));
  }
  undo.applied = false;
}

/// "[4096, 11008]".

}  // namespace

PatchInfo inspect_patch(const uint8_t* data, size_t size) {
  return parse_container(data, size, false).info;
}

bool apply_patch(std::vector<MutableTensorView>& weights, const uint8_t* data, size_t size, int threads) {
  ApplyOptions options;
  options.threads = threads;
  return apply_patch(weights, data, size, options);
}

bool apply_patch(std::vector<MutableTensorView>& weights, const uint8_t* data, size_t size,
                 const ApplyOptions& options) {
  const int threads = options.threads;
  const Container c = parse_container(data, size, true);
  const PatchInfo& info = c.info;
  const bool delta = info.values == ValueMode::Delta;
  const HashScheme scheme = hash_scheme_of_format(info.format_version);

  // Sizes, then names, dtypes, shapes: the weights must be exactly the patch's tensor set.
  for (const auto& w : weights) {
    const uint64_t expect = static_cast<uint64_t>(numel(w.shape)) * dtype_size(w.dtype);
    if (expect != w.nbytes)
      throw PatchError("weights tensor '" + w.name + "' holds " + std::to_string(w.nbytes) +
                       " bytes, shape x dtype needs " + std::to_string(expect));
  }
  std::vector<TensorView> views;
  for (const auto& w : weights) views.push_back(w.view());
  const std::vector<size_t> target_of = match_patch_tensors(info, views);

  // Payload: chunk checksums, decompression, every index stream.
  const ScratchBuffer payload = read_payload(c, data, size, threads);
  parallel_for(info.tensors.size(), threads, [&](size_t k) {
    const auto& t = info.tensors[k];
    validate_index_stream(t.name, t.index_coding, payload.data() + t.raw_offset, t.index_bytes, t.changed,
                          static_cast<uint64_t>(numel(t.shape)), t.raw_offset);
  });

  // Where are the weights now? With a trusted root the caller vouches for it: only the tensors the patch
  // leaves alone are hashed (their hash is their target hash), and the root checks decide before apply.
  // Without one the weights' tensor hashes come out of the apply pass itself (each 64 KiB block hashed
  // right before its changes are written, the untouched tensors beside), so the weights are read once;
  // the same checks then decide after it: the target already (no-op) or a wrong base rolls the pass
  // back. Every other tensor's target hash is verified after apply either way.
  const bool trusted = options.trusted_root.has_value();
  std::vector<uint64_t> current(weights.size(), 0);
  const auto untouched = [&](size_t k) {
    return info.tensors[k].changed == 0 && info.tensors[k].index_coding != kIndexDense;
  };
  if (trusted) {
    std::vector<size_t> by_size;
    for (size_t k = 0; k < info.tensors.size(); ++k)
      if (untouched(k)) by_size.push_back(target_of[k]);
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](size_t a, size_t b) { return weights[a].nbytes > weights[b].nbytes; });
    parallel_for(by_size.size(), threads,
                 [&](size_t o) { current[by_size[o]] = tensor_hash(weights[by_size[o]].view(), scheme); });
    if (check_patch_roots(info, target_of, views, current, options.trusted_root)) return false;
  } else {
    check_target_root_table(info, target_of, views);  // before the weights are touched
  }

  // Apply (biggest first), verify each target hash, roll back everything on any failure.
  std::vector<size_t> order(info.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return weights[target_of[a]].nbytes > weights[target_of[b]].nbytes;
  });
  std::vector<Undo> undo(info.tensors.size());
  std::vector<uint64_t> after(info.tensors.size(), 0);
  auto dispatch = [&](size_t k, bool rollback) {
    const auto& t = info.tensors[k];
    auto& w = weights[target_of[k]];
    if (untouched(k)) {
      if (!rollback && !trusted) current[target_of[k]] = tensor_hash(w.view(), scheme);
      after[k] = current[target_of[k]];
      return;
    }
    const uint8_t* s = payload.data() + t.raw_offset;
    uint64_t* base = trusted ? nullptr : &current[target_of[k]];
    switch (dtype_size(t.dtype)) {
      case 1:
        rollback ? rollback_tensor<uint8_t>(w, t, s, undo[k])
                 : void(after[k] = apply_tensor<uint8_t>(w, t, s, delta, scheme, undo[k], base));
        break;
      case 2:
        rollback ? rollback_tensor<uint16_t>(w, t, s, undo[k])
                 : void(after[k] = apply_tensor<uint16_t>(w, t, s, delta, scheme, undo[k], base));
        break;
      case 4:
        rollback ? rollback_tensor<uint32_t>(w, t, s, undo[k])
                 : void(after[k] = apply_tensor<uint32_t>(w, t, s, delta, scheme, undo[k], base));
        break;
      default:
        rollback ? rollback_tensor<uint64_t>(w, t, s, undo[k])
                 : void(after[k] = apply_tensor<uint64_t>(w, t, s, delta, scheme, undo[k], base));
        break;
    }
  };
  const auto roll_back = [&]() {
    parallel_for(order.size(), threads, [&](size_t o) { dispatch(order[o], true); });
  };
  std::string failure;
  try {
    parallel_for(order.size(), threads, [&](size_t o) { dispatch(order[o], false); });
  } catch (const std::exception& e) {
    failure = std::string("patch apply failed (") + patch_versions(info) + "): " + e.what() +
              "; weights rolled back";
  }
  if (failure.empty() && !trusted) {
    // The root checks on the hashes the pass took of the weights before it: as before an apply.
    bool noop = false;
    try {
      noop = check_patch_roots(info, target_of, views, current, std::nullopt);
    } catch (...) {
      roll_back();
      throw;
    }
    if (noop) {
      roll_back();
      return false;
    }
  }
  for (size_t k = 0; k < info.tensors.size() && failure.empty(); ++k)
    if (after[k] != info.tensors[k].target_hash)
      failure = "patch tensor '" + info.tensors[k].name + "': hash after apply " + hash_hex(after[k]) +
                " differs from the target hash " + hash_hex(info.tensors[k].target_hash) + " (" +
                patch_versions(info) + "); weights rolled back";
  if (!failure.empty()) {
    roll_back();
    throw PatchError(failure);
  }
  return true;
}

}  // namespace pulse::sync
