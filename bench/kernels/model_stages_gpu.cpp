// bench/kernels/model_stages.h, the GPU part: every stage of a model-shaped sync on the device, timed by
// the host clock around a device synchronization (the stages include their host round trips: per-tensor
// totals, the apply's verdicts), beside a device-to-device copy of the whole BF16 set in the same run.
#include "bench/kernels/model_stages.h"

#ifdef PULSE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/kernels/model_shapes.h"
#include "bench/kernels/model_stages_util.h"
#include "kernels/cuda_device_buffer.h"
#include "kernels/diff_emit16_cuda.h"
#include "kernels/patch_apply_cuda.h"
#include "kernels/tree_hash_cuda.h"
#endif

namespace pulse::bench {

#ifndef PULSE_CUDA
nlohmann::json run_model_stages_gpu(const ModelStagesOptions&) {
  return {{"available", false}, {"reason", "this pulse was built without CUDA (PULSE_CUDA=OFF or no nvcc)"}};
}
#else
namespace {

namespace kc = pulse::kernels::cuda;
using Dev = kc::DeviceBuffer;

void ok(cudaError_t e, const char* what) {
  kc::check(e, "bench kernels --model", what);
}

/// Pinned host memory, freed on destruction.
struct Pinned {
  uint8_t* p = nullptr;
  explicit Pinned(size_t bytes) {
    ok(cudaMallocHost(reinterpret_cast<void**>(&p), bytes ? bytes : 1), "pinned");
  }
  ~Pinned() { cudaFreeHost(p); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

/// Best host milliseconds of `reps` runs of fn, each bracketed by device synchronizations; `reset` untimed.
double best_ms(int reps, const std::function<void()>& fn, const std::function<void()>& reset = {}) {
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up
    if (reset) reset();
    ok(cudaDeviceSynchronize(), "sync");
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ok(cudaDeviceSynchronize(), "sync");
    const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r) best = std::min(best, ms);
  }
  return best;
}

}  // namespace

nlohmann::json run_model_stages_gpu(const ModelStagesOptions& o) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return {{"available", false},
            {"reason", e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)
                                        : "no CUDA device"}};
  cudaDeviceProp prop;
  ok(cudaGetDeviceProperties(&prop, 0), "properties");
  const std::vector<ShapedTensor> shapes = qwen25_7b_shapes(o.scale);
  const size_t T = shapes.size();
  std::vector<uint64_t> off(T + 1, 0), tail_off(T + 1, 0);
  uint64_t max_n = 0;
  for (size_t t = 0; t < T; ++t) {
    off[t + 1] = off[t] + shapes[t].elements();
    tail_off[t + 1] = tail_off[t] + kc::emit16_cuda_tail_room(shapes[t].elements());
    max_n = std::max(max_n, shapes[t].elements());
  }
  const uint64_t total = off[T];
  const double bf16_bytes = 2.0 * static_cast<double>(total);

  // The weights: a generated pattern repeated over every tensor (host generation of 7.6 G would take
  // minutes; the kernels see the same density either way).
  std::vector<float> pm;
  std::vector<uint16_t> pp;
  model_pattern(std::min<uint64_t>(o.pattern, total), o.changed, pm, pp);
  Dev master(4 * total), prev(2 * total), target(2 * total), work(2 * total);
  for (uint64_t i = 0; i < total; i += pm.size()) {
    const uint64_t c = std::min<uint64_t>(pm.size(), total - i);
    ok(cudaMemcpy(master.as<float>() + i, pm.data(), 4 * c, cudaMemcpyHostToDevice), "H2D");
    ok(cudaMemcpy(prev.as<uint16_t>() + i, pp.data(), 2 * c, cudaMemcpyHostToDevice), "H2D");
  }
  Dev head(total), lo(total), hi(total), tail(tail_off[T]), ws(kc::emit16_cuda_workspace_bytes(max_n));
  const size_t ws_bytes = kc::emit16_cuda_workspace_bytes(max_n);
  Pinned totals_mem(sizeof(kc::Emit16Totals) * T);
  auto* totals = reinterpret_cast<kc::Emit16Totals*>(totals_mem.p);
  nlohmann::json stages = nlohmann::json::array();

  const double copy_ms = best_ms(o.reps, [&] {
    ok(cudaMemcpyAsync(work.p, prev.p, 2 * total, cudaMemcpyDeviceToDevice, nullptr), "copy");
  });

  const double emit_ms = best_ms(o.reps, [&] {
    for (size_t t = 0; t < T; ++t) {
      const kc::Emit16Streams s{head.bytes() + off[t], tail.bytes() + tail_off[t], lo.bytes() + off[t],
                                hi.bytes() + off[t]};
      kc::cast_diff_emit16_cuda(master.as<float>() + off[t], prev.as<uint16_t>() + off[t],
                                target.as<uint16_t>() + off[t], shapes[t].elements(), false, s, ws.p,
                                ws_bytes, &totals[t], nullptr);
    }
  });
  stages.push_back(stage_row("cast + diff + compaction (fused)", emit_ms, 4.0 * bf16_bytes));

  std::vector<const void*> tptrs(T), wptrs(T);
  std::vector<uint64_t> lens(T), target_hash(T), applied_hash(T);
  for (size_t t = 0; t < T; ++t) {
    tptrs[t] = target.as<uint16_t>() + off[t];
    wptrs[t] = work.as<uint16_t>() + off[t];
    lens[t] = 2 * shapes[t].elements();
  }
  const size_t hash_ws_bytes = kc::tree_hash_cuda_workspace_bytes(lens.data(), T);
  Dev hash_ws(hash_ws_bytes);
  const double hash_ms = best_ms(o.reps, [&] {
    kc::tree_hash_cuda_many(tptrs.data(), lens.data(), T, hash_ws.p, hash_ws_bytes, nullptr,
                            target_hash.data());
  });
  stages.push_back(stage_row("hash (tree, every target, one batch)", hash_ms, bf16_bytes));

  // The streams to pinned host memory, per tensor head | tail | lo | hi back to back.
  std::vector<uint64_t> host_off(T + 1, 0);
  uint64_t all_changed = 0;
  for (size_t t = 0; t < T; ++t) {
    host_off[t + 1] = host_off[t] + 3 * totals[t].changed + totals[t].tail_bytes;
    all_changed += totals[t].changed;
  }
  const uint64_t stream_bytes = host_off[T];
  Pinned host(stream_bytes);
  const double d2h_ms = best_ms(o.reps, [&] {
    for (size_t t = 0; t < T; ++t) {
      const uint64_t c = totals[t].changed, tb = totals[t].tail_bytes;
      if (c == 0) continue;
      uint8_t* h = host.p + host_off[t];
      ok(cudaMemcpyAsync(h, head.bytes() + off[t], c, cudaMemcpyDeviceToHost, nullptr), "D2H");
      if (tb)
        ok(cudaMemcpyAsync(h + c, tail.bytes() + tail_off[t], tb, cudaMemcpyDeviceToHost, nullptr), "D2H");
      ok(cudaMemcpyAsync(h + c + tb, lo.bytes() + off[t], c, cudaMemcpyDeviceToHost, nullptr), "D2H");
      ok(cudaMemcpyAsync(h + 2 * c + tb, hi.bytes() + off[t], c, cudaMemcpyDeviceToHost, nullptr), "D2H");
    }
  });
  stages.push_back(
      stage_row("device-to-host copy of the streams", d2h_ms, static_cast<double>(stream_bytes)));

  std::vector<std::vector<uint8_t> > streams(T);
  for (size_t t = 0; t < T; ++t) streams[t].assign(host.p + host_off[t], host.p + host_off[t + 1]);
  uint64_t compressed = 0;
  double entropy_ms = 1e30;
  for (int r = 0; r < o.reps; ++r) entropy_ms = std::min(entropy_ms, zstd_streams_ms(streams, &compressed));
  stages.push_back(
      stage_row("entropy (host zstd 3 of the streams)", entropy_ms, static_cast<double>(stream_bytes)));

  // Apply side: the streams back to the device (one copy per tensor), the scatter, the verify hash.
  Dev in(stream_bytes), undo(2 * all_changed + 2);
  const double h2d_ms = best_ms(o.reps, [&] {
    for (size_t t = 0; t < T; ++t)
      if (host_off[t + 1] > host_off[t])
        ok(cudaMemcpyAsync(in.bytes() + host_off[t], host.p + host_off[t], host_off[t + 1] - host_off[t],
                           cudaMemcpyHostToDevice, nullptr),
           "H2D");
  });
  stages.push_back(
      stage_row("host-to-device copy of the streams", h2d_ms, static_cast<double>(stream_bytes)));
  uint64_t max_changed = 0, max_index = 0;
  for (size_t t = 0; t < T; ++t) {
    max_changed = std::max(max_changed, totals[t].changed);
    max_index = std::max(max_index, totals[t].changed + totals[t].tail_bytes);
  }
  const size_t apply_ws_bytes = kc::apply_u16_cuda_workspace_bytes(max_changed, max_index);
  Dev apply_ws(apply_ws_bytes);
  bool apply_ok = true;
  const double apply_ms = best_ms(
      o.reps,
      [&] {
        uint64_t undo_at = 0;
        for (size_t t = 0; t < T; ++t) {
          const uint64_t c = totals[t].changed, tb = totals[t].tail_bytes;
          if (c == 0) continue;
          kc::ApplyStatus st;
          const uint8_t* index = in.bytes() + host_off[t];
          kc::apply_varint_u16_cuda(work.as<uint16_t>() + off[t], shapes[t].elements(), index, c + tb, c,
                                    index + c + tb, false, undo.as<uint16_t>() + undo_at, apply_ws.p,
                                    apply_ws_bytes, &st, nullptr);
          apply_ok = apply_ok && st.error == kc::kApplyOk;
          undo_at += c;
        }
      },
      [&] { ok(cudaMemcpy(work.p, prev.p, 2 * total, cudaMemcpyDeviceToDevice), "reset"); });
  stages.push_back(stage_row("apply (validate + scatter, per tensor)", apply_ms,
                             6.0 * static_cast<double>(all_changed) + static_cast<double>(stream_bytes)));
  const double verify_ms = best_ms(o.reps, [&] {
    kc::tree_hash_cuda_many(wptrs.data(), lens.data(), T, hash_ws.p, hash_ws_bytes, nullptr,
                            applied_hash.data());
  });
  stages.push_back(stage_row("verify (tree hash of the weights)", verify_ms, bf16_bytes));

  return {{"available", true},
          {"device", prop.name},
          {"scale", o.scale},
          {"tensors", T},
          {"elements", total},
          {"bytes_bf16", bf16_bytes},
          {"changed", all_changed},
          {"changed_pct",
           100.0 * static_cast<double>(all_changed) / static_cast<double>(std::max<uint64_t>(1, total))},
          {"stream_bytes", stream_bytes},
          {"compressed_bytes", compressed},
          {"d2d_copy_bf16_ms", copy_ms},
          {"d2d_copy_gbps", 2.0 * bf16_bytes / copy_ms / 1e6},
          {"stages", stages},
          {"extract_ms", emit_ms + hash_ms + d2h_ms + entropy_ms},
          {"apply_verify_ms", h2d_ms + apply_ms + verify_ms},
          {"targets_ms", {{"extract", 20.0}, {"apply_verify", 10.0}}},
          {"matches", apply_ok && applied_hash == target_hash}};
}
#endif

}  // namespace pulse::bench
