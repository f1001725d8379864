// Encoder: diff scan (SIMD masks, fused with the xxh3 hashes: one pass over memory), per-tensor index
// coding choice, byte-plane value streams, then the chunked container (sync/patch_container.cpp).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>

#include "sync/diff_scan.h"
#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/patch.h"
#include "sync/patch_container.h"
#include "sync/value_coding.h"

namespace pulse::sync {

namespace {

// Elements the scan compares and hashes per step: 64 KiB of each side stays in L2 while it is hashed.
constexpr size_t kScanBlockBytes = 64 << 10;

/// A growable byte array that does not zero what it allocates: the scan writes every byte it keeps,
/// and at RL densities zero-filling the worst case would cost as much as the scan.
class ByteArray {
 public:
  /// Room for `extra` more bytes past size(); when it must grow, to at least `scale` x the new size.
  void reserve_more(size_t extra, double scale = 1.0) {
    if (size_ + extra > cap_)
      grow(size_ + extra, static_cast<size_t>(scale * static_cast<double>(size_ + extra)));
  }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  void set_size(size_t n) { size_ = n; }  // n <= capacity
  void clear() {
    data_.reset();
    size_ = cap_ = 0;
  }

 private:
  void grow(size_t need, size_t want) {
    const size_t cap = std::max({need, want, cap_ + cap_ / 2, size_t{256}});
    std::unique_ptr<uint8_t[]> d(new uint8_t[cap]);
    if (size_) std::memcpy(d.get(), data_.get(), size_);
    data_ = std::move(d);
    cap_ = cap;
  }
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0, cap_ = 0;
};

/// One tensor's streams before they are laid into the payload (FORMAT.md): the index stream is `head`
/// then `tail` (varint gaps) or `head` alone (bitmap; empty for dense); `values` holds the stored values
/// as little-endian w-byte integers (zigzag already applied in delta mode), byte-split on output.
struct EncodedTensor {
  PatchTensorInfo info;
  ByteArray head, tail, values;
  uint64_t base_hash = 0;
};

/// Appends the LEB128 bytes of `rest` (= gap >> 7, >= 1) to the tail at `t`; returns the new end.
inline uint8_t* put_tail(uint8_t* t, uint64_t rest) {
  while (rest >= 128) {
    *t++ = static_cast<uint8_t>((rest & 127) | 128);
    rest >>= 7;
  }
  *t++ = static_cast<uint8_t>(rest);
  return t;
}

/// Scans base vs target (n elements of type U) block by block: the SIMD diff masks (sync/diff_scan.h),
/// then, per changed element, its varint gap (head byte + tail bytes) and its stored value, written
/// straight into the output arrays; both sides are hashed while the block is in L2.
template <typename U>
void scan_tensor(const uint8_t* base, const uint8_t* target, uint64_t n, bool delta, EncodedTensor& out,
                 Xxh3Stream* base_hash, Xxh3Stream& target_hash) {
  constexpr size_t w = sizeof(U);
  const uint64_t block_elems = kScanBlockBytes / w;  // a multiple of kDiffGroup
  std::vector<uint64_t> masks(block_elems / kDiffGroup);
  uint64_t next = 0;  // position after the previous change (gap origin)
  for (uint64_t start = 0; start < n; start += block_elems) {
    const uint64_t cnt = std::min(block_elems, n - start);
    const uint8_t* a = base + start * w;
    const uint8_t* b = target + start * w;
    const uint64_t changed = diff_masks(a, b, cnt, w, masks.data());
    if (changed) {
      // Growing copies what is there: when the arrays must grow, size them for the whole tensor at the
      // density seen so far (+1/8), so that they grow about once.
      const double scale = 1.125 * static_cast<double>(n) / static_cast<double>(start + cnt);
      out.head.reserve_more(changed, scale);
      out.values.reserve_more(changed * w, scale);
      out.tail.reserve_more(changed * 9, scale);  // LEB128 of a 64-bit gap >> 7: at most 9 bytes
      uint8_t* h = out.head.data() + out.head.size();
      uint8_t* t = out.tail.data() + out.tail.size();
      uint8_t* v = out.values.data() + out.values.size();
      const size_t groups = (cnt + kDiffGroup - 1) / kDiffGroup;
      for (size_t g = 0; g < groups; ++g) {
        for (uint64_t m = masks[g]; m; m &= m - 1) {
          const uint64_t off = g * kDiffGroup + static_cast<uint64_t>(__builtin_ctzll(m));
          const uint64_t pos = start + off;
          const uint64_t gap = pos - next;
          next = pos + 1;
          const U vb = load_le<U>(b + off * w);
          store_le<U>(v, delta ? zigzag(static_cast<U>(vb - load_le<U>(a + off * w))) : vb);
          v += w;
          // Head byte without a branch; a tail only for gaps >= 128 (~1/4 of the changes at 1% density).
          *h++ = static_cast<uint8_t>((gap & 127) | (gap >= 128 ? 128 : 0));
          if (gap >= 128) t = put_tail(t, gap >> 7);
        }
      }
      out.head.set_size(static_cast<size_t>(h - out.head.data()));
      out.tail.set_size(static_cast<size_t>(t - out.tail.data()));
      out.values.set_size(static_cast<size_t>(v - out.values.data()));
    }
    if (base_hash) base_hash->update(a, cnt * w);  // null: the caller knows the base's hash
    target_hash.update(b, cnt * w);
  }
}

/// The bitmap index stream (FORMAT.md coding 1) of the changes held as varint gaps in e.head/e.tail.
std::vector<uint8_t> bitmap_from_gaps(const EncodedTensor& e, uint64_t n) {
  std::vector<uint8_t> tmp(e.head.data(), e.head.data() + e.head.size());
  tmp.insert(tmp.end(), e.tail.data(), e.tail.data() + e.tail.size());
  std::vector<uint8_t> bitmap(bitmap_bytes(n), 0);
  PositionIter it(kIndexVarintGaps, tmp.data(), tmp.size(), e.head.size(), n);
  for (uint64_t pos; (pos = it.next()) != UINT64_MAX;)
    bitmap[pos >> 3] |= static_cast<uint8_t>(1u << (pos & 7));
  return bitmap;
}

template <typename U>
void encode_tensor_typed(const TensorView& base, const TensorView& target, bool delta, bool anchor,
                         bool hash_base, int force_coding, EncodedTensor& out) {
  const uint64_t n = target.nbytes / sizeof(U);
  Xxh3Stream target_hash;
  if (!anchor) {
    Xxh3Stream base_hash;
    const size_t guess = static_cast<size_t>(std::min<uint64_t>(n, n / 64 + 1024));  // ~1.5%; grows
    out.head.reserve_more(guess);
    out.tail.reserve_more(guess / 2);
    out.values.reserve_more(guess * sizeof(U));
    scan_tensor<U>(base.data, target.data, n, delta, out, hash_base ? &base_hash : nullptr, target_hash);
    if (hash_base) out.base_hash = base_hash.digest();
  } else {
    target_hash.update(target.data, target.nbytes);
  }
  out.info.target_hash = target_hash.digest();

  const uint64_t k = anchor ? n : out.head.size();
  uint8_t coding = kIndexDense;
  if (!anchor) {
    const uint64_t sparse_values = value_stream_bytes(delta, k, sizeof(U));
    const uint64_t varint_total = out.head.size() + out.tail.size() + sparse_values;
    const uint64_t bitmap_total = bitmap_bytes(n) + sparse_values;
    const uint64_t dense_total = value_stream_bytes(delta, n, sizeof(U));
    coding = kIndexVarintGaps;
    uint64_t best = varint_total;
    if (bitmap_total < best) coding = kIndexBitmap, best = bitmap_total;
    if (dense_total < best) coding = kIndexDense;
    if (force_coding >= 0) coding = static_cast<uint8_t>(force_coding);
  }
  out.info.changed = k;
  out.info.index_coding = coding;

  if (coding == kIndexBitmap) {
    const std::vector<uint8_t> bitmap = bitmap_from_gaps(out, n);
    out.head.clear();
    out.tail.clear();
    out.head.reserve_more(bitmap.size());
    if (!bitmap.empty()) std::memcpy(out.head.data(), bitmap.data(), bitmap.size());
    out.head.set_size(bitmap.size());
  } else if (coding == kIndexDense) {
    // Every element: absolute = the target itself, delta = zigzag(target - base) (0 where unchanged).
    out.head.clear();
    out.tail.clear();
    out.values.clear();
    out.values.reserve_more(n * sizeof(U));
    uint8_t* v = out.values.data();
    if (!(delta && !anchor)) {
      if (n) std::memcpy(v, target.data, n * sizeof(U));
    } else {
      for (uint64_t i = 0; i < n; ++i)
        store_le<U>(v + i * sizeof(U), zigzag(static_cast<U>(load_le<U>(target.data + i * sizeof(U)) -
                                                             load_le<U>(base.data + i * sizeof(U)))));
    }
    out.values.set_size(n * sizeof(U));
  }
  out.info.index_bytes = out.head.size() + out.tail.size();
  out.info.value_bytes = value_stream_bytes(delta && !anchor, out.values.size() / sizeof(U), sizeof(U));
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
  if (options.force_index_coding < -1 || options.force_index_coding > kIndexDense)
    throw PatchError("force_index_coding must be -1, 0, 1 or 2");
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
      if (b.dtype != targets[i]->dtype || b.shape != targets[i]->shape)
        throw PatchError("tensor '" + b.name + "': base is " + std::string(dtype_name(b.dtype)) +
                         " with a different " + (b.dtype != targets[i]->dtype ? "dtype" : "shape") +
                         " than the target");
      bases[i] = &b;
    }
  }

