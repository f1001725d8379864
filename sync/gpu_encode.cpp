#include "sync/gpu_encode.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/patch_container.h"
#include "sync/value_coding.h"

#ifdef PULSE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_device_buffer.h"

#include "kernels/diff_emit16_cuda.h"
#include "kernels/tree_hash_cuda.h"
#endif

namespace pulse::sync {

#ifndef PULSE_CUDA

bool cuda_encode_available(std::string* why) {
  if (why) *why = "this pulse was built without CUDA (PULSE_CUDA=OFF or no nvcc at configure time)";
  return false;
}

std::vector<uint8_t> encode_patch_cuda(const std::vector<DeviceTensor>&, const PatchOptions&, CUstream_st*) {
  std::string why;
  cuda_encode_available(&why);
  throw PatchError("encode_patch_cuda: " + why);
}

#else

namespace {

namespace kc = pulse::kernels::cuda;

// Must equal sync/patch_encode.cpp's group size (FORMAT.md, format version 2): the tests compare the bytes.
constexpr uint64_t kGroupTensorBytes = 4u << 20;

void cuda_check(cudaError_t e, const char* what) {
  kc::check(e, "encode_patch_cuda", what);
}
using kc::DeviceBuffer;

/// One tensor's streams on the host, laid out as sync/patch_encode.cpp's EncodedTensor.
struct HostTensor {
  PatchTensorInfo info;
  std::vector<uint8_t> index;      ///< head + tail (varint), bitmap, or empty (dense)
  std::vector<uint8_t> planes[2];  ///< value planes lo, hi
  uint64_t head_bytes = 0;         ///< varint: heads in `index`
  uint64_t base_hash = 0;
};

template <typename T>
void down(std::vector<T>& v, const void* src, uint64_t count, cudaStream_t s) {
  v.resize(count);
  if (count) cuda_check(cudaMemcpyAsync(v.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost, s), "copy");
}

/// The device scan of one tensor, then encode_tensor_typed's coding choice on the host.
/// Where a tensor's target lies on the device: its weights themselves when the cast writes them from the
/// masters in place.
const uint16_t* target_of(const DeviceTensor& t) {
  return t.master ? t.weights : t.target;
}

/// Device bytes of every tensor in the patch's tensor order.
std::vector<uint64_t> tensor_bytes(const std::vector<DeviceTensor>& tensors,
                                   const std::vector<size_t>& order) {
  std::vector<uint64_t> lens;
  for (size_t o : order) lens.push_back(2 * static_cast<uint64_t>(numel(tensors[o].shape)));
  return lens;
}

/// The tensor hash (format 3: tree, kernels/tree_hash_cuda.h) of every tensor's base weights, or of its
/// targets, in the patch's tensor order (`lens`: their tensor_bytes), in one batch in `ws`.
std::vector<uint64_t> device_hashes(const std::vector<DeviceTensor>& tensors,
                                    const std::vector<size_t>& order, const std::vector<uint64_t>& lens,
                                    bool targets, DeviceBuffer& ws, size_t ws_bytes, cudaStream_t s) {
  std::vector<const void*> ptrs;
  for (size_t o : order) ptrs.push_back(targets ? target_of(tensors[o]) : tensors[o].weights);
  std::vector<uint64_t> hashes(order.size());
  kc::tree_hash_cuda_many(ptrs.data(), lens.data(), lens.size(), ws.p, ws_bytes, s, hashes.data());
  return hashes;
}

void encode_one(const DeviceTensor& t, uint64_t n, bool delta, int force_coding, cudaStream_t s,
                DeviceBuffer& head, DeviceBuffer& tail, DeviceBuffer& lo, DeviceBuffer& hi, DeviceBuffer& ws,
                size_t ws_bytes, HostTensor& out) {
  uint16_t* target = const_cast<uint16_t*>(target_of(t));
  kc::Emit16Totals totals;
  // With masters the cast writes the new version over the old one in place (each element is read before
  // it is written, by the same thread).
  kc::cast_diff_emit16_cuda(t.master, t.weights, target, n, delta,
                            kc::Emit16Streams{head.bytes(), tail.bytes(), lo.bytes(), hi.bytes()}, ws.p,
                            ws_bytes, &totals, s);
  cuda_check(cudaStreamSynchronize(s), "scan");
  const uint64_t k = totals.changed;
  std::vector<uint8_t> heads, tails;
  down(heads, head.p, k, s);
  down(tails, tail.p, totals.tail_bytes, s);
  down(out.planes[0], lo.p, k, s);
  down(out.planes[1], hi.p, k, s);
  cuda_check(cudaStreamSynchronize(s), "stream copies");

  const uint8_t coding = choose_index_coding(n, k, k + tails.size(), delta, 2, force_coding);
  out.info.changed = k;
  out.info.index_coding = coding;
  out.index = std::move(heads);
  out.index.insert(out.index.end(), tails.begin(), tails.end());
  if (coding == kIndexBitmap || (coding == kIndexDense && delta)) {
    PositionIter it(kIndexVarintGaps, out.index.data(), out.index.size(), k, n);
    std::vector<uint8_t> bitmap, dense[2];
    if (coding == kIndexBitmap) bitmap.assign(bitmap_bytes(n), 0);
    if (coding == kIndexDense) dense[0].assign(n, 0), dense[1].assign(n, 0);  // delta 0 where unchanged
    uint64_t j = 0;
    for (uint64_t pos; (pos = it.next()) != UINT64_MAX; ++j) {
      if (coding == kIndexBitmap) {
        bitmap[pos >> 3] |= static_cast<uint8_t>(1u << (pos & 7));
      } else {
        dense[0][pos] = out.planes[0][j];
        dense[1][pos] = out.planes[1][j];
      }
    }
    if (coding == kIndexBitmap) {
      out.index = std::move(bitmap);
    } else {
      out.index.clear();
      out.planes[0] = std::move(dense[0]);
      out.planes[1] = std::move(dense[1]);
    }
  } else if (coding == kIndexDense) {  // absolute: the target's bytes as planes
    std::vector<uint16_t> values;
    down(values, target, n, s);
    cuda_check(cudaStreamSynchronize(s), "target copy");
    out.index.clear();
    out.planes[0].resize(n);
    out.planes[1].resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      out.planes[0][i] = static_cast<uint8_t>(values[i]);
      out.planes[1][i] = static_cast<uint8_t>(values[i] >> 8);
    }
  }
  out.info.index_bytes = out.index.size();
  out.info.value_bytes = value_stream_bytes(delta, out.planes[0].size(), 2);
}

}  // namespace

