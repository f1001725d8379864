// kernels_bench: speed of the PULSELoCo gate (kernels/loco_gate.h) per variant, against a memcpy of the
// same input bytes (global + local + residual, 12 B per element) measured in the same run on the same
// thread right before every repetition; the best of each is reported. No LibTorch, no pulse_sync.
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

#include "kernels/loco_gate.h"

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
  return 0;
}
