// The tensor shapes of a real model for `pulse bench kernels --model`: sync benchmarks at the sizes users
// sync (a 7B model: ~15 GB of BF16 weights, 30 GB of FP32 masters) rather than one 20 M-element tensor.
// Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pulse::bench {

/// One weight matrix (cols 1 for a vector), row-major.
struct ShapedTensor {
  std::string name;  ///< HF name, e.g. "model.layers.0.mlp.up_proj.weight"
  uint64_t rows = 0, cols = 1;
  uint64_t elements() const { return rows * cols; }
};

/// Qwen2.5-7B's tensors (config: hidden 3584, 28 layers, intermediate 18944, vocab 152064, 28 query heads
/// and 4 KV heads of 128, q/k/v biases, untied lm_head): 339 tensors, 7.62 G elements. `scale` > 1 divides
/// hidden, intermediate, vocab and the head size by it (rounded up; the layer and head counts stay), so a
/// test or a small machine runs the same tensor set tiny. Throws std::invalid_argument for scale < 1.
std::vector<ShapedTensor> qwen25_7b_shapes(int scale = 1);

}  // namespace pulse::bench
