// How PULSELoCo fired values travel (multi.values), apart from the codec (sync/loco_exchange.h) so that
// settings code (rl/outer_config.h, app/config.h) can name it without the codec.
#pragma once
#include <array>
#include <cstdint>

namespace pulse::sync {

/// Fp32: the gate's FP32 s per fired entry. Ulp: a signed count of the weight's BF16 step
/// (kernels/loco_ulp.h), summed exactly in integers by the receiver, the remainder kept in error feedback.
/// The numeric values are the wire's value_mode field (sync/LOCO_FORMAT.md).
enum class LocoValues : uint32_t { Fp32 = 0, Ulp = 1 };

/// The TOML names of LocoValues (multi.values), in enum order.
inline constexpr std::array<const char*, 2> kLocoValuesNames = {"fp32", "ulp"};

/// "fp32" | "ulp".
const char* loco_values_name(LocoValues v);

/// Parses "fp32" | "ulp"; false (and *v unchanged) for anything else.
bool loco_values_from(const char* name, LocoValues* v);

}  // namespace pulse::sync
