#include "bench/sync_bench.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "kernels/apply_kernels.h"
#include "kernels/bf16.h"
#include "kernels/diff_emit16.h"
#include "kernels/diff_scan.h"
#include "kernels/splitmix64.h"
#include "kernels/xxh3_long.h"
#include "sync/io/atomic_file.h"
#include "sync/hash.h"
#include "sync/parallel.h"
#include "sync/patch.h"
#include "sync/io/safetensors.h"

namespace pulse::bench {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The kernel variants in use, as the table prints them.
std::string kernel_variants() {
  return std::string("diff_emit16 ") + kernels::diff_emit16_isa() + ", apply " +
         kernels::apply_kernels_isa() + ", diff_masks " + kernels::diff_masks_isa() + ", xxh3_long " +
         kernels::xxh3_long_isa() + " (memcpy, zstd and short XXH3 inputs: their libraries' own dispatch)";
}

/// Forces every kernel family to the variant `isa` ("" = leave the CPU's fastest) while alive, and back
/// to the fastest afterwards. Families without that variant get their fastest one below it.
class ForceKernels {
 public:
  explicit ForceKernels(const std::string& isa) {
    if (isa.empty()) return;
    if (isa != "avx512" && isa != "avx2" && isa != "portable")
      throw std::invalid_argument("sync bench: --isa must be avx512, avx2 or portable, got '" + isa + "'");
    if (!kernels::diff_emit16_supported(isa.c_str()))
      throw std::invalid_argument("sync bench: --isa " + isa + ": this CPU cannot run the " + isa +
                                  " kernels");
    forced_ = true;
    const char* below[] = {"avx512", "avx2", "portable"};
    const auto force = [&](bool (*fn)(const char*)) {
      bool started = false;
      for (const char* v : below) {
        started = started || isa == v;
        if (started && fn(v)) return;
      }
    };
    force(kernels::diff_emit16_force);
    force(kernels::apply_kernels_force);
    force(kernels::diff_masks_force);
    force(kernels::xxh3_long_force);
  }
  ~ForceKernels() {
    if (!forced_) return;
    kernels::diff_emit16_force(nullptr);
    kernels::apply_kernels_force(nullptr);
    kernels::diff_masks_force(nullptr);
    kernels::xxh3_long_force(nullptr);
  }
  ForceKernels(const ForceKernels&) = delete;
  ForceKernels& operator=(const ForceKernels&) = delete;

 private:
  bool forced_ = false;
};

/// CPU seconds used so far by all threads of this process.
double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Wall and process CPU seconds of one timed call.
struct Timing {
  double wall = 1e30, cpu = 1e30;      ///< best of the samples
  double last_wall = 0, last_cpu = 0;  ///< the latest sample
  template <typename F>
  void measure(F&& fn) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    fn();
    last_wall = seconds_since(t0);
    last_cpu = process_cpu_seconds() - c0;
    wall = std::min(wall, last_wall);
    cpu = std::min(cpu, last_cpu);
  }
};

/// Median of a non-empty sample (the mean of the middle two for an even count).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// An owned tensor (bytes) with its view.
struct OwnedTensor {
  std::string name;
  sync::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  sync::TensorView view() const { return {name, dtype, shape, bytes.data(), bytes.size()}; }
  sync::MutableTensorView mut() { return {name, dtype, shape, bytes.data(), bytes.size()}; }
};

// ---- synthetic workload ------------------------------------------------------------------------------

/// Llama-like shapes (hidden 2048, MLP 5632) filling `elements`; the last tensor takes the remainder.
std::vector<std::pair<std::string, std::vector<int64_t>>> synthetic_shapes(uint64_t elements) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> layer = {
      {"input_layernorm.weight", {2048}},        {"self_attn.q_proj.weight", {2048, 2048}},
      {"self_attn.k_proj.weight", {2048, 2048}}, {"self_attn.v_proj.weight", {2048, 2048}},
      {"self_attn.o_proj.weight", {2048, 2048}}, {"mlp.gate_proj.weight", {5632, 2048}},
      {"mlp.up_proj.weight", {5632, 2048}},      {"mlp.down_proj.weight", {2048, 5632}}};
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  uint64_t left = elements;
  for (int l = 0; left > 0; ++l) {
    for (const auto& [name, shape] : layer) {
      if (left == 0) break;
      const uint64_t n = static_cast<uint64_t>(sync::numel(shape));
      std::vector<int64_t> s = shape;
      if (n > left) {
        const int64_t cols = shape.back();
        s = left >= static_cast<uint64_t>(cols)
                ? std::vector<int64_t>{static_cast<int64_t>(left / cols), cols}
                : std::vector<int64_t>{static_cast<int64_t>(left)};
      }
      out.push_back({"model.layers." + std::to_string(l) + "." + name, s});
      left -= static_cast<uint64_t>(sync::numel(s));
    }
  }
  return out;
}

