#include "sync/gpu_apply.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "sync/gpu_encode.h"
#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/parallel.h"
#include "sync/patch_apply_checks.h"
#include "sync/patch_container.h"

#ifdef PULSE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_device_buffer.h"

#include "kernels/patch_apply_cuda.h"
#include "kernels/tree_hash_cuda.h"
#include "kernels/xxh3_cuda.h"
#endif

namespace pulse::sync {

#ifndef PULSE_CUDA

bool apply_patch_cuda(std::vector<DeviceMutableTensor>&, const uint8_t*, size_t, const ApplyOptions&,
                      CUstream_st*) {
  std::string why;
  cuda_encode_available(&why);
  throw PatchError("apply_patch_cuda: " + why);
}

#else

namespace {

namespace kc = pulse::kernels::cuda;

void cuda_check(cudaError_t e, const char* what) {
  kc::check(e, "apply_patch_cuda", what);
}
using kc::DeviceBuffer;

/// One tensor's change list in varint-gap form (host), what the device scatter takes.
struct VarintForm {
  std::vector<uint8_t> index;   ///< heads then tails
  std::vector<uint8_t> values;  ///< lo plane then hi plane
  uint64_t changed = 0;
};

VarintForm varint_form(const PatchTensorInfo& t, const uint8_t* streams, uint64_t n) {
  VarintForm f;
  const uint64_t stored = t.index_coding == kIndexDense ? n : t.changed;
  f.changed = stored;
  f.values.assign(streams + t.index_bytes, streams + t.index_bytes + 2 * stored);
  if (t.index_coding == kIndexVarintGaps) {
    f.index.assign(streams, streams + t.index_bytes);
  } else if (t.index_coding == kIndexDense) {
    f.index.assign(n, 0);  // every element, gap 0
  } else {
    GapEncoder enc;
    enc.reserve(stored);
    PositionIter it(t.index_coding, streams, t.index_bytes, t.changed, n);
    for (uint64_t pos; (pos = it.next()) != UINT64_MAX;) enc.add(pos);
    enc.append_to(f.index);
  }
  return f;
}

/// A device allocation reused by every tensor of one call, grown (never shrunk) when a tensor needs more:
/// a patch of hundreds of tensors then costs a few cudaMalloc / cudaFree (cudaFree synchronizes the
/// whole device, stalling the other threads' work on it) instead of several per tensor.
class GrowBuffer {
 public:
  void* get(size_t bytes) {
    if (!buf_ || bytes > cap_) {
      buf_.reset();  // free first: the old contents are not needed
      buf_ = std::make_unique<DeviceBuffer>(bytes);
      cap_ = bytes;
    }
    return buf_->p;
  }

