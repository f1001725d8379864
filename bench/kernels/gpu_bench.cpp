// The GPU half of `pulse bench kernels` (bench/kernels/kernels_report.h): each CUDA kernel timed with CUDA
// events (best of the repetitions) against a device-to-device cudaMemcpy measured in the same run, its
// output compared with the CPU reference (kernels/bf16.h, diff_emit16_portable, loco_gate_portable,
// XXH3_64bits). Bandwidth counts bytes read + written, for the kernels and for the copy alike.
#include "bench/kernels/kernels_report.h"

#ifdef PULSE_CUDA
#include <cuda_runtime_api.h>

#include <xxhash.h>
#include "kernels/cuda_device_buffer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/diff_emit16.h"
#include "kernels/diff_emit16_cuda.h"
#include "kernels/loco_gate.h"
#include "kernels/loco_gate_cuda.h"
#include "kernels/patch_apply_cuda.h"
#include "kernels/tree_hash.h"
#include "kernels/tree_hash_cuda.h"
#include "kernels/xxh3_cuda.h"
#endif

namespace pulse::bench {

#ifndef PULSE_CUDA
nlohmann::json run_gpu_kernels_bench(const KernelsBenchOptions&) {
  return {{"available", false}, {"reason", "this pulse was built without CUDA (PULSE_CUDA=OFF or no nvcc)"}};
}
#else
namespace {

void ok(cudaError_t e, const char* what) {
  pulse::kernels::cuda::check(e, "bench kernels", what);
}
using Dev = pulse::kernels::cuda::DeviceBuffer;

/// Best seconds of `reps` runs of fn on the default stream, `reset` run untimed before each.
double best_of(int reps, const std::function<void()>& fn, const std::function<void()>& reset = {}) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up (module load, allocations)
    if (reset) reset();
    ok(cudaEventRecord(a, nullptr), "record");
    fn();
    ok(cudaEventRecord(b, nullptr), "record");
    ok(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
    if (r) best = std::min(best, 1e-3 * ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

template <typename T>
std::vector<T> down(const void* p, size_t count) {
  std::vector<T> v(count);
  if (count) ok(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), "D2H");
  return v;
}

nlohmann::json kernel_row(const std::string& name, double changed_pct, double seconds, double bytes,
                          double copy_gbps, bool matches) {
  const double gbps = bytes / seconds / 1e9;
  return {{"name", name},
          {"changed_pct", changed_pct},
          {"ms", 1e3 * seconds},
          {"bytes", bytes},
          {"gbps", gbps},
          {"copy_gbps", copy_gbps},
          {"ratio_to_copy", gbps / copy_gbps},
          {"matches_cpu", matches}};
}

}  // namespace

nlohmann::json run_gpu_kernels_bench(const KernelsBenchOptions& o) {
  namespace k = pulse::kernels;
  namespace kc = pulse::kernels::cuda;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return {{"available", false},
            {"reason", e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)
                                        : "no CUDA device"}};
  cudaDeviceProp prop;
  ok(cudaGetDeviceProperties(&prop, 0), "properties");
  const uint64_t n = o.elements;
  nlohmann::json out{{"available", true}, {"device", prop.name}, {"elements", n}};

  // The same-run copy: 4n bytes (the masters) device to device; read + write counted.
  Dev copy_src(4 * n), copy_dst(4 * n);
  ok(cudaMemset(copy_src.p, 1, 4 * n), "memset");
  const double t_copy = best_of(o.reps, [&] {
    ok(cudaMemcpyAsync(copy_dst.p, copy_src.p, 4 * n, cudaMemcpyDeviceToDevice, nullptr), "copy");
  });
  const double copy_gbps = 2.0 * 4 * n / t_copy / 1e9;
  const double t_copy16 = best_of(o.reps, [&] {
    ok(cudaMemcpyAsync(copy_dst.p, copy_src.p, 2 * n, cudaMemcpyDeviceToDevice, nullptr), "copy");
  });
  out["d2d_copy_gbps"] = copy_gbps;
  out["d2d_copy_bf16_tensor_ms"] = 1e3 * t_copy16;
  nlohmann::json rows = nlohmann::json::array();