  const bool delta = !anchor && options.values == ValueMode::Delta;
  std::vector<EncodedTensor> encoded(targets.size());
  // Biggest tensors first so the threads finish together.
  std::vector<size_t> order(targets.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return targets[a]->nbytes > targets[b]->nbytes; });
  parallel_for(order.size(), options.threads, [&](size_t o) {
    const size_t i = order[o];
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
  // Stream starts: index head, index tail (varint), each value byte plane.
  std::vector<uint64_t> starts;
  for (auto& e : encoded) {
    const uint64_t off = e.info.raw_offset;
    starts.push_back(off);
    if (e.info.index_coding == kIndexVarintGaps) starts.push_back(off + e.info.changed);
    const uint64_t w = dtype_size(e.info.dtype);
    const uint64_t plane = e.info.value_bytes / w;
    for (uint64_t b = 0; b < w; ++b) starts.push_back(off + e.info.index_bytes + b * plane);
  }
  std::sort(starts.begin(), starts.end());
  // Lay the streams into the payload (one copy, values byte-split on the way), in parallel.
  std::unique_ptr<uint8_t[]> payload(new uint8_t[std::max<uint64_t>(raw, 1)]);
  parallel_for(encoded.size(), options.threads, [&](size_t i) {
    EncodedTensor& e = encoded[i];
    uint8_t* p = payload.get() + e.info.raw_offset;
    if (e.head.size()) std::memcpy(p, e.head.data(), e.head.size());
    if (e.tail.size()) std::memcpy(p + e.head.size(), e.tail.data(), e.tail.size());
    write_byte_planes(e.values.data(), e.values.size() / dtype_size(e.info.dtype), dtype_size(e.info.dtype),
                      p + e.info.index_bytes);
    e.head.clear();
    e.tail.clear();
    e.values.clear();
  });
  for (auto& e : encoded) info.tensors.push_back(std::move(e.info));
  return write_container(info, payload.get(), raw, options.zstd_level, options.chunk_bytes, options.threads,
                         starts);
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