 private:
  std::unique_ptr<DeviceBuffer> buf_;
  size_t cap_ = 0;
};

/// The scratch of one apply_patch_cuda call.
struct ApplyScratch {
  GrowBuffer index, values, apply_ws, hash_ws;
};

/// Scatters `f` into `w` on the device (undo saved in `undo`), or throws PatchError with the verdict.
void scatter(uint16_t* w, uint64_t n, const VarintForm& f, bool delta, uint16_t* undo,
             const std::string& name, cudaStream_t s, ApplyScratch& scratch) {
  auto* index = static_cast<uint8_t*>(scratch.index.get(f.index.size()));
  auto* values = static_cast<uint8_t*>(scratch.values.get(f.values.size()));
  const size_t ws_bytes = kc::apply_u16_cuda_workspace_bytes(f.changed, f.index.size());
  void* ws = scratch.apply_ws.get(ws_bytes);
  if (!f.index.empty())
    cuda_check(cudaMemcpyAsync(index, f.index.data(), f.index.size(), cudaMemcpyHostToDevice, s), "copy");
  if (!f.values.empty())
    cuda_check(cudaMemcpyAsync(values, f.values.data(), f.values.size(), cudaMemcpyHostToDevice, s), "copy");
  kc::ApplyStatus st;
  kc::apply_varint_u16_cuda(w, n, index, f.index.size(), f.changed, values, delta, undo, ws, ws_bytes, &st,
                            s);
  if (st.error != kc::kApplyOk)
    throw PatchError("patch tensor '" + name + "': device validation refused the index stream: " +
                     kc::apply_error_name(st.error) + " at " + std::to_string(st.at));
}

/// The tensor hash of weights[k] for each k in `which` under `scheme` (the patch's format version): tree
/// (kernels/tree_hash_cuda.h, one batch) or XXH3-64 (batches of xxh3_64_cuda_many, kernels/xxh3_cuda.h).
std::vector<uint64_t> device_hashes(const std::vector<DeviceMutableTensor>& weights,
                                    const std::vector<size_t>& which, HashScheme scheme, cudaStream_t s,
                                    ApplyScratch& scratch) {
  std::vector<const void*> ptrs;
  std::vector<uint64_t> lens, hashes(which.size());
  for (size_t k : which) {
    ptrs.push_back(weights[k].data);
    lens.push_back(2 * static_cast<uint64_t>(numel(weights[k].shape)));
  }
  if (scheme == HashScheme::Tree) {
    const size_t ws_bytes = kc::tree_hash_cuda_workspace_bytes(lens.data(), lens.size());
    kc::tree_hash_cuda_many(ptrs.data(), lens.data(), lens.size(), scratch.hash_ws.get(ws_bytes), ws_bytes, s,
                            hashes.data());
    return hashes;
  }
  const size_t ws_bytes =
      kc::xxh3_cuda_many_workspace_capped(lens.data(), lens.size(), kc::kXxh3CudaWorkspaceCap);
  kc::xxh3_64_cuda_many(ptrs.data(), lens.data(), lens.size(), scratch.hash_ws.get(ws_bytes), ws_bytes, s,
                        hashes.data());
  return hashes;
}

}  // namespace

bool apply_patch_cuda(std::vector<DeviceMutableTensor>& weights, const uint8_t* data, size_t size,
                      const ApplyOptions& options, CUstream_st* stream) {
  std::string why;
  if (!cuda_encode_available(&why)) throw PatchError("apply_patch_cuda: " + why);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const Container c = parse_container(data, size, true);
  const PatchInfo& info = c.info;
  const bool delta = info.values == ValueMode::Delta;
  const HashScheme scheme = hash_scheme_of_format(info.format_version);

  for (const auto& w : weights) {
    if (w.dtype != DType::BF16 && w.dtype != DType::F16)
      throw PatchError("tensor '" + w.name + "': apply_patch_cuda takes BF16 or F16, not " +
                       std::string(dtype_name(w.dtype)));
    if (numel(w.shape) && !w.data) throw PatchError("weights tensor '" + w.name + "' has no device data");
  }
  // Names, dtypes, shapes as apply_patch checks them (the data pointers are device memory: unused there).
  std::vector<TensorView> views;
  for (const auto& w : weights)
    views.push_back(TensorView{w.name, w.dtype, w.shape, nullptr, 2 * static_cast<size_t>(numel(w.shape))});
  const std::vector<size_t> target_of = match_patch_tensors(info, views);

  const ScratchBuffer payload = read_payload(c, data, size, options.threads);
  parallel_for(info.tensors.size(), options.threads, [&](size_t k) {
    const auto& t = info.tensors[k];
    validate_index_stream(t.name, t.index_coding, payload.data() + t.raw_offset, t.index_bytes, t.changed,
                          static_cast<uint64_t>(numel(t.shape)), t.raw_offset);
  });

  ApplyScratch scratch;
  const bool trusted = options.trusted_root.has_value();
  std::vector<uint64_t> current(weights.size(), 0);
  {
    std::vector<size_t> hashed;
    for (size_t k = 0; k < info.tensors.size(); ++k) {
      const auto& t = info.tensors[k];
      if (!trusted || (t.changed == 0 && t.index_coding != kIndexDense)) hashed.push_back(target_of[k]);
    }
    const std::vector<uint64_t> h = device_hashes(weights, hashed, scheme, s, scratch);
    for (size_t i = 0; i < hashed.size(); ++i) current[hashed[i]] = h[i];
  }
  if (check_patch_roots(info, target_of, views, current, options.trusted_root)) return false;

  // Apply tensor by tensor on the device, then verify every target hash (one batch); roll back everything
  // on any failure.
  std::vector<VarintForm> forms(info.tensors.size());
  // One undo area for the whole patch: tensor k's old values at undo_at[k] (2 bytes per stored change).
  std::vector<uint64_t> undo_at(info.tensors.size(), 0);
  uint64_t undo_elements = 0;
  for (size_t k = 0; k < info.tensors.size(); ++k) {
    const auto& t = info.tensors[k];
    undo_at[k] = undo_elements;
    if (t.changed == 0 && t.index_coding != kIndexDense) continue;
    undo_elements += t.index_coding == kIndexDense ? static_cast<uint64_t>(numel(t.shape)) : t.changed;
  }
  DeviceBuffer undo(2 * undo_elements);
  std::vector<bool> applied(info.tensors.size(), false);
  std::string failure;
  try {
    for (size_t k = 0; k < info.tensors.size(); ++k) {
      const auto& t = info.tensors[k];
      if (t.changed == 0 && t.index_coding != kIndexDense) continue;
      auto& w = weights[target_of[k]];
      const uint64_t n = static_cast<uint64_t>(numel(w.shape));
      forms[k] = varint_form(t, payload.data() + t.raw_offset, n);
      if (forms[k].changed > (k + 1 < undo_at.size() ? undo_at[k + 1] : undo_elements) - undo_at[k])
        throw std::logic_error("apply_patch_cuda: undo area of tensor '" + t.name + "' too small");
      scatter(w.data, n, forms[k], delta, undo.as<uint16_t>() + undo_at[k], t.name, s, scratch);
      applied[k] = true;
    }
    std::vector<size_t> patched, written;  // patch tensor indices, and their weights
    for (size_t k = 0; k < info.tensors.size(); ++k)
      if (applied[k]) patched.push_back(k), written.push_back(target_of[k]);
    const std::vector<uint64_t> after = device_hashes(weights, written, scheme, s, scratch);
    for (size_t i = 0; i < patched.size() && failure.empty(); ++i) {
      const auto& t = info.tensors[patched[i]];
      if (after[i] != t.target_hash)
        failure = "patch tensor '" + t.name + "': hash after apply " + hash_hex(after[i]) +
                  " differs from the target hash " + hash_hex(t.target_hash) + " (" + patch_versions(info) +
                  "); weights rolled back";
    }
  } catch (const std::exception& e) {
    failure = std::string("patch apply failed (") + patch_versions(info) + "): " + e.what() +
              "; weights rolled back";
  }
  if (!failure.empty()) {
    for (size_t k = 0; k < info.tensors.size(); ++k) {
      if (!applied[k]) continue;
      // The old values, as an absolute change list over the same positions.
      VarintForm back;
      back.index = forms[k].index;
      back.changed = forms[k].changed;
      std::vector<uint16_t> old(back.changed);
      if (back.changed)
        cuda_check(cudaMemcpyAsync(old.data(), undo.as<uint16_t>() + undo_at[k], 2 * back.changed,
                                   cudaMemcpyDeviceToHost, s),
                   "copy");
      cuda_check(cudaStreamSynchronize(s), "undo copy");
      back.values.resize(2 * back.changed);
      for (uint64_t j = 0; j < back.changed; ++j) {
        back.values[j] = static_cast<uint8_t>(old[j]);
        back.values[back.changed + j] = static_cast<uint8_t>(old[j] >> 8);
      }
      auto& w = weights[target_of[k]];
      scatter(w.data, static_cast<uint64_t>(numel(w.shape)), back, false, nullptr, info.tensors[k].name, s,
              scratch);
    }
    throw PatchError(failure);
  }
  return true;
}

#endif

}  // namespace pulse::sync
