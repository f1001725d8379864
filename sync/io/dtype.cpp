#include "sync/io/dtype.h"

#include <stdexcept>

namespace pulse::sync {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::BF16, "BF16", 2},      {DType::F16, "F16", 2},         {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},        {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I8, "I8", 1},          {DType::U8, "U8", 1},           {DType::I16, "I16", 2},
    {DType::U16, "U16", 2},        {DType::I32, "I32", 4},         {DType::U32, "U32", 4},
    {DType::I64, "I64", 8},        {DType::U64, "U64", 8},         {DType::BOOL, "BOOL", 1},
};
}  // namespace

bool dtype_valid(uint8_t raw) { return raw <= static_cast<uint8_t>(DType::BOOL); }

size_t dtype_size(DType dtype) {
  if (!dtype_valid(static_cast<uint8_t>(dtype))) throw std::invalid_argument("invalid dtype value");
  return kDTypes[static_cast<uint8_t>(dtype)].size;
}

std::string_view dtype_name(DType dtype) {
  if (!dtype_valid(static_cast<uint8_t>(dtype))) throw std::invalid_argument("invalid dtype value");
  return kDTypes[static_cast<uint8_t>(dtype)].name;
}

DType parse_dtype(std::string_view name) {
  for (const auto& info : kDTypes)
    if (info.name == name) return info.dtype;
  throw std::invalid_argument("unknown dtype '" + std::string(name) + "'");
}

}  // namespace pulse::sync
