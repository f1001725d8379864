// Element types of tensors that pulse stores, diffs and ships.
//
// The PULSESync codec compares bit patterns of the element width, so every dtype here is handled the
// same way; names follow the safetensors format spec (https://github.com/huggingface/safetensors).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pulse::sync {

/// Tensor element type. Values are part of the patch format (sync/FORMAT.md): never renumber.
enum class DType : uint8_t {
  BF16 = 0,
  F16 = 1,
  F32 = 2,
  F64 = 3,
  F8_E4M3 = 4,
  F8_E5M2 = 5,
  I8 = 6,
  U8 = 7,
  I16 = 8,
  U16 = 9,
  I32 = 10,
  U32 = 11,
  I64 = 12,
  U64 = 13,
  BOOL = 14,
};

/// Bytes per element (1, 2, 4 or 8).
size_t dtype_size(DType dtype);

/// The safetensors name ("BF16", "F32", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);

/// Parses a safetensors dtype name. Throws std::invalid_argument naming the unknown string.
DType parse_dtype(std::string_view name);

/// True for DType values this build knows (used to validate bytes read from files).
bool dtype_valid(uint8_t raw);

}  // namespace pulse::sync