/// SplitMix64 (kernels/splitmix64.h): a fast seeded generator for the synthetic weights.
struct SplitMix {
  kernels::SplitMix64 gen;
  uint64_t next() { return gen.next(); }
  /// Two standard normals (Box-Muller).
  std::pair<float, float> normals() {
    const double u1 = (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(next() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    return {static_cast<float>(r * std::cos(2 * M_PI * u2)), static_cast<float>(r * std::sin(2 * M_PI * u2))};
  }
};

/// Base and target BF16 weights: FP32 masters ~N(0, 0.02), Adam (lr `lr_d`, e.g. 3e-6, betas 0.9/0.999, eps
/// 1e-8) with N(0, 1) gradients; base = BF16 after step 1, target = BF16 after step 2. Deterministic for
/// (seed, elements) whatever the thread count.
void make_synthetic(uint64_t elements, uint64_t seed, double lr_d, int threads,
                    std::vector<OwnedTensor>& base, std::vector<OwnedTensor>& target) {
  for (const auto& [name, shape] : synthetic_shapes(elements)) {
    const size_t n = static_cast<size_t>(sync::numel(shape));
    base.push_back({name, sync::DType::BF16, shape, std::vector<uint8_t>(2 * n)});
    target.push_back({name, sync::DType::BF16, shape, std::vector<uint8_t>(2 * n)});
  }
  constexpr size_t kBlock = 1 << 16;  // elements per independently seeded block
  struct Job {
    size_t tensor, start, count;
  };
  std::vector<Job> jobs;
  for (size_t t = 0; t < base.size(); ++t)
    for (size_t s = 0; s < base[t].bytes.size() / 2; s += kBlock)
      jobs.push_back({t, s, std::min(kBlock, base[t].bytes.size() / 2 - s)});
  sync::parallel_for(jobs.size(), threads, [&](size_t j) {
    const Job& job = jobs[j];
    SplitMix rng{{seed * 0x100000001b3ull ^ (static_cast<uint64_t>(job.tensor) << 40) ^ job.start}};
    std::vector<float> master(job.count), m(job.count, 0.f), v(job.count, 0.f);
    for (size_t i = 0; i < job.count; i += 2) {
      auto [a, b] = rng.normals();
      master[i] = 0.02f * a;
      if (i + 1 < job.count) master[i + 1] = 0.02f * b;
    }
    const float lr = static_cast<float>(lr_d), b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    std::vector<uint16_t> bf16(job.count);
    for (int step = 1; step <= 2; ++step) {
      const float c1 = 1.f - std::pow(b1, step), c2 = 1.f - std::pow(b2, step);
      for (size_t i = 0; i < job.count; i += 2) {
        auto [ga, gb] = rng.normals();
        for (size_t k = 0; k < 2 && i + k < job.count; ++k) {
          const float g = k == 0 ? ga : gb;
          float& mi = m[i + k];
          float& vi = v[i + k];
          mi = b1 * mi + (1 - b1) * g;
          vi = b2 * vi + (1 - b2) * g * g;
          master[i + k] -= lr * (mi / c1) / (std::sqrt(vi / c2) + eps);
        }
      }
      kernels::fp32_to_bf16_rne(master.data(), bf16.data(), job.count);
      auto& dst = step == 1 ? base[job.tensor] : target[job.tensor];
      std::memcpy(dst.bytes.data() + 2 * job.start, bf16.data(), 2 * job.count);
    }
  });
}

// ---- baselines -------------------------------------------------------------------------------------

/// The reference deployment's patch format, reimplemented: per tensor (viewed as rows x cols: dim 0 x
/// the rest; 1-D as 1 x n) the changed positions in row-major order as row gaps to the previous change
/// (uint8 when all fit, else int32) and column gaps within a row (the column itself at a new row;
/// uint16 when all fit, else int32), then the absolute new values; the whole patch one zstd-1 frame.
int64_t ref_pulse_bytes(const std::vector<sync::TensorView>& base,
                        const std::vector<sync::TensorView>& target) {
  std::vector<uint8_t> raw;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    raw.insert(raw.end(), b, b + n);
  };
  for (size_t t = 0; t < target.size(); ++t) {
    const auto& a = base[t];
    const auto& b = target[t];
    const size_t w = sync::dtype_size(b.dtype);
    const uint64_t n = b.nbytes / w;
    const uint64_t cols =
        b.shape.size() >= 2 ? n / std::max<int64_t>(1, b.shape[0]) : std::max<uint64_t>(n, 1);
    std::vector<uint32_t> rows_gaps, col_gaps;
    std::vector<uint8_t> values;
    uint64_t prev_row = 0, prev_col = 0;
    bool first = true;
    for (uint64_t i = 0; i < n; ++i) {
      if (std::memcmp(a.data + i * w, b.data + i * w, w) == 0) continue;
      const uint64_t row = cols ? i / cols : 0, col = cols ? i % cols : i;
      const bool same_row = !first && row == prev_row;
      rows_gaps.push_back(static_cast<uint32_t>(row - (first ? 0 : prev_row)));
      col_gaps.push_back(static_cast<uint32_t>(same_row ? col - prev_col : col));
      values.insert(values.end(), b.data + i * w, b.data + (i + 1) * w);
      prev_row = row, prev_col = col, first = false;
    }
    const uint64_t count = rows_gaps.size();
    put(b.name.data(), b.name.size());
    put(&count, 8);
    const bool row8 = std::all_of(rows_gaps.begin(), rows_gaps.end(), [](uint32_t g) { return g <= 0xff; });
    const bool col16 = std::all_of(col_gaps.begin(), col_gaps.end(), [](uint32_t g) { return g <= 0xffff; });
    const uint8_t widths = static_cast<uint8_t>(row8 | (col16 << 1));
    put(&widths, 1);
    for (uint32_t g : rows_gaps) {
      if (row8) {
        const uint8_t v = static_cast<uint8_t>(g);
        put(&v, 1);
      } else {
        put(&g, 4);
      }
    }
    for (uint32_t g : col_gaps) {
      if (col16) {
        const uint16_t v = static_cast<uint16_t>(g);
        put(&v, 2);
      } else {
        put(&g, 4);
      }
    }
    put(values.data(), values.size());
  }
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  const size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 1);
  return ZSTD_isError(n) ? -1 : static_cast<int64_t>(n);
}

