// kernels_report: `pulse bench kernels` without LibTorch (bench/kernels/kernels_report.h), so that a build
// made on a machine with nvcc but no GPU can be carried to a GPU machine and run there.
//
//   kernels_report [--json] [--elements N] [--reps R] [--no-cpu] [--no-gpu] [--gpu-elements N]
//                  [--model qwen2.5-7b] [--model-scale S] [--no-model-cpu]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "bench/kernels/kernels_report.h"

int main(int argc, char** argv) {
  pulse::bench::KernelsBenchOptions o;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](long long lo, long long hi) {
      char* end = nullptr;
      const long long v = i + 1 < argc ? std::strtoll(argv[++i], &end, 10) : lo - 1;
      if (!end || *end || v < lo || v > hi) {
        std::fprintf(stderr, "kernels_report: %s needs an integer in %lld..%lld\n", a.c_str(), lo, hi);
        std::exit(2);
      }
      return v;
    };
    if (a == "--json") {
      json = true;
    } else if (a == "--elements") {
      o.elements = static_cast<uint64_t>(value(1, 1ll << 31));
    } else if (a == "--reps") {
      o.reps = static_cast<int>(value(1, 1000));
    } else if (a == "--gpu-elements") {
      o.gpu_elements = static_cast<uint64_t>(value(0, 1ll << 31));
    } else if (a == "--model") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kernels_report: --model needs a name (qwen2.5-7b)\n");
        return 2;
      }
      o.model = argv[++i];
    } else if (a == "--model-scale") {
      o.model_scale = static_cast<int>(value(1, 4096));
    } else if (a == "--no-model-cpu") {
      o.model_cpu = false;
    } else if (a == "--no-cpu") {
      o.cpu = false;
    } else if (a == "--no-gpu") {
      o.gpu = false;
    } else {
      std::fprintf(
          stderr,
          "kernels_report: unknown option %s\nusage: kernels_report [--json] [--elements N] [--reps R] "
          "[--no-cpu] [--no-gpu] [--gpu-elements N] [--model qwen2.5-7b] [--model-scale S] "
          "[--no-model-cpu]\n",
          a.c_str());
      return 2;
    }
  }
  try {
    const auto r = pulse::bench::run_kernels_bench(o);
    std::cout << (json ? r.dump() + "\n" : pulse::bench::kernels_bench_table(r));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_report: %s\n", e.what());
    return 1;
  }
  return 0;
}
