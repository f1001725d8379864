// The CPU half of `pulse bench kernels` (bench/kernels/kernels_report.h), measured as bench/kernels_bench.cpp
// does: one thread, a memcpy of the same input bytes right before every repetition, best of each.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <xxhash.h>

#include "bench/kernels/kernels_report.h"
#include "bench/kernels/model_stages.h"
#include "kernels/diff_emit16.h"
#include "kernels/loco_gate.h"
#include "kernels/xxh3_long.h"

namespace pulse::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json row(const char* variant, double changed_pct, double best, double best_copy, double bytes) {
  return {{"variant", variant},
          {"changed_pct", changed_pct},
          {"ms", 1e3 * best},
          {"gbps", bytes / best / 1e9},
          {"memcpy_gbps", bytes / best_copy / 1e9},
          {"ratio", best_copy / best}};
}

nlohmann::json bench_emit(uint64_t n, int reps) {
  namespace k = pulse::kernels;
  std::mt19937_64 rng(1);
  std::vector<uint16_t> a(n), b(n), copy(n);
  std::vector<uint8_t> head(k::emit16_room(n)), tail(k::emit16_tail_room(n) + 9 * (n / 32768 + 2)),
      lo(k::emit16_room(n)), hi(k::emit16_room(n));
  nlohmann::json rows = nlohmann::json::array();
  for (double p : {0.07, 0.01}) {
    std::bernoulli_distribution flip(p);
    for (uint64_t i = 0; i < n; ++i) {
      a[i] = static_cast<uint16_t>(rng());
      b[i] = flip(rng) ? static_cast<uint16_t>(a[i] + (rng() % 2 ? 1 : -1)) : a[i];
    }
    const auto* pa = reinterpret_cast<const uint8_t*>(a.data());
    const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
    for (const char* isa : {"avx512", "avx2", "portable"}) {
      if (!k::diff_emit16_force(isa)) {
        rows.push_back({{"variant", isa}, {"skipped", "this CPU cannot run it"}});
        continue;
      }
      const bool hashed = k::diff_emit16_fuses_hash() && 2 * n >= k::kXxh3LongMinBytes;
      double best = 1e30, best_copy = 1e30;
      uint64_t changes = 0;
      for (int rep = 0; rep < reps; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(copy.data(), b.data(), 2 * n);
        best_copy = std::min(best_copy, seconds_since(t0));
        k::Xxh3LongState sa, sb;
        k::xxh3_long_init(sa);
        k::xxh3_long_init(sb);
        k::Emit16Hash hash{&sa, &sb, k::xxh3_long_block_bytes(2 * n), k::xxh3_default_secret()};
        k::Emit16Cursor c{head.data(), tail.data(), lo.data(), hi.data(), 0};
        t0 = std::chrono::steady_clock::now();
        changes = 0;
        for (uint64_t start = 0; start < n; start += 32768)
          changes += k::diff_emit16(pa + 2 * start, pb + 2 * start, start,
                                    std::min<uint64_t>(32768, n - start), false, c, hashed ? &hash : nullptr);
        best = std::min(best, seconds_since(t0));
      }
      auto r =
          row(isa, 100.0 * static_cast<double>(changes) / static_cast<double>(n), best, best_copy, 2.0 * n);
      r["hash"] = hashed ? "both" : "no";
      rows.push_back(r);
    }
  }
  k::diff_emit16_force(nullptr);
  return rows;
}

nlohmann::json bench_gate(uint64_t n, int reps) {
  namespace k = pulse::kernels;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> weight(0.0f, 0.02f), delta(0.0f, 2e-6f);
  std::vector<float> g(n), l(n), r(n, 0.0f), value(n), cg(n), cl(n), cr(n);
  std::vector<uint32_t> index(n);
  for (uint64_t i = 0; i < n; ++i) {
    g[i] = weight(rng);
    l[i] = g[i] + delta(rng);
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (!k::loco_gate_force(isa)) {
      rows.push_back({{"variant", isa}, {"skipped", "this CPU cannot run it"}});
      continue;
    }
    double best = 1e30, best_copy = 1e30;
    uint64_t fired = 0;
    for (int rep = 0; rep < reps; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      std::memcpy(cg.data(), g.data(), 4 * n);
      std::memcpy(cl.data(), l.data(), 4 * n);
      std::memcpy(cr.data(), r.data(), 4 * n);
      best_copy = std::min(best_copy, seconds_since(t0));
      std::fill(r.begin(), r.end(), 0.0f);
      t0 = std::chrono::steady_clock::now();
      fired = k::loco_gate(g.data(), l.data(), r.data(), n, false, index.data(), value.data()).fired;
      best = std::min(best, seconds_since(t0));
    }
    rows.push_back(
        row(isa, 100.0 * static_cast<double>(fired) / static_cast<double>(n), best, best_copy, 12.0 * n));
  }
  k::loco_gate_force(nullptr);
  return rows;
}