  std::mt19937_64 rng(1);
  std::normal_distribution<float> weight(0.0f, 0.02f);
  Dev master(4 * n), prev(2 * n), target(2 * n), head(n), tail(kc::emit16_cuda_tail_room(n)), lo(n), hi(n);
  const size_t ws_bytes = std::max({kc::emit16_cuda_workspace_bytes(n), kc::loco_gate_cuda_workspace_bytes(n),
                                    kc::xxh3_cuda_workspace_bytes(2 * n)});
  Dev ws(ws_bytes);
  for (double p : {0.07, 0.01}) {
    std::bernoulli_distribution flip(p);
    std::vector<uint16_t> h_prev(n), h_target(n);
    std::vector<float> h_master(n);
    for (uint64_t i = 0; i < n; ++i) {
      h_prev[i] = k::fp32_to_bf16_rne(weight(rng));
      uint32_t bits = static_cast<uint32_t>(h_prev[i]) << 16 | static_cast<uint32_t>(rng() & 0x7fffu);
      if (flip(rng)) bits += 0x10000u;  // one BF16 ULP up
      std::memcpy(&h_master[i], &bits, 4);
    }
    k::fp32_to_bf16_rne(h_master.data(), h_target.data(), n);
    // CPU reference streams.
    std::vector<uint8_t> rh(k::emit16_room(n)), rt(k::emit16_tail_room(n) + 16), rl(k::emit16_room(n)),
        rhi(k::emit16_room(n));
    k::Emit16Cursor c{rh.data(), rt.data(), rl.data(), rhi.data(), 0};
    const uint64_t changed =
        k::diff_emit16_portable(reinterpret_cast<const uint8_t*>(h_prev.data()),
                                reinterpret_cast<const uint8_t*>(h_target.data()), 0, n, false, c);
    const uint64_t tail_bytes = static_cast<uint64_t>(c.tail - rt.data());
    ok(cudaMemcpy(master.p, h_master.data(), 4 * n, cudaMemcpyHostToDevice), "H2D");
    ok(cudaMemcpy(prev.p, h_prev.data(), 2 * n, cudaMemcpyHostToDevice), "H2D");
    const kc::Emit16Streams streams{head.as<uint8_t>(), tail.as<uint8_t>(), lo.as<uint8_t>(),
                                    hi.as<uint8_t>()};
    const double pct = 100.0 * static_cast<double>(changed) / static_cast<double>(n);
    auto streams_match = [&](const kc::Emit16Totals& t) {
      return t.changed == changed && t.tail_bytes == tail_bytes &&
             down<uint8_t>(head.p, changed) ==
                 std::vector<uint8_t>(rh.begin(), rh.begin() + static_cast<long>(changed)) &&
             down<uint8_t>(tail.p, tail_bytes) ==
                 std::vector<uint8_t>(rt.begin(), rt.begin() + static_cast<long>(tail_bytes)) &&
             down<uint8_t>(lo.p, changed) ==
                 std::vector<uint8_t>(rl.begin(), rl.begin() + static_cast<long>(changed)) &&
             down<uint8_t>(hi.p, changed) ==
                 std::vector<uint8_t>(rhi.begin(), rhi.begin() + static_cast<long>(changed));
    };
    const double stream_bytes = 3.0 * changed + tail_bytes;

    kc::Emit16Totals totals;
    double t = best_of(o.reps, [&] {
      kc::cast_diff_emit16_cuda(master.as<float>(), prev.as<uint16_t>(), target.as<uint16_t>(), n, false,
                                streams, ws.p, ws_bytes, &totals, nullptr);
    });
    bool match = streams_match(totals) && down<uint16_t>(target.p, n) == h_target;
    rows.push_back(
        kernel_row("cast_diff_emit16 (fp32 masters)", pct, t, 8.0 * n + stream_bytes, copy_gbps, match));

    t = best_of(o.reps, [&] {
      kc::cast_diff_emit16_cuda(nullptr, prev.as<uint16_t>(), target.as<uint16_t>(), n, false, streams, ws.p,
                                ws_bytes, &totals, nullptr);
    });
    match = streams_match(totals);
    rows.push_back(
        kernel_row("diff_emit16 (bf16 vs bf16)", pct, t, 4.0 * n + stream_bytes, copy_gbps, match));

    // Apply the CPU-encoded streams to prev on the device.
    std::vector<uint8_t> index(rh.begin(), rh.begin() + static_cast<long>(changed));
    index.insert(index.end(), rt.begin(), rt.begin() + static_cast<long>(tail_bytes));
    std::vector<uint8_t> values(rl.begin(), rl.begin() + static_cast<long>(changed));
    values.insert(values.end(), rhi.begin(), rhi.begin() + static_cast<long>(changed));
    Dev d_index(index.size()), d_values(values.size()), undo(2 * changed);
    ok(cudaMemcpy(d_index.p, index.data(), index.size(), cudaMemcpyHostToDevice), "H2D");
    ok(cudaMemcpy(d_values.p, values.data(), values.size(), cudaMemcpyHostToDevice), "H2D");
    kc::ApplyStatus status;
    const size_t apply_ws_bytes = kc::apply_u16_cuda_workspace_bytes(changed, index.size());
    Dev apply_ws(apply_ws_bytes);
    t = best_of(
        o.reps,
        [&] {
          kc::apply_varint_u16_cuda(target.as<uint16_t>(), n, d_index.as<uint8_t>(), index.size(), changed,
                                    d_values.as<uint8_t>(), false, undo.as<uint16_t>(), apply_ws.p,
                                    apply_ws_bytes, &status, nullptr);
        },
        [&] { ok(cudaMemcpy(target.p, prev.p, 2 * n, cudaMemcpyDeviceToDevice), "reset"); });
    match = status.error == kc::kApplyOk && down<uint16_t>(target.p, n) == h_target;
    auto row =
        kernel_row("apply_varint_u16 (validate + scatter)", pct, t,
                   static_cast<double>(index.size() + values.size()) + 6.0 * changed, copy_gbps, match);
    row["tensor_ratio_to_copy"] = t_copy16 / t;  // as the CPU decode metric: copy of the tensor vs apply
    rows.push_back(row);

    const uint64_t want_hash = XXH3_64bits(h_target.data(), 2 * n);
    uint64_t got_hash = 0;
    if (p == 0.07) {
      t = best_of(o.reps, [&] { got_hash = kc::xxh3_64_cuda(target.p, 2 * n, ws.p, ws_bytes, nullptr); });
      rows.push_back(kernel_row("xxh3_64 (bf16 tensor)", 0.0, t, 2.0 * n, copy_gbps, got_hash == want_hash));

      // The same bytes as a model's tensors: kPieces consecutive pieces, hashed one call each (a stream
      // synchronization per piece, the chains one after another) and in one xxh3_64_cuda_many batch.
      constexpr size_t kPieces = 256;
      std::vector<const void*> ptrs;
      std::vector<uint64_t> lens, want_pieces, got_pieces(kPieces);
      for (size_t i = 0; i < kPieces; ++i) {
        const uint64_t a = n * i / kPieces, b = n * (i + 1) / kPieces;
        ptrs.push_back(target.as<uint16_t>() + a);
        lens.push_back(2 * (b - a));
        want_pieces.push_back(XXH3_64bits(h_target.data() + a, 2 * (b - a)));
      }
      t = best_of(o.reps, [&] {
        for (size_t i = 0; i < kPieces; ++i)
          got_pieces[i] = kc::xxh3_64_cuda(ptrs[i], lens[i], ws.p, ws_bytes, nullptr);
      });
      rows.push_back(kernel_row("xxh3_64 (256 tensors, a call each)", 0.0, t, 2.0 * n, copy_gbps,
                                got_pieces == want_pieces));
      const size_t many_bytes = kc::xxh3_cuda_many_workspace_bytes(lens.data(), kPieces);
      Dev many_ws(many_bytes);
      std::fill(got_pieces.begin(), got_pieces.end(), 0);
      t = best_of(o.reps, [&] {
        kc::xxh3_64_cuda_many(ptrs.data(), lens.data(), kPieces, many_ws.p, many_bytes, nullptr,
                              got_pieces.data());
      });
      rows.push_back(kernel_row("xxh3_64_many (256 tensors, one batch)", 0.0, t, 2.0 * n, copy_gbps,
                                got_pieces == want_pieces));

      // The tree hash (format 3's tensor hash, kernels/tree_hash_cuda.h): the whole tensor, and the 256
      // pieces in one batch, against the CPU's kernels::tree_hash64.
      uint64_t one_len = 2 * n, got_tree = 0;
      const void* one_ptr = target.p;
      const size_t tree_one_bytes = kc::tree_hash_cuda_workspace_bytes(&one_len, 1);
      Dev tree_ws(std::max(tree_one_bytes, kc::tree_hash_cuda_workspace_bytes(lens.data(), kPieces)));
      t = best_of(o.reps, [&] {
        kc::tree_hash_cuda_many(&one_ptr, &one_len, 1, tree_ws.p, tree_one_bytes, nullptr, &got_tree);
      });
      rows.push_back(kernel_row("tree_hash (bf16 tensor)", 0.0, t, 2.0 * n, copy_gbps,
                                got_tree == k::tree_hash64(h_target.data(), 2 * n)));
      std::vector<uint64_t> want_tree(kPieces);
      for (size_t i = 0; i < kPieces; ++i)
        want_tree[i] = k::tree_hash64(h_target.data() + n * i / kPieces, lens[i]);
      const size_t tree_many_bytes = kc::tree_hash_cuda_workspace_bytes(lens.data(), kPieces);
      t = best_of(o.reps, [&] {
        kc::tree_hash_cuda_many(ptrs.data(), lens.data(), kPieces, tree_ws.p, tree_many_bytes, nullptr,
                                got_pieces.data());
      });
      rows.push_back(kernel_row("tree_hash_many (256 tensors, one batch)", 0.0, t, 2.0 * n, copy_gbps,
                                got_pieces == want_tree));
    }
  }

