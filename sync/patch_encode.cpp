// Encoder: diff scan (fused with the xxh3 hashes, one pass over memory), per-tensor index coding
// choice, byte-plane value streams, then the chunked container (sync/patch_container.cpp).
#include <xxhash.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/patch.h"
#include "sync/patch_container.h"
#include "sync/value_coding.h"

namespace pulse::sync {

namespace {

// Block that the scan compares and hashes while it sits in L2 (bytes).
constexpr size_t kScanBlockBytes = 64 << 10;

struct XxhState {
  XXH3_state_t* s = XXH3_createState();
  XxhState() {
    if (!s) throw std::bad_alloc();
    XXH3_64bits_reset(s);
  }
  ~XxhState() { XXH3_freeState(s); }
  void update(const void* p, size_t n) { XXH3_64bits_update(s, p, n); }
  uint64_t digest() const { return XXH3_64bits_digest(s); }
};

/// One tensor's streams, ready to be laid into the payload.
struct EncodedTensor {
  PatchTensorInfo info;
  std::vector<uint8_t> streams;  // index stream then value stream
  uint64_t base_hash = 0;
};

/// Scans base vs target (n elements of type U), collecting changed positions and their values
/// (new bit pattern, or wrapping difference in delta mode), hashing both sides block by block.
template <typename U>
void scan_tensor(const uint8_t* base, const uint8_t* target, uint64_t n, bool delta, GapEncoder& gaps,
                 std::vector<U>& values, XxhState* base_hash, XxhState& target_hash) {
  constexpr size_t w = sizeof(U);
  constexpr size_t kGroupElems = 32 / w;
  const uint64_t block_elems = kScanBlockBytes / w;
  std::vector<uint32_t> hits(block_elems);  // changed offsets inside the block
  for (uint64_t start = 0; start < n; start += block_elems) {
    const uint64_t cnt = std::min(block_elems, n - start);
    const uint8_t* a = base + start * w;
    const uint8_t* b = target + start * w;
    size_t k = 0, e = 0;
    // 32 bytes per step: equal groups cost one well-predicted branch; a group with changes is compacted
    // without branches (at a few % density the per-element branches would mispredict constantly).
    for (; e + kGroupElems <= cnt; e += kGroupElems) {
      const uint8_t* pa = a + e * w;
      const uint8_t* pb = b + e * w;
      const uint64_t x = (load_le<uint64_t>(pa) ^ load_le<uint64_t>(pb)) |
                         (load_le<uint64_t>(pa + 8) ^ load_le<uint64_t>(pb + 8)) |
                         (load_le<uint64_t>(pa + 16) ^ load_le<uint64_t>(pb + 16)) |
                         (load_le<uint64_t>(pa + 24) ^ load_le<uint64_t>(pb + 24));
      if (x == 0) continue;
      for (size_t l = 0; l < kGroupElems; ++l) {
        hits[k] = static_cast<uint32_t>(e + l);
        k += load_le<U>(pa + l * w) != load_le<U>(pb + l * w);
      }
    }
    for (; e < cnt; ++e) {
      hits[k] = static_cast<uint32_t>(e);
      k += load_le<U>(a + e * w) != load_le<U>(b + e * w);
    }
    for (size_t j = 0; j < k; ++j) {
      const uint64_t off = hits[j];
      const U va = load_le<U>(a + off * w);
      const U vb = load_le<U>(b + off * w);
      gaps.add(start + off);
      values.push_back(delta ? static_cast<U>(vb - va) : vb);
    }
    if (base_hash) base_hash->update(a, cnt * w);
    target_hash.update(b, cnt * w);
  }
}

template <typename U>
void encode_tensor_typed(const TensorView& base, const TensorView& target, bool delta, bool anchor,
                         int force_coding, EncodedTensor& out) {
  const uint64_t n = target.nbytes / sizeof(U);
  XxhState target_hash;
  std::unique_ptr<XxhState> base_hash;
  GapEncoder gaps;
  std::vector<U> values;
  values.reserve(std::min<uint64_t>(n, n / 32 + 1024));  // ~3%; grows when denser
  gaps.reserve(std::min<uint64_t>(n, n / 32 + 1024));
  if (!anchor) {
    base_hash = std::make_unique<XxhState>();
    scan_tensor<U>(base.data, target.data, n, delta, gaps, values, base_hash.get(), target_hash);
    out.base_hash = base_hash->digest();
  } else {
    target_hash.update(target.data, target.nbytes);
  }
  out.info.target_hash = target_hash.digest();

  const uint64_t k = anchor ? n : values.size();
  uint8_t coding = kIndexDense;
  if (!anchor) {
    const uint64_t sparse_values = value_stream_bytes(delta, k, sizeof(U));
    const uint64_t varint_total = gaps.bytes() + sparse_values;
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

  std::vector<uint8_t>& s = out.streams;
  if (coding == kIndexVarintGaps) {
    gaps.append_to(s);
  } else if (coding == kIndexBitmap) {
    s.assign(bitmap_bytes(n), 0);
    std::vector<uint8_t> tmp;
    gaps.append_to(tmp);
    PositionIter it(kIndexVarintGaps, tmp.data(), tmp.size(), k, n);
    for (uint64_t pos; (pos = it.next()) != UINT64_MAX;) s[pos >> 3] |= static_cast<uint8_t>(1u << (pos & 7));
  }
  out.info.index_bytes = s.size();
  if (coding == kIndexDense) {
    // Every element: absolute = the target itself, delta = target - base (0 where unchanged).
    std::vector<U>().swap(values);
    values.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      const U b = load_le<U>(target.data + i * sizeof(U));
      values[i] = (delta && !anchor) ? static_cast<U>(b - load_le<U>(base.data + i * sizeof(U))) : b;
    }
  }
  const uint64_t value_bytes = value_stream_bytes(delta && !anchor, values.size(), sizeof(U));
  s.resize(out.info.index_bytes + value_bytes);
  write_value_stream<U>(values, delta && !anchor, s.data() + out.info.index_bytes);
  out.info.value_bytes = value_bytes;
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
        encode_tensor_typed<uint8_t>(b, t, delta, anchor, options.force_index_coding, e);
        break;
      case 2:
        encode_tensor_typed<uint16_t>(b, t, delta, anchor, options.force_index_coding, e);
        break;
      case 4:
        encode_tensor_typed<uint32_t>(b, t, delta, anchor, options.force_index_coding, e);
        break;
      default:
        encode_tensor_typed<uint64_t>(b, t, delta, anchor, options.force_index_coding, e);
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
    raw += encoded[i].streams.size();
    sorted_targets.push_back(*targets[i]);
    target_hashes.push_back(encoded[i].info.target_hash);
    base_hashes.push_back(encoded[i].base_hash);
  }
  info.target_root_hash = root_hash(sorted_targets, target_hashes);
  info.base_root_hash = anchor ? 0 : root_hash(sorted_targets, base_hashes);  // same names/dtypes/shapes
  std::vector<uint8_t> payload;
  payload.reserve(raw);
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
  for (auto& e : encoded) {
    payload.insert(payload.end(), e.streams.begin(), e.streams.end());
    std::vector<uint8_t>().swap(e.streams);
    info.tensors.push_back(std::move(e.info));
  }
  return write_container(info, payload, options.zstd_level, options.chunk_bytes, options.threads, starts);
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