/// XXH3-64 per xxh3_long variant (and libxxhash's XXH3_64bits, as this build links it) vs memcpy of the
/// same bytes: over the whole 2 n-byte input (memory), and over one 64 KiB block hashed again and again
/// (in cache: the apply pass hashes its 64 KiB blocks right after writing them).
nlohmann::json bench_xxh3(uint64_t n, int reps) {
  namespace k = pulse::kernels;
  std::mt19937_64 rng(3);
  std::vector<uint8_t> src(2 * n), dst(2 * n);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  constexpr uint64_t kBlock = 64 << 10;
  const uint64_t block_reps = std::max<uint64_t>(1, (uint64_t{16} << 20) / kBlock);  // 16 MiB per timing
  nlohmann::json rows = nlohmann::json::array();
  const uint64_t want = XXH3_64bits(src.data(), src.size());
  for (const char* isa : {"avx512", "avx2", "portable", "libxxhash"}) {
    const bool lib = std::strcmp(isa, "libxxhash") == 0;
    if (!lib && !k::xxh3_long_force(isa)) {
      rows.push_back({{"variant", isa}, {"skipped", "this CPU cannot run it"}});
      continue;
    }
    const auto hash = [&](const uint8_t* p, uint64_t len) {
      return lib ? XXH3_64bits(p, len) : k::xxh3_64bits(p, len);
    };
    for (bool cached : {false, true}) {
      const uint64_t len = cached ? std::min<uint64_t>(kBlock, src.size()) : src.size();
      const uint64_t times = cached ? block_reps : 1;
      double best = 1e30, best_copy = 1e30;
      uint64_t got = 0;
      for (int rep = 0; rep < reps; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        for (uint64_t i = 0; i < times; ++i) std::memcpy(dst.data(), src.data() + (i & 1), len);
        best_copy = std::min(best_copy, seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
        for (uint64_t i = 0; i < times; ++i) got += hash(src.data() + (i & 1), len);
        best = std::min(best, seconds_since(t0));
      }
      auto r = row(isa, 0.0, best, best_copy, static_cast<double>(len * times));
      r.erase("changed_pct");  // a hash has no changed elements: the table prints "-"
      r["variant"] = std::string(isa) + (cached ? " (64 KiB, cached)" : " (memory)");
      if (!cached) r["matches_libxxhash"] = hash(src.data(), src.size()) == want;
      (void)got;
      rows.push_back(r);
    }
  }
  k::xxh3_long_force(nullptr);
  return rows;
}

}  // namespace

nlohmann::json run_cpu_kernels_bench(const KernelsBenchOptions& o) {
  return {{"diff_emit16", bench_emit(o.elements, o.reps)},
          {"diff_emit16_default", pulse::kernels::diff_emit16_isa()},
          {"loco_gate", bench_gate(std::min<uint64_t>(o.elements, uint64_t{1} << 32), o.reps)},
          {"loco_gate_default", pulse::kernels::loco_gate_isa()},
          {"xxh3_long", bench_xxh3(o.elements, o.reps)},
          {"xxh3_long_default", pulse::kernels::xxh3_long_isa()}};
}

namespace {

/// The model stages of run_kernels_bench, one block per device.
std::string model_stages_table(const nlohmann::json& model) {
  std::string s;
  char line[256];
  for (const char* part : {"cpu", "gpu"}) {
    const auto& m = model[part];
    if (m.contains("skipped") || !m.value("available", true)) {
      s += std::string("\nmodel stages, ") + part + ": not run (" +
           m.value("reason", std::string("skipped")) + ")\n";
      continue;
    }
    std::snprintf(
        line, sizeof line,
        "\n%s stages on %s (scale 1/%d): %llu tensors, %llu elements, %.3f%% changed, streams %llu B "
        "(zstd %llu B)%s\n",
        model.value("name", std::string("?")).c_str(), m.value("device", std::string("?")).c_str(),
        m.value("scale", 1), static_cast<unsigned long long>(m.value("tensors", 0ull)),
        static_cast<unsigned long long>(m.value("elements", 0ull)), m.value("changed_pct", 0.0),
        static_cast<unsigned long long>(m.value("stream_bytes", 0ull)),
        static_cast<unsigned long long>(m.value("compressed_bytes", 0ull)),
        m.value("matches", false) ? "" : "  APPLIED != TARGET");
    s += line;
    for (const auto& x : m["stages"]) {
      std::snprintf(line, sizeof line, "  %-42s %10.3f ms %10.2f GB/s\n",
                    x.value("stage", std::string("?")).c_str(), x.value("ms", 0.0), x.value("gbps", 0.0));
      s += line;
    }
    std::snprintf(line, sizeof line, "  extract + encode %.3f ms, apply + verify %.3f ms\n",
                  m.value("extract_ms", 0.0), m.value("apply_verify_ms", 0.0));
    s += line;
  }
  return s;
}

}  // namespace