int64_t dense_zstd1_bytes(const std::vector<sync::TensorView>& target, int threads) {
  std::vector<int64_t> sizes(target.size(), 0);
  sync::parallel_for(target.size(), threads, [&](size_t t) {
    std::vector<uint8_t> out(ZSTD_compressBound(target[t].nbytes));
    const size_t n = ZSTD_compress(out.data(), out.size(), target[t].data, target[t].nbytes, 1);
    sizes[t] = ZSTD_isError(n) ? 0 : static_cast<int64_t>(n);
  });
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  return total;
}

/// `zstd --patch-from=BASE TARGET -o OUT` on the concatenated tensor bytes in a temp dir.
int64_t zstd_patch_from_bytes(const std::vector<sync::TensorView>& base,
                              const std::vector<sync::TensorView>& target, std::string& note) {
  char tmpl[] = "/tmp/pulse_sync_bench_XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  if (!dir) {
    note += "zstd --patch-from: no temp dir; ";
    return -1;
  }
  const std::string d = dir, b = d + "/base.bin", t = d + "/target.bin", o = d + "/patch.zst";
  auto write = [](const std::string& path, const std::vector<sync::TensorView>& ts) {
    std::ofstream out(path, std::ios::binary);
    for (const auto& x : ts)
      out.write(reinterpret_cast<const char*>(x.data), static_cast<std::streamsize>(x.nbytes));
    return static_cast<bool>(out);
  };
  int64_t result = -1;
  if (write(b, base) && write(t, target)) {
    const std::string cmd = "zstd -q -f --patch-from='" + b + "' '" + t + "' -o '" + o + "' 2>/dev/null";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(o, std::ios::binary | std::ios::ate);
    if (rc == 0 && in) result = static_cast<int64_t>(in.tellg());
    if (result < 0) note += "zstd --patch-from failed (rc " + std::to_string(rc) + "); ";
  } else {
    note += "zstd --patch-from: cannot write temp files; ";
  }
  std::remove(b.c_str());
  std::remove(t.c_str());
  std::remove(o.c_str());
  ::rmdir(d.c_str());
  return result;
}

/// Entropy bound of the change set in bits: sum over tensors of log2 C(n, k) plus k * the empirical
/// entropy of the value changes (wrapping differences of the bit patterns, per dtype width).
double entropy_bound_bits(const std::vector<sync::TensorView>& base,
                          const std::vector<sync::TensorView>& target, uint64_t& changed) {
  double bits = 0;
  std::map<size_t, std::unordered_map<uint64_t, uint64_t>> hist;  // per width
  changed = 0;
  for (size_t t = 0; t < target.size(); ++t) {
    const size_t w = sync::dtype_size(target[t].dtype);
    const uint64_t n = target[t].nbytes / w;
    uint64_t k = 0;
    auto& h = hist[w];
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t a = 0, b = 0;
      std::memcpy(&a, base[t].data + i * w, w);
      std::memcpy(&b, target[t].data + i * w, w);
      if (a == b) continue;
      ++k;
      uint64_t d = b - a;
      if (w < 8) d &= (1ull << (8 * w)) - 1;
      ++h[d];
    }
    bits += (std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(static_cast<double>(n - k) + 1.0)) /
            std::log(2.0);
    changed += k;
  }
  for (const auto& [w, h] : hist)
    for (const auto& [d, c] : h) bits -= static_cast<double>(c) * std::log2(static_cast<double>(c) / changed);
  return bits;
}

/// The memcpy baseline: the target's bytes copied into pre-faulted buffers on the codec's threads. Sampled
/// at the start and again before every codec (and floor hash) repetition, best sample kept: the machine's
/// memory speed drifts over seconds on shared hosts, and the codec must not be compared with a slow moment of
/// memcpy.
class MemcpyBaseline {
 public:
  MemcpyBaseline(const std::vector<sync::TensorView>& target, int threads)
      : target_(target), threads_(threads) {
    dst_.resize(target.size());
    for (size_t t = 0; t < target.size(); ++t) dst_[t].assign(target[t].nbytes, 1);  // pre-faulted
  }
  /// One more timed copy of every tensor; its wall seconds.
  double sample() {
    best_.measure([&] {
      sync::parallel_for(target_.size(), threads_,
                         [&](size_t t) { std::memcpy(dst_[t].data(), target_[t].data, target_[t].nbytes); });
    });
    return best_.last_wall;
  }
  const Timing& best() const { return best_; }

 private:
  const std::vector<sync::TensorView>& target_;
  int threads_;
  std::vector<std::vector<uint8_t>> dst_;
  Timing best_;
};

}  // namespace

