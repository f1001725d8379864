#include "sync/io/tensor_view.h"

#include <limits>
#include <stdexcept>

namespace pulse::sync {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("negative dimension in tensor shape");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) throw std::overflow_error("tensor too large");
    n *= d;
  }
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace pulse::sync
