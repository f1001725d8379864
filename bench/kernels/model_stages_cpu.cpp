// bench/kernels/model_stages.h, the CPU part; and the zstd entropy stage both parts share.
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/kernels/model_shapes.h"
#include "bench/kernels/model_stages.h"
#include "bench/kernels/model_stages_util.h"
#include "kernels/apply_kernels.h"
#include "kernels/bf16.h"
#include "kernels/diff_emit16.h"
#include "kernels/splitmix64.h"
#include "kernels/tree_hash.h"

namespace pulse::bench {

void model_pattern(uint64_t count, double changed, std::vector<float>& master, std::vector<uint16_t>& prev) {
  master.resize(count);
  prev.resize(count);
  kernels::SplitMix64 gen{0x5eed};
  const auto threshold = static_cast<uint64_t>(changed * 18446744073709551615.0);
  for (uint64_t i = 0; i < count; ++i) {
    // A weight of magnitude ~0.01-0.03 (either sign): its BF16 pattern, then a master within its ULP.
    const uint64_t r = gen.next();
    const uint32_t exponent = 120 + static_cast<uint32_t>(r % 2);
    const uint32_t bf16 = ((static_cast<uint32_t>(r >> 8) & 1u) << 15) | (exponent << 7) |
                          (static_cast<uint32_t>(r >> 16) & 0x7fu);
    prev[i] = static_cast<uint16_t>(bf16);
    uint32_t bits = bf16 << 16 | static_cast<uint32_t>((r >> 24) & 0x7fffu);
    if (gen.next() < threshold) bits += 0x10000u;  // one BF16 ULP away
    std::memcpy(&master[i], &bits, 4);
  }
}

double zstd_streams_ms(const std::vector<std::vector<uint8_t>>& streams, uint64_t* compressed) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  std::vector<uint8_t> out;
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& s : streams) {
    out.resize(ZSTD_compressBound(s.size()));
    const size_t n = ZSTD_compressCCtx(cctx, out.data(), out.size(), s.data(), s.size(), 3);
    total += ZSTD_isError(n) ? s.size() : n;
  }
  const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ZSTD_freeCCtx(cctx);
  if (compressed) *compressed = total;
  return ms;
}

nlohmann::json stage_row(const char* stage, double ms, double bytes) {
  return {{"stage", stage}, {"ms", ms}, {"bytes", bytes}, {"gbps", ms > 0 ? bytes / ms / 1e6 : 0.0}};
}