SyncBenchResult measure_sync_step(const std::string& workload, const std::vector<sync::TensorView>& base_in,
                                  const std::vector<sync::TensorView>& target_in,
                                  const SyncBenchOptions& options, std::ostream& log) {
  // Pair by name (sorted), as the codec does.
  auto by_name = [](const sync::TensorView& a, const sync::TensorView& b) { return a.name < b.name; };
  std::vector<sync::TensorView> base = base_in, target = target_in;
  std::sort(base.begin(), base.end(), by_name);
  std::sort(target.begin(), target.end(), by_name);
  if (base.size() != target.size())
    throw std::runtime_error("sync bench: base and target hold different tensors");
  for (size_t t = 0; t < base.size(); ++t)
    if (base[t].name != target[t].name || base[t].nbytes != target[t].nbytes ||
        base[t].dtype != target[t].dtype)
      throw std::runtime_error("sync bench: tensor '" + target[t].name + "' differs in name/dtype/size");

  SyncBenchResult r;
  r.workload = workload;
  r.kernels = kernel_variants();
  uint64_t bytes = 0;
  for (const auto& t : target) {
    r.elements += t.nbytes / sync::dtype_size(t.dtype);
    bytes += t.nbytes;
  }
  if (bytes == 0) throw std::runtime_error("sync bench: the " + workload + " workload holds no tensor bytes");
  log << "[" << workload << "] " << r.elements << " elements, " << target.size()
      << " tensors; kernels: " << r.kernels << "\n"
      << std::flush;
  const double bound_bits = entropy_bound_bits(base, target, r.changed);
  r.entropy_bound_bytes_per_change = r.changed ? bound_bits / 8.0 / r.changed : 0;
  log << "[" << workload << "] changed " << r.changed << " (" << std::setprecision(4)
      << 100.0 * r.changed / std::max<uint64_t>(1, r.elements) << "%)\n"
      << std::flush;

  r.threads = sync::resolve_threads(options.threads, target.size());
  MemcpyBaseline memcpy_baseline(target, options.threads);
  for (int rep = 0; rep < 3; ++rep) memcpy_baseline.sample();

  // Working copy of the base to apply patches onto.
  std::vector<std::vector<uint8_t>> work(base.size());
  std::vector<sync::MutableTensorView> views(base.size());
  for (size_t t = 0; t < base.size(); ++t) {
    work[t].resize(base[t].nbytes);
    views[t] = {base[t].name, base[t].dtype, base[t].shape, work[t].data(), work[t].size()};
  }
  // The encode's floor (SyncBenchResult::hash_both_cpu_s): the hashes the format needs, read from memory
  // on the codec's threads, each repetition beside a memcpy sample as the codec's are.
  Timing hash_both, hash_target;
  std::vector<uint64_t> hashes(2 * target.size());
  for (int rep = 0; rep < options.repeat; ++rep) {
    memcpy_baseline.sample();
    hash_both.measure([&] {
      sync::parallel_for(target.size(), options.threads, [&](size_t t) {
        hashes[2 * t] = sync::tensor_hash(base[t]);
        hashes[2 * t + 1] = sync::tensor_hash(target[t]);
      });
    });
    hash_target.measure([&] {
      sync::parallel_for(target.size(), options.threads,
                         [&](size_t t) { hashes[2 * t + 1] = sync::tensor_hash(target[t]); });
    });
  }
  r.hash_both_cpu_s = hash_both.cpu;
  r.hash_target_cpu_s = hash_target.cpu;

  r.bit_identical = true;
  for (sync::ValueMode mode : {sync::ValueMode::Absolute, sync::ValueMode::Delta}) {
    sync::PatchOptions opt;
    opt.values = mode;
    opt.threads = options.threads;
    opt.base_version = 1;
    opt.target_version = 2;
    opt.model_id = "bench/" + workload;
    Timing enc, enc_known, enc_raw, dec, dec_trusted;
    std::vector<double> enc_paired, dec_paired;  // memcpy time / codec time, per repetition (wall)
    std::vector<uint8_t> patch;
    // Best of the repetitions: the steady state of a trainer that encodes every step. The previous patch
    // is freed first, as a trainer's version store evicts old ones, so the new one reuses its (already
    // mapped) memory. Each repetition also pairs the codec with the memcpy sampled just before it.
    for (int rep = 0; rep < options.repeat; ++rep) {
      const double memcpy_s = memcpy_baseline.sample();
      std::vector<uint8_t>().swap(patch);
      enc.measure([&] { patch = sync::encode_patch(base, target, opt); });
      enc_paired.push_back(memcpy_s / enc.last_wall);
      // The trainer's path: it published the base, so it passes the base's hashes (no re-hash).
      {
        sync::PatchOptions known = opt;
        known.known_base_root = sync::inspect_patch(patch.data(), patch.size()).base_root_hash;
        std::vector<uint8_t> p2;
        enc_known.measure([&] { p2 = sync::encode_patch(base, target, known); });
        r.bit_identical = r.bit_identical && p2 == patch;  // same bytes: the claim was right
      }
      // The same encode without the zstd stage (level 0: streams stored raw), to split encode time.
      {
        sync::PatchOptions raw = opt;
        raw.zstd_level = 0;
        std::vector<uint8_t> p0;
        enc_raw.measure([&] { p0 = sync::encode_patch(base, target, raw); });
      }
      for (size_t t = 0; t < base.size(); ++t) std::memcpy(work[t].data(), base[t].data, base[t].nbytes);
      bool changed = false;
      dec.measure([&] { changed = sync::apply_patch(views, patch.data(), patch.size(), options.threads); });
      dec_paired.push_back(memcpy_s / dec.last_wall);
      bool same = changed == (r.changed > 0);
      // The worker's path: it knows its root from the previous apply.
      for (size_t t = 0; t < base.size(); ++t) std::memcpy(work[t].data(), base[t].data, base[t].nbytes);
      const sync::PatchInfo info = sync::inspect_patch(patch.data(), patch.size());
      sync::ApplyOptions trusted;
      trusted.threads = options.threads;
      trusted.trusted_root = info.base_root_hash;
      bool changed_trusted = false;
      dec_trusted.measure(
          [&] { changed_trusted = sync::apply_patch(views, patch.data(), patch.size(), trusted); });
      same = same && changed_trusted == changed;
      for (size_t t = 0; t < base.size(); ++t)
        same = same && std::memcmp(work[t].data(), target[t].data, target[t].nbytes) == 0;
      r.bit_identical = r.bit_identical && same;
    }
    // The slower mode (lower median) is reported, with its own range.
    auto keep_slower = [](const std::vector<double>& v, double& med, double& lo, double& hi) {
      const double m = median(v);
      if (med != 0 && med <= m) return;
      med = m;
      lo = *std::min_element(v.begin(), v.end());
      hi = *std::max_element(v.begin(), v.end());
    };
    keep_slower(enc_paired, r.encode_memcpy_paired, r.encode_memcpy_paired_lo, r.encode_memcpy_paired_hi);
    keep_slower(dec_paired, r.decode_memcpy_paired, r.decode_memcpy_paired_lo, r.decode_memcpy_paired_hi);
    const double e = bytes / enc.wall / 1e9, d = bytes / dec.wall / 1e9;
    const double ec = bytes / enc.cpu / 1e9, dc = bytes / dec.cpu / 1e9;
    // The slower mode counts (as for the wall-clock numbers).
    r.encode_cpu_gbps = r.encode_cpu_gbps == 0 ? ec : std::min(r.encode_cpu_gbps, ec);
    r.decode_cpu_gbps = r.decode_cpu_gbps == 0 ? dc : std::min(r.decode_cpu_gbps, dc);
    const double ek = bytes / enc_known.wall / 1e9, ekc = bytes / enc_known.cpu / 1e9;
    r.encode_known_gbps = r.encode_known_gbps == 0 ? ek : std::min(r.encode_known_gbps, ek);
    r.encode_known_cpu_gbps = r.encode_known_cpu_gbps == 0 ? ekc : std::min(r.encode_known_cpu_gbps, ekc);
    const double dt = bytes / dec_trusted.wall / 1e9, dtc = bytes / dec_trusted.cpu / 1e9;
    r.decode_trusted_gbps = r.decode_trusted_gbps == 0 ? dt : std::min(r.decode_trusted_gbps, dt);
    r.decode_trusted_cpu_gbps =
        r.decode_trusted_cpu_gbps == 0 ? dtc : std::min(r.decode_trusted_cpu_gbps, dtc);
    if (mode == sync::ValueMode::Absolute) {
      r.patch_bytes_absolute = static_cast<int64_t>(patch.size());
      r.encode_gbps_absolute = e, r.decode_gbps_absolute = d;
      r.encode_s_absolute = enc.wall, r.encode_raw_s_absolute = enc_raw.wall;
      r.encode_cpu_s_absolute = enc.cpu, r.encode_raw_cpu_s_absolute = enc_raw.cpu;
    } else {
      r.patch_bytes_delta = static_cast<int64_t>(patch.size());
      r.encode_gbps_delta = e, r.decode_gbps_delta = d;
      r.encode_s_delta = enc.wall, r.encode_raw_s_delta = enc_raw.wall;
      r.encode_cpu_s_delta = enc.cpu, r.encode_raw_cpu_s_delta = enc_raw.cpu;
    }
    log << "[" << workload << "] " << (mode == sync::ValueMode::Delta ? "delta" : "absolute") << ": "
        << patch.size() << " bytes, encode " << e << " GB/s (" << ec << " per CPU s), decode " << d
        << " GB/s (" << dc << " per CPU s)\n"
        << std::flush;
  }
  r.memcpy_gbps = bytes / memcpy_baseline.best().wall / 1e9;
  r.memcpy_cpu_gbps = bytes / memcpy_baseline.best().cpu / 1e9;
  r.floor_zstd_cpu_s = std::max(0.0, std::min(r.encode_cpu_s_absolute - r.encode_raw_cpu_s_absolute,
                                              r.encode_cpu_s_delta - r.encode_raw_cpu_s_delta));
  if (r.hash_both_cpu_s > 0 && r.hash_target_cpu_s + r.floor_zstd_cpu_s > 0) {
    r.max_encode_memcpy_cpu = memcpy_baseline.best().cpu / (r.hash_both_cpu_s + r.floor_zstd_cpu_s);
    r.max_encode_known_base_memcpy_cpu =
        memcpy_baseline.best().cpu / (r.hash_target_cpu_s + r.floor_zstd_cpu_s);
  }
  r.encode_gbps = std::min(r.encode_gbps_absolute, r.encode_gbps_delta);
  r.decode_gbps = std::min(r.decode_gbps_absolute, r.decode_gbps_delta);
  r.bytes_per_change = r.changed ? static_cast<double>(r.patch_bytes_delta) / r.changed : 0;
  work.clear();
  views.clear();

  r.ref_pulse_bytes = ref_pulse_bytes(base, target);
  r.dense_zstd1_bytes = dense_zstd1_bytes(target, options.threads);
  if (options.skip_zstd_patch_from) {
    r.note += "zstd --patch-from skipped; ";
  } else {
    log << "[" << workload << "] zstd --patch-from ...\n" << std::flush;
    r.zstd_patch_from_bytes = zstd_patch_from_bytes(base, target, r.note);
  }
  return r;
}

