// Pieces the CPU and GPU halves of bench/kernels/model_stages.h share (bench/kernels/model_stages_cpu.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace pulse::bench {

/// `count` generated weights: prev (BF16 bit patterns of magnitude ~0.01-0.03) and FP32 masters within one
/// BF16 ULP of them, a `changed` fraction of them cast one ULP away (splitmix64, fixed seed).
void model_pattern(uint64_t count, double changed, std::vector<float>& master, std::vector<uint16_t>& prev);

/// Milliseconds of zstd level 3 over each stream in turn (one host thread); *compressed = bytes out.
double zstd_streams_ms(const std::vector<std::vector<uint8_t>>& streams, uint64_t* compressed);

/// {"stage", "ms", "bytes", "gbps"}.
nlohmann::json stage_row(const char* stage, double ms, double bytes);

}  // namespace pulse::bench