namespace {

double best_ms(int reps, const std::function<void()>& fn, const std::function<void()>& reset = {}) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    if (reset) reset();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

nlohmann::json run_model_stages_cpu(const ModelStagesOptions& o) {
  namespace k = pulse::kernels;
  const std::vector<ShapedTensor> shapes = qwen25_7b_shapes(o.scale);
  std::vector<float> pm;
  std::vector<uint16_t> pp;
  uint64_t total = 0;
  for (const auto& s : shapes) total += s.elements();
  model_pattern(std::min<uint64_t>(o.pattern, total), o.changed, pm, pp);
  const size_t T = shapes.size();
  std::vector<std::vector<float>> master(T);
  std::vector<std::vector<uint16_t>> prev(T), target(T), work(T);
  for (size_t t = 0; t < T; ++t) {
    const uint64_t n = shapes[t].elements();
    master[t].resize(n);
    prev[t].resize(n);
    for (uint64_t i = 0; i < n; i += pm.size()) {
      const uint64_t c = std::min<uint64_t>(pm.size(), n - i);
      std::memcpy(master[t].data() + i, pm.data(), 4 * c);
      std::memcpy(prev[t].data() + i, pp.data(), 2 * c);
    }
    target[t].resize(n);
    work[t].resize(n);
  }
  const double bf16_bytes = 2.0 * static_cast<double>(total);
  nlohmann::json stages = nlohmann::json::array();

  const double cast_ms = best_ms(o.reps, [&] {
    for (size_t t = 0; t < T; ++t) k::fp32_to_bf16_rne(master[t].data(), target[t].data(), target[t].size());
  });
  stages.push_back(stage_row("cast (fp32 masters -> bf16)", cast_ms, 3.0 * bf16_bytes));

  // diff + compaction into the four streams (head, tail, lo, hi), laid out back to back per tensor.
  std::vector<std::vector<uint8_t>> head(T), tail(T), lo(T), hi(T), streams(T);
  std::vector<uint64_t> changed(T, 0), tail_bytes(T, 0);
  for (size_t t = 0; t < T; ++t) {
    const uint64_t n = shapes[t].elements();
    head[t].resize(k::emit16_room(n));
    lo[t].resize(k::emit16_room(n));
    hi[t].resize(k::emit16_room(n));
    tail[t].resize(k::emit16_tail_room(n) + 16);
  }
  const double diff_ms = best_ms(o.reps, [&] {
    for (size_t t = 0; t < T; ++t) {
      k::Emit16Cursor c{head[t].data(), tail[t].data(), lo[t].data(), hi[t].data(), 0, 0};
      changed[t] =
          k::diff_emit16(reinterpret_cast<const uint8_t*>(prev[t].data()),
                         reinterpret_cast<const uint8_t*>(target[t].data()), 0, target[t].size(), false, c);
      tail_bytes[t] = static_cast<uint64_t>(c.tail - tail[t].data());
    }
  });
  stages.push_back(stage_row("diff + compaction", diff_ms, 2.0 * bf16_bytes));
  uint64_t all_changed = 0, stream_bytes = 0;
  for (size_t t = 0; t < T; ++t) {
    auto& s = streams[t];
    s.assign(head[t].begin(), head[t].begin() + static_cast<long>(changed[t]));
    s.insert(s.end(), tail[t].begin(), tail[t].begin() + static_cast<long>(tail_bytes[t]));
    s.insert(s.end(), lo[t].begin(), lo[t].begin() + static_cast<long>(changed[t]));
    s.insert(s.end(), hi[t].begin(), hi[t].begin() + static_cast<long>(changed[t]));
    all_changed += changed[t];
    stream_bytes += s.size();
  }

  std::vector<uint64_t> target_hash(T), applied_hash(T);
  const double hash_ms = best_ms(o.reps, [&] {
    for (size_t t = 0; t < T; ++t) target_hash[t] = k::tree_hash64(target[t].data(), 2 * target[t].size());
  });
  stages.push_back(stage_row("hash (tree, every target)", hash_ms, bf16_bytes));

  uint64_t compressed = 0;
  double entropy_ms = 1e30;
  for (int r = 0; r < o.reps; ++r) entropy_ms = std::min(entropy_ms, zstd_streams_ms(streams, &compressed));
  stages.push_back(
      stage_row("entropy (zstd 3 of the streams)", entropy_ms, static_cast<double>(stream_bytes)));

  const kernels::BlockSink no_sink{[](void*, const uint8_t*, uint64_t) {}, nullptr};
  std::vector<std::vector<uint8_t>> undo(T);
  for (size_t t = 0; t < T; ++t) undo[t].resize(2 * changed[t] + 2);
  const double apply_ms = best_ms(
      o.reps,
      [&] {
        for (size_t t = 0; t < T; ++t)
          k::apply_varint_u16(reinterpret_cast<uint8_t*>(work[t].data()), work[t].size(), streams[t].data(),
                              changed[t] + tail_bytes[t], changed[t], false, undo[t].data(), no_sink);
      },
      [&] {
        for (size_t t = 0; t < T; ++t) std::memcpy(work[t].data(), prev[t].data(), 2 * prev[t].size());
      });
  stages.push_back(stage_row("apply (scatter the changes)", apply_ms,
                             6.0 * static_cast<double>(all_changed) + static_cast<double>(stream_bytes)));
  const double verify_ms = best_ms(o.reps, [&] {
    for (size_t t = 0; t < T; ++t) applied_hash[t] = k::tree_hash64(work[t].data(), 2 * work[t].size());
  });
  stages.push_back(stage_row("verify (tree hash of the weights)", verify_ms, bf16_bytes));
  bool matches = applied_hash == target_hash;
  for (size_t t = 0; t < T && matches; ++t) matches = work[t] == target[t];

  return {{"device", "cpu, 1 thread"},
          {"scale", o.scale},
          {"tensors", T},
          {"elements", total},
          {"bytes_bf16", bf16_bytes},
          {"changed", all_changed},
          {"changed_pct",
           100.0 * static_cast<double>(all_changed) / static_cast<double>(std::max<uint64_t>(1, total))},
          {"stream_bytes", stream_bytes},
          {"compressed_bytes", compressed},
          {"stages", stages},
          {"extract_ms", cast_ms + diff_ms + hash_ms + entropy_ms},
          {"apply_verify_ms", apply_ms + verify_ms},
          {"matches", matches}};
}

}  // namespace pulse::bench
