// kernels_bench: speed of the PULSELoCo gate (kernels/loco_gate.h) per variant, against a memcpy of the
// same input bytes (global + local + residual, 12 B per element) measured in the same run on the same
// thread right before every repetition; the best of each is reported. Then the BF16 diff-and-emit scan
// (kernels/diff_emit16.h) per variant at ~7% and ~1% changed, with its fused XXH3 of both sides where the
// variant has it, against a memcpy of the target (2 B per element). No LibTorch, no pulse_sync.
//
//   kernels_bench [--elements N] [--delta-std X] [--reps R]
//
// Synthetic round: global ~ N(0, 0.02) (RL weight scale), local = global + N(0, delta-std), residual 0;
// the fired fraction is printed (the default 2e-6 fires ~6%, 1e-5 ~20%).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/diff_emit16.h"
#include "kernels/loco_gate.h"
#include "kernels/xxh3_long.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "kernels_bench: %s\nusage: kernels_bench [--elements N] [--delta-std X] [--reps R]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = size_t{1} << 23;
  double delta_std = 2e-6;
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    char* end = nullptr;
    if (a == "--elements") {
      const long long x = std::strtoll(v, &end, 10);
      if (*end || x < 1 || x > (1ll << 32)) usage("--elements must be an integer in 1..2^32");
      n = static_cast<size_t>(x);
    } else if (a == "--delta-std") {
      delta_std = std::strtod(v, &end);
      if (*end || !(delta_std > 0) || delta_std > 1e3) usage("--delta-std must be a positive number");
    } else if (a == "--reps") {
      const long x = std::strtol(v, &end, 10);
      if (*end || x < 1 || x > 1000) usage("--reps must be an integer in 1..1000");
      reps = static_cast<int>(x);
    } else {
      usage(("unknown option " + a).c_str());
    }
  }

  std::mt19937_64 rng(1);
  std::normal_distribution<float> weight(0.0f, 0.02f), delta(0.0f, static_cast<float>(delta_std));
  std::vector<float> g(n), l(n), r(n, 0.0f), value(n);
  std::vector<uint32_t> index(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = weight(rng);
    l[i] = g[i] + delta(rng);
  }
  std::vector<float> copy_g(n), copy_l(n), copy_r(n);
  const double in_bytes = 12.0 * static_cast<double>(n);

  std::printf("loco_gate, %zu elements (%.1f MB of input), 1 thread; default variant on this CPU: %s\n", n,
              in_bytes / 1e6, pulse::kernels::loco_gate_isa());
  std::printf("%-9s %9s %10s %12s %8s %8s\n", "variant", "ms", "GB/s in", "memcpy GB/s", "ratio", "fired");
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (!pulse::kernels::loco_gate_force(isa)) {
      std::printf("%-9s skipped: this CPU cannot run it\n", isa);
      continue;
    }
    double best_gate = 1e30, best_copy = 1e30;
    uint64_t fired = 0;
    for (int rep = 0; rep < reps; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      std::memcpy(copy_g.data(), g.data(), 4 * n);
      std::memcpy(copy_l.data(), l.data(), 4 * n);
      std::memcpy(copy_r.data(), r.data(), 4 * n);
      best_copy = std::min(best_copy, seconds_since(t0));
      std::fill(r.begin(), r.end(), 0.0f);  // every repetition gates the same round
      t0 = std::chrono::steady_clock::now();
      const auto res =
          pulse::kernels::loco_gate(g.data(), l.data(), r.data(), n, false, index.data(), value.data());
      best_gate = std::min(best_gate, seconds_since(t0));
      fired = res.fired;
    }
    std::printf("%-9s %9.2f %10.2f %12.2f %8.2f %7.2f%%\n", isa, 1e3 * best_gate, in_bytes / best_gate / 1e9,
                in_bytes / best_copy / 1e9, best_copy / best_gate, 100.0 * static_cast<double>(fired) / n);
  }
  pulse::kernels::loco_gate_force(nullptr);

  // diff_emit16: the encoder's scan over 32 Ki-element blocks, as sync/patch_encode.cpp calls it.
  namespace k = pulse::kernels;
  std::vector<uint16_t> a16(n), b16(n), copy16(n);
  std::vector<uint8_t> head(k::emit16_room(n)), tail(k::emit16_tail_room(n) + 9 * (n / 32768 + 2)),
      lo(k::emit16_room(n)), hi(k::emit16_room(n));
  std::printf("\ndiff_emit16, %zu BF16 elements (%.1f MB per side), 1 thread; default variant: %s\n", n,
              2e-6 * static_cast<double>(n), k::diff_emit16_isa());
  std::printf("%-9s %7s %6s %9s %10s %12s %8s\n", "variant", "changed", "hash", "ms", "GB/s tgt",
              "memcpy GB/s", "ratio");
  for (double p : {0.07, 0.01}) {
    std::bernoulli_distribution flip(p);
    for (size_t i = 0; i < n; ++i) {
      a16[i] = static_cast<uint16_t>(rng());
      b16[i] = flip(rng) ? static_cast<uint16_t>(a16[i] + (rng() % 2 ? 1 : -1)) : a16[i];
    }
    const auto* pa = reinterpret_cast<const uint8_t*>(a16.data());
    const auto* pb = reinterpret_cast<const uint8_t*>(b16.data());
    for (const char* isa : {"avx512", "avx2", "portable"}) {
      if (!k::diff_emit16_force(isa)) {
        std::printf("%-9s skipped: this CPU cannot run it\n", isa);
        continue;
      }
      double best = 1e30, best_copy = 1e30;
      uint64_t changes = 0;
      const bool hashed = k::diff_emit16_fuses_hash() && 2 * n >= k::kXxh3LongMinBytes;
      for (int rep = 0; rep < reps; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(copy16.data(), b16.data(), 2 * n);
        best_copy = std::min(best_copy, seconds_since(t0));
        k::Xxh3LongState sa, sb;
        k::xxh3_long_init(sa);
        k::xxh3_long_init(sb);
        k::Emit16Hash hash{&sa, &sb, k::xxh3_long_block_bytes(2 * n), k::xxh3_default_secret()};
        k::Emit16Cursor c{head.data(), tail.data(), lo.data(), hi.data(), 0};
        t0 = std::chrono::steady_clock::now();
        changes = 0;
        for (size_t start = 0; start < n; start += 32768)
          changes += k::diff_emit16(pa + 2 * start, pb + 2 * start, start, std::min<size_t>(32768, n - start),
                                    false, c, hashed ? &hash : nullptr);
        best = std::min(best, seconds_since(t0));
      }
      std::printf("%-9s %6.2f%% %6s %9.2f %10.2f %12.2f %8.2f\n", isa,
                  100.0 * static_cast<double>(changes) / n, hashed ? "both" : "no", 1e3 * best,
                  2.0 * n / best / 1e9, 2.0 * n / best_copy / 1e9, best_copy / best);
    }
  }
  k::diff_emit16_force(nullptr);
  return 0;
}
