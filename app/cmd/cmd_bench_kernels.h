// `pulse bench kernels` (app/cmd/cmd_bench_kernels.cpp).
#pragma once

namespace CLI {
class App;
}

namespace pulse::app {

/// `pulse bench kernels [--json] [--elements N] [--reps R] [--no-cpu] [--no-gpu]`: the hot kernels on the
/// CPU variants and (PULSE_CUDA build with a GPU) the CUDA ones vs a same-run copy (bench/kernels/).
void register_kernels_bench(CLI::App& bench);

}  // namespace pulse::app