bool cuda_encode_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return true;
  if (why)
    *why = e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) : "no CUDA device";
  return false;
}

std::vector<uint8_t> encode_patch_cuda(const std::vector<DeviceTensor>& tensors, const PatchOptions& options,
                                       CUstream_st* stream) {
  std::string why;
  if (!cuda_encode_available(&why)) throw PatchError("encode_patch_cuda: " + why);
  options.validate();
  const bool hash_base = !options.known_base_root && !options.known_base_tensor_hashes;
  if (!options.known_base_root && options.known_base_tensor_hashes &&
      options.known_base_tensor_hashes->size() != tensors.size())
    throw PatchError("known_base_tensor_hashes holds " +
                     std::to_string(options.known_base_tensor_hashes->size()) + " hashes for " +
                     std::to_string(tensors.size()) + " base tensors");
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].name < tensors[b].name; });
  uint64_t max_n = 0;
  for (size_t o = 0; o < order.size(); ++o) {
    const DeviceTensor& t = tensors[order[o]];
    if (o && t.name == tensors[order[o - 1]].name) throw PatchError("tensor '" + t.name + "' appears twice");
    if (t.dtype != DType::BF16 && t.dtype != DType::F16)
      throw PatchError("tensor '" + t.name + "': encode_patch_cuda takes BF16 or F16, not " +
                       std::string(dtype_name(t.dtype)));
    if (t.master && t.dtype != DType::BF16)
      throw PatchError("tensor '" + t.name + "': FP32 masters cast to BF16 only");
    const uint64_t n = static_cast<uint64_t>(numel(t.shape));
    if (n && (!t.weights || (!t.master && !t.target)))
      throw PatchError("tensor '" + t.name + "' has no device data (weights, and master or target)");
    max_n = std::max(max_n, n);
  }

  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const bool delta = options.values == ValueMode::Delta;
  const size_t ws_bytes = kc::emit16_cuda_workspace_bytes(max_n);
  std::vector<HostTensor> encoded(order.size());
  const std::vector<uint64_t> lens = tensor_bytes(tensors, order);
  const size_t hash_ws_bytes = kc::tree_hash_cuda_workspace_bytes(lens.data(), lens.size());
  DeviceBuffer hash_ws(hash_ws_bytes);
  // The base before any scan: with masters the cast overwrites it in place.
  if (hash_base) {
    const std::vector<uint64_t> base = device_hashes(tensors, order, lens, false, hash_ws, hash_ws_bytes, s);
    for (size_t o = 0; o < order.size(); ++o) encoded[o].base_hash = base[o];
  }
  {
    DeviceBuffer head(max_n), tail(kc::emit16_cuda_tail_room(max_n)), lo(max_n), hi(max_n), ws(ws_bytes);
    for (size_t o = 0; o < order.size(); ++o) {
      const DeviceTensor& t = tensors[order[o]];
      HostTensor& e = encoded[o];
      e.info.name = t.name;
      e.info.dtype = t.dtype;
      e.info.shape = t.shape;
      encode_one(t, static_cast<uint64_t>(numel(t.shape)), delta, options.force_index_coding, s, head, tail,
                 lo, hi, ws, ws_bytes, e);
    }
  }
  {
    const std::vector<uint64_t> target = device_hashes(tensors, order, lens, true, hash_ws, hash_ws_bytes, s);
    for (size_t o = 0; o < order.size(); ++o) encoded[o].info.target_hash = target[o];
  }

  // Groups, chunks and container exactly as sync/patch_encode.cpp lays them out.
  std::vector<size_t> group_start{0};
  for (size_t i = 0, bytes = 0; i < encoded.size(); ++i) {
    bytes += 2 * static_cast<size_t>(numel(encoded[i].info.shape));
    if (bytes >= kGroupTensorBytes && i + 1 < encoded.size()) {
      group_start.push_back(i + 1);
      bytes = 0;
    }
  }
  group_start.push_back(encoded.size());
  const size_t n_groups = group_start.size() - 1;
  // The streams are on the host already: every frame of every group's chunks is one task (sync/
  // patch_container.h ChunkPlan), biggest first, so that all threads compress until the end.
  std::vector<ChunkPlan> plans;
  for (size_t g = 0; g < n_groups; ++g) {
    std::vector<PayloadSegment> segments;
    for (size_t i = group_start[g]; i < group_start[g + 1]; ++i) {
      const HostTensor& e = encoded[i];
      if (e.info.index_coding == kIndexVarintGaps) {
        const uint64_t heads = e.info.changed;
        if (heads) segments.push_back({e.index.data(), heads});
        if (e.index.size() > heads) segments.push_back({e.index.data() + heads, e.index.size() - heads});
      } else if (!e.index.empty()) {
        segments.push_back({e.index.data(), e.index.size()});
      }
      for (const auto& p : e.planes)
        if (!p.empty()) segments.push_back({p.data(), p.size()});
    }
    for (const auto& chunk : cut_chunks(segments, options.chunk_bytes))
      plans.push_back(plan_chunk(chunk, options.zstd_level));
  }
  std::vector<std::pair<size_t, size_t> > frames;  // (plan, piece)
  for (size_t c = 0; c < plans.size(); ++c)
    for (size_t f = 0; f < plans[c].pieces.size(); ++f) frames.push_back({c, f});
  std::stable_sort(frames.begin(), frames.end(), [&](const auto& x, const auto& y) {
    return plans[x.first].pieces[x.second].size > plans[y.first].pieces[y.second].size;
  });
  parallel_for(frames.size(), options.threads,
               [&](size_t k) { compress_planned_frame(plans[frames[k].first], frames[k].second); });

  PatchInfo info;
  info.anchor = false;
  info.values = options.values;
  info.model_id = options.model_id;
  info.base_version = options.base_version;
  info.target_version = options.target_version;
  std::vector<TensorView> views;
  std::vector<uint64_t> target_hashes, base_hashes;
  uint64_t raw = 0;
  for (size_t o = 0; o < encoded.size(); ++o) {
    HostTensor& e = encoded[o];
    e.info.raw_offset = raw;
    raw += e.info.index_bytes + e.info.value_bytes;
    views.push_back(TensorView{e.info.name, e.info.dtype, e.info.shape, nullptr,
                               2 * static_cast<size_t>(numel(e.info.shape))});
    target_hashes.push_back(e.info.target_hash);
    base_hashes.push_back(options.known_base_tensor_hashes ? (*options.known_base_tensor_hashes)[order[o]]
                                                           : e.base_hash);
    info.tensors.push_back(e.info);
  }
  info.target_root_hash = root_hash(views, target_hashes);
  info.base_root_hash = options.known_base_root ? *options.known_base_root : root_hash(views, base_hashes);
  std::vector<CompressedChunk> chunks;
  for (auto& plan : plans) chunks.push_back(finish_chunk(std::move(plan)));
  return assemble_container(info, chunks, options.zstd_level, options.chunk_bytes, options.threads);
}

#endif

}  // namespace pulse::sync
