// Non-owning views of named tensors: the currency between sync/ (no LibTorch) and the rest of pulse.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sync/io/dtype.h"

namespace pulse::sync {

/// A named, contiguous, row-major tensor that someone else owns.
/// Invariant: nbytes == numel(shape) * dtype_size(dtype). A 0-d tensor (shape {}) has one element.
struct TensorView {
  std::string name;  ///< e.g. "model.layers.0.self_attn.q_proj.weight" (HF names)
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;  ///< elements per dimension
  const uint8_t* data = nullptr;
  size_t nbytes = 0;  ///< bytes at data
};

/// The same, writable (the weights a patch is applied to).
struct MutableTensorView {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  uint8_t* data = nullptr;
  size_t nbytes = 0;

  TensorView view() const { return TensorView{name, dtype, shape, data, nbytes}; }
};

/// Product of the dims (1 for a 0-d tensor). Throws std::overflow_error past 2^63 elements and
/// std::invalid_argument for a negative dim.
int64_t numel(const std::vector<int64_t>& shape);

/// A shape as "[64, 32]" ("[]" for a 0-d tensor), for error messages.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace pulse::sync