  // The PULSELoCo gate on a synthetic round (bench/kernels_bench.cpp's data); not at --gpu-elements sizes
  // (its host reference would take minutes there).
  if (n <= (uint64_t{1} << 28)) {
    std::normal_distribution<float> delta(0.0f, 2e-6f);
    std::vector<float> g(n), l(n), r(n, 0.0f), rv(n), vv(n);
    std::vector<uint32_t> iv(n);
    for (uint64_t i = 0; i < n; ++i) {
      g[i] = weight(rng);
      l[i] = g[i] + delta(rng);
    }
    const k::LocoGateResult want =
        k::loco_gate_portable(g.data(), l.data(), rv.data(), n, false, iv.data(), vv.data());
    Dev dg(4 * n), dl(4 * n), dr(4 * n), di(4 * n), dv(4 * n);
    ok(cudaMemcpy(dg.p, g.data(), 4 * n, cudaMemcpyHostToDevice), "H2D");
    ok(cudaMemcpy(dl.p, l.data(), 4 * n, cudaMemcpyHostToDevice), "H2D");
    k::LocoGateResult got;
    const double t = best_of(
        o.reps,
        [&] {
          got = kc::loco_gate_cuda(dg.as<float>(), dl.as<float>(), dr.as<float>(), n, false,
                                   di.as<uint32_t>(), dv.as<float>(), 0, ws.p, ws_bytes, nullptr);
        },
        [&] { ok(cudaMemset(dr.p, 0, 4 * n), "memset"); });
    iv.resize(want.fired);
    vv.resize(want.fired);
    std::vector<float> gv = down<float>(dv.p, got.fired), gr = down<float>(dr.p, n);
    const bool match = got.fired == want.fired && got.nonfinite == want.nonfinite &&
                       down<uint32_t>(di.p, got.fired) == iv &&
                       std::memcmp(gv.data(), vv.data(), 4 * vv.size()) == 0 &&
                       std::memcmp(gr.data(), rv.data(), 4 * n) == 0;
    rows.push_back(kernel_row("loco_gate", 100.0 * static_cast<double>(want.fired) / static_cast<double>(n),
                              t, 16.0 * n + 8.0 * static_cast<double>(want.fired), copy_gbps, match));
  }
  out["kernels"] = rows;
  return out;
}
#endif

}  // namespace pulse::bench