nlohmann::json run_kernels_bench(const KernelsBenchOptions& o) {
  if (!o.model.empty() && o.model != "qwen2.5-7b")
    throw std::invalid_argument("unknown model '" + o.model + "' (known: qwen2.5-7b)");
  nlohmann::json out{{"elements", o.elements}, {"reps", o.reps}};
  out["cpu"] = o.cpu ? run_cpu_kernels_bench(o) : nlohmann::json{{"skipped", "--no-cpu"}};
  out["gpu"] =
      o.gpu ? run_gpu_kernels_bench(o) : nlohmann::json{{"available", false}, {"reason", "--no-gpu"}};
  if (o.gpu && o.gpu_elements) {
    KernelsBenchOptions large = o;
    large.elements = o.gpu_elements;
    out["gpu_large"] = run_gpu_kernels_bench(large);
  }
  if (!o.model.empty()) {
    ModelStagesOptions m;
    m.scale = o.model_scale;
    m.changed = o.model_changed;
    m.reps = o.reps;
    out["model"] = {{"name", o.model},
                    {"cpu", o.model_cpu ? run_model_stages_cpu(m) : nlohmann::json{{"skipped", true}}},
                    {"gpu", o.gpu ? run_model_stages_gpu(m)
                                  : nlohmann::json{{"available", false}, {"reason", "--no-gpu"}}}};
  }
  return out;
}

std::string kernels_bench_table(const nlohmann::json& r) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "pulse bench kernels: %llu elements, best of %d\n",
                static_cast<unsigned long long>(r.value("elements", 0ull)), r.value("reps", 0));
  s += line;
  auto rows = [&](const char* title, const nlohmann::json& list) {
    s += std::string("\n") + title + "\n";
    std::snprintf(line, sizeof line, "%-28s %8s %9s %9s %11s %7s\n", "kernel / variant", "changed", "ms",
                  "GB/s", "copy GB/s", "ratio");
    s += line;
    for (const auto& x : list) {
      if (x.contains("skipped")) {
        s += "  " + x.value("variant", x.value("name", std::string("?"))) + ": skipped (" +
             x["skipped"].get<std::string>() + ")\n";
        continue;
      }
      const std::string name = x.value("variant", x.value("name", std::string("?")));
      const double copy =
          x.contains("memcpy_gbps") ? x["memcpy_gbps"].get<double>() : x.value("copy_gbps", 0.0);
      const double ratio = x.contains("ratio") ? x["ratio"].get<double>() : x.value("ratio_to_copy", 0.0);
      char changed[16] = "-";
      if (x.contains("changed_pct"))
        std::snprintf(changed, sizeof changed, "%.2f%%", x["changed_pct"].get<double>());
      std::snprintf(line, sizeof line, "%-28s %8s %9.3f %9.2f %11.2f %7.2f%s\n", name.c_str(), changed,
                    x.value("ms", 0.0), x.value("gbps", 0.0), copy, ratio,
                    x.contains("matches_cpu") ? (x["matches_cpu"].get<bool>() ? "  = cpu" : "  != CPU")
                    : x.contains("matches_libxxhash")
                        ? (x["matches_libxxhash"].get<bool>() ? "  = libxxhash" : "  != LIBXXHASH")
                        : "");
      s += line;
    }
  };
  if (r["cpu"].contains("diff_emit16")) {
    rows("CPU diff_emit16 (1 thread, GB/s of the target, vs memcpy of it)", r["cpu"]["diff_emit16"]);
    rows("CPU loco_gate (1 thread, GB/s of g + l + r, vs memcpy of them)", r["cpu"]["loco_gate"]);
    if (r["cpu"].contains("xxh3_long"))
      rows("CPU xxh3_64bits (1 thread, GB/s of the input, vs memcpy of it)", r["cpu"]["xxh3_long"]);
  }
  for (const char* part : {"gpu", "gpu_large"}) {
    if (!r.contains(part)) continue;
    const auto& g = r[part];
    if (!g.value("available", false)) {
      s += "\nGPU: not run (" + g.value("reason", std::string("unknown")) + ")\n";
    } else {
      s += "\nGPU " + g.value("device", std::string("?")) + ", " + std::to_string(g.value("elements", 0ull)) +
           " elements: device-to-device copy " + std::to_string(g.value("d2d_copy_gbps", 0.0)) +
           " GB/s (read + write)\n";
      rows("GPU kernels (GB/s = bytes read + written per second)", g["kernels"]);
    }
  }
  if (r.contains("model")) s += model_stages_table(r["model"]);
  return s;
}

}  // namespace pulse::bench