std::vector<SyncBenchResult> run_sync_bench(const SyncBenchOptions& options, std::ostream& log) {
  if (options.elements == 0) throw std::invalid_argument("sync bench: --elements must be >= 1");
  if (options.repeat < 1)
    throw std::invalid_argument("sync bench: --repeat must be >= 1, got " + std::to_string(options.repeat));
  if (!(options.lr > 0) || !std::isfinite(options.lr))
    throw std::invalid_argument("sync bench: --lr must be a positive finite number, got " +
                                std::to_string(options.lr));
  const ForceKernels force(options.isa);
  // Checkpoints are opened (and their headers validated) before minutes of synthetic work.
  for (const auto& path : options.checkpoints) sync::Checkpoint::open(path);
  // Base + target alone hold 4 bytes per element. Refuse what cannot fit in memory (e.g. "-5", which an
  // unsigned parse wraps to ~2^64) before the shape loop and the allocations run for hours.
  const uint64_t memory_bytes =
      static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
  if (options.elements > memory_bytes / 4)
    throw std::invalid_argument("sync bench: --elements " + std::to_string(options.elements) +
                                " needs at least " + std::to_string(options.elements / 250'000'000) +
                                " GB (4 bytes per element), more than this machine's " +
                                std::to_string(memory_bytes / 1'000'000'000) + " GB of memory");
  std::vector<SyncBenchResult> results;
  {
    std::vector<OwnedTensor> base, target;
    const auto t0 = Clock::now();
    make_synthetic(options.elements, options.seed, options.lr, options.threads, base, target);
    log << "[synthetic] generated 2 Adam steps in " << seconds_since(t0) << " s\n" << std::flush;
    std::vector<sync::TensorView> b, t;
    for (const auto& x : base) b.push_back(x.view());
    for (const auto& x : target) t.push_back(x.view());
    results.push_back(measure_sync_step("synthetic", b, t, options, log));
  }
  if (options.checkpoints.size() >= 2) {
    SyncBenchResult sum;
    sum.workload = "run";
    sum.kernels = kernel_variants();
    sum.threads = sync::resolve_threads(options.threads, 1 << 20);
    sum.bit_identical = true;
    double enc_s = 0, dec_s = 0, mem_s = 0, enc_a = 0, enc_d = 0, dec_a = 0, dec_d = 0, bound = 0;
    for (size_t i = 0; i + 1 < options.checkpoints.size(); ++i) {
      const auto a = sync::Checkpoint::open(options.checkpoints[i]);
      const auto b = sync::Checkpoint::open(options.checkpoints[i + 1]);
      SyncBenchResult r = measure_sync_step("run", a.tensors(), b.tensors(), options, log);
      double bytes = 0;
      for (const auto& t : b.tensors()) bytes += t.nbytes;
      sum.elements += r.elements;
      sum.changed += r.changed;
      bound += r.entropy_bound_bytes_per_change * r.changed;
      sum.ref_pulse_bytes += r.ref_pulse_bytes;
      sum.patch_bytes_absolute += r.patch_bytes_absolute;
      sum.patch_bytes_delta += r.patch_bytes_delta;
      sum.dense_zstd1_bytes += r.dense_zstd1_bytes;
      sum.zstd_patch_from_bytes =
          (sum.zstd_patch_from_bytes < 0 && i > 0) || r.zstd_patch_from_bytes < 0
              ? -1
              : std::max<int64_t>(0, sum.zstd_patch_from_bytes) + r.zstd_patch_from_bytes;
      sum.bit_identical = sum.bit_identical && r.bit_identical;
      enc_s += bytes / r.encode_gbps, dec_s += bytes / r.decode_gbps, mem_s += bytes / r.memcpy_gbps;
      enc_a += bytes / r.encode_gbps_absolute, enc_d += bytes / r.encode_gbps_delta;
      dec_a += bytes / r.decode_gbps_absolute, dec_d += bytes / r.decode_gbps_delta;
      sum.note += r.note;
    }
    double total = 0;
    for (size_t i = 1; i < options.checkpoints.size(); ++i) {
      const auto ckpt = sync::Checkpoint::open(options.checkpoints[i]);
      for (const auto& t : ckpt.tensors()) total += t.nbytes;
    }
    sum.encode_gbps = total / enc_s, sum.decode_gbps = total / dec_s, sum.memcpy_gbps = total / mem_s;
    sum.encode_gbps_absolute = total / enc_a, sum.encode_gbps_delta = total / enc_d;
    sum.decode_gbps_absolute = total / dec_a, sum.decode_gbps_delta = total / dec_d;
    sum.bytes_per_change = sum.changed ? static_cast<double>(sum.patch_bytes_delta) / sum.changed : 0;
    sum.entropy_bound_bytes_per_change = sum.changed ? bound / sum.changed : 0;
    results.push_back(sum);
  }
  return results;
}

std::string sync_bench_json(const std::vector<SyncBenchResult>& results) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& r : results) {
    out[r.workload] = {{"elements", r.elements},
                       {"changed", r.changed},
                       {"bytes_per_change", r.bytes_per_change},
                       {"entropy_bound_bytes_per_change", r.entropy_bound_bytes_per_change},
                       {"ref_pulse_bytes", r.ref_pulse_bytes},
                       {"patch_bytes_absolute", r.patch_bytes_absolute},
                       {"patch_bytes_delta", r.patch_bytes_delta},
                       {"dense_zstd1_bytes", r.dense_zstd1_bytes},
                       {"zstd_patch_from_bytes", r.zstd_patch_from_bytes},
                       {"encode_gbps", r.encode_gbps},
                       {"decode_gbps", r.decode_gbps},
                       {"memcpy_gbps", r.memcpy_gbps},
                       {"bit_identical", r.bit_identical}};
    // Beyond the keys: what ran, the target ratios and their spread (as in the table).
    auto& w = out[r.workload];
    auto ratio = [](double codec, double copy) { return copy > 0 ? codec / copy : 0.0; };
    w["threads"] = r.threads;
    w["kernels"] = r.kernels;
    w["encode_memcpy"] = ratio(r.encode_gbps, r.memcpy_gbps);
    w["decode_memcpy"] = ratio(r.decode_gbps, r.memcpy_gbps);
    w["encode_memcpy_paired"] = {{"median", r.encode_memcpy_paired},
                                 {"lowest", r.encode_memcpy_paired_lo},
                                 {"highest", r.encode_memcpy_paired_hi}};
    w["decode_memcpy_paired"] = {{"median", r.decode_memcpy_paired},
                                 {"lowest", r.decode_memcpy_paired_lo},
                                 {"highest", r.decode_memcpy_paired_hi}};
    w["encode_known_base_gbps"] = r.encode_known_gbps;
    w["decode_trusted_root_gbps"] = r.decode_trusted_gbps;
    if (r.max_encode_memcpy_cpu > 0)
      w["encode_floor"] = {{"hash_base_target_cpu_ms", 1e3 * r.hash_both_cpu_s},
                           {"hash_target_cpu_ms", 1e3 * r.hash_target_cpu_s},
                           {"zstd_cpu_ms", 1e3 * r.floor_zstd_cpu_s},
                           {"max_encode_memcpy_cpu", r.max_encode_memcpy_cpu},
                           {"max_encode_known_base_memcpy_cpu", r.max_encode_known_base_memcpy_cpu}};
  }
  return out.dump(2);
}

std::string sync_bench_table(const std::vector<SyncBenchResult>& results) {
  std::ostringstream s;
  s << std::fixed;
  for (const auto& r : results) {
    const double k = std::max<double>(1, r.changed);
    s << "workload " << r.workload << ": " << r.elements << " elements, " << r.changed << " changed ("
      << std::setprecision(3) << 100.0 * r.changed / std::max<uint64_t>(1, r.elements) << "%)\n";
    s << "  " << std::left << std::setw(26) << "format" << std::right << std::setw(14) << "bytes"
      << std::setw(12) << "B/change" << std::setw(12) << "vs bound"
      << "\n";
    auto row = [&](const std::string& name, double bytes) {
      s << "  " << std::left << std::setw(26) << name << std::right << std::setw(14) << std::setprecision(0)
        << bytes;
      if (bytes < 0) {
        s << std::setw(12) << "n/a" << std::setw(12) << "n/a"
          << "\n";
        return;
      }
      s << std::setw(12) << std::setprecision(3) << bytes / k;
      if (r.changed == 0 || r.entropy_bound_bytes_per_change <= 0)  // nothing changed: no bound to compare
        s << std::setw(12) << "n/a"
          << "\n";
      else
        s << std::setw(11) << std::setprecision(3) << bytes / k / r.entropy_bound_bytes_per_change << "x\n";
    };
    row("entropy bound", r.entropy_bound_bytes_per_change * k);
    row("pulse delta", static_cast<double>(r.patch_bytes_delta));
    row("pulse absolute", static_cast<double>(r.patch_bytes_absolute));
    row("reference PULSE format", static_cast<double>(r.ref_pulse_bytes));
    if (r.zstd_patch_from_bytes >= 0 || r.note.find("zstd --patch-from skipped") == std::string::npos)
      row("zstd --patch-from", static_cast<double>(r.zstd_patch_from_bytes));  // -1 here: it failed
    row("dense zstd -1", static_cast<double>(r.dense_zstd1_bytes));
    if (!r.kernels.empty()) s << "  kernels: " << r.kernels << "\n";
    s << std::setprecision(2) << "  speed GB/s (" << r.threads << (r.threads == 1 ? " thread" : " threads")
      << ", wall): memcpy " << r.memcpy_gbps << ", encode absolute " << r.encode_gbps_absolute << " / delta "
      << r.encode_gbps_delta << ", decode absolute " << r.decode_gbps_absolute << " / delta "
      << r.decode_gbps_delta << "\n";
    if (r.memcpy_cpu_gbps > 0)
      s << "  speed GB/s per CPU second (slower mode): memcpy " << r.memcpy_cpu_gbps << ", encode "
        << r.encode_cpu_gbps << " (" << r.encode_cpu_gbps / r.memcpy_cpu_gbps
        << "x), encode with a known base root " << r.encode_known_cpu_gbps << " ("
        << r.encode_known_cpu_gbps / r.memcpy_cpu_gbps << "x; wall " << r.encode_known_gbps << "), decode "
        << r.decode_cpu_gbps << " (" << r.decode_cpu_gbps / r.memcpy_cpu_gbps
        << "x), decode with a trusted root " << r.decode_trusted_cpu_gbps << " ("
        << r.decode_trusted_cpu_gbps / r.memcpy_cpu_gbps << "x; wall " << r.decode_trusted_gbps << ")\n";
    if (r.encode_s_absolute > 0 && r.encode_s_delta > 0) {
      // zstd stage = encode - the same encode at level 0 (each the best of its repetitions).
      auto zstd = [](double all, double raw) { return std::max(0.0, all - raw); };
      auto share = [&](double all, double raw) { return all > 0 ? zstd(all, raw) / all : 0.0; };
      const double za = share(r.encode_cpu_s_absolute, r.encode_raw_cpu_s_absolute);
      const double zd = share(r.encode_cpu_s_delta, r.encode_raw_cpu_s_delta);
      s << std::setprecision(2) << "  encode stages (absolute / delta): scan + emit + hashes + container "
        << 1e3 * r.encode_raw_s_absolute << " / " << 1e3 * r.encode_raw_s_delta << " ms wall, "
        << 1e3 * r.encode_raw_cpu_s_absolute << " / " << 1e3 * r.encode_raw_cpu_s_delta << " ms CPU; zstd "
        << 1e3 * zstd(r.encode_s_absolute, r.encode_raw_s_absolute) << " / "
        << 1e3 * zstd(r.encode_s_delta, r.encode_raw_s_delta) << " ms wall, "
        << 1e3 * zstd(r.encode_cpu_s_absolute, r.encode_raw_cpu_s_absolute) << " / "
        << 1e3 * zstd(r.encode_cpu_s_delta, r.encode_raw_cpu_s_delta) << " ms CPU (" << std::setprecision(0)
        << 100 * za << "% / " << 100 * zd << "% of encode CPU"
        << (std::max(za, zd) >= 0.5 ? ": encode is dominated by zstd" : "") << ")\n";
    }
    if (r.max_encode_memcpy_cpu > 0)
      s << std::setprecision(2) << "  encode floor (CPU): XXH3 of base + target alone "
        << 1e3 * r.hash_both_cpu_s << " ms (target alone " << 1e3 * r.hash_target_cpu_s << ") + zstd stage "
        << 1e3 * r.floor_zstd_cpu_s
        << " ms: even with a free scan, encode/memcpy per CPU second stays <= " << std::setprecision(3)
        << r.max_encode_memcpy_cpu << " (known base root <= " << r.max_encode_known_base_memcpy_cpu << ")\n";
    s << "  targets: delta/bound " << std::setprecision(3)
      << r.bytes_per_change / std::max(1e-12, r.entropy_bound_bytes_per_change) << " (<= 1.15), ref/delta "
      << static_cast<double>(r.ref_pulse_bytes) / std::max<int64_t>(1, r.patch_bytes_delta)
      << " (>= 2), absolute/ref "
      << static_cast<double>(r.patch_bytes_absolute) / std::max<int64_t>(1, r.ref_pulse_bytes)
      << " (< 1), encode/memcpy " << r.encode_gbps / r.memcpy_gbps << ", decode/memcpy "
      << r.decode_gbps / r.memcpy_gbps << " (>= 0.5; best codec time vs best memcpy, wall), bit-identical "
      << (r.bit_identical ? "yes" : "NO") << "\n";
    if (r.encode_memcpy_paired > 0)
      s << std::setprecision(3)
        << "  the same, each repetition vs the memcpy sampled just before it (wall; the slower mode's median "
           "[lowest, highest]): encode/memcpy "
        << r.encode_memcpy_paired << " [" << r.encode_memcpy_paired_lo << ", " << r.encode_memcpy_paired_hi
        << "], decode/memcpy " << r.decode_memcpy_paired << " [" << r.decode_memcpy_paired_lo << ", "
        << r.decode_memcpy_paired_hi << "]\n";
    std::string note = r.note;  // "a; b; " -> "a; b"
    while (note.size() >= 2 && note.compare(note.size() - 2, 2, "; ") == 0) note.resize(note.size() - 2);
    if (!note.empty()) s << "  note: " << note << "\n";
  }
  return s.str();
}

}  // namespace pulse::bench
