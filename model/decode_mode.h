// How model::generate() runs its decode steps (the TOML key rl.decode).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pulse::model {

/// The decode path of model::generate(). All paths draw the same tokens from the same distribution
/// (model/sampling.h); they differ in how the per-token steps are launched:
///   Eager      one forward_cached() per step; finished rows leave the batch (today's path, the CPU's).
///   Static     a preallocated KV cache of fixed shape [B, Hkv, S_max, D]; every step runs all B rows on
///              fixed shapes (finished rows are computed and ignored until half have stopped, then the
///              batch shrinks to its live rows), attending over the first multiple of
///              kStaticSlotBucket slots that holds the step, and samples on the device.
///   CudaGraph  Static with each (slot bucket) step captured once as a CUDA graph
///              (at::cuda::CUDAGraph) and replayed: one launch per token instead of hundreds. CUDA only.
///   Auto       Eager on the CPU; on a CUDA device CudaGraph when this LibTorch has CUDA graphs, else
///              Static (and Static after a failed capture, with a warning: speed, not the run, is lost).
/// Tokens are those of Eager for the same seeds up to floating-point differences in the logits: the fixed
/// shapes sum attention over more (masked, exactly zero) slots and run GEMMs at another batch size, which
/// may change a logit by an ULP and so, rarely, a sampled token (the tests compare tokens on real models).
enum class DecodeMode { Auto, Eager, Static, CudaGraph };

/// The TOML names of DecodeMode, in enum order.
inline constexpr std::array<const char*, 4> kDecodeModeNames = {"auto", "eager", "static", "cuda_graph"};

/// The TOML name of `m`.
inline const char* name_of(DecodeMode m) {
  return kDecodeModeNames[static_cast<size_t>(m)];
}

/// The DecodeMode whose TOML name is `name`, or nullopt (the config, the wire and `pulse bench generate`
/// read names through this one lookup).
inline std::optional<DecodeMode> decode_mode_named(std::string_view name) {
  for (size_t i = 0; i < kDecodeModeNames.size(); ++i)
    if (name == kDecodeModeNames[i]) return static_cast<DecodeMode>(i);
  return std::nullopt;
}

/// Static/CudaGraph attention span granularity (slots): a step attends over the smallest multiple of this
/// that covers its slot, so a 256-token decode uses a few captured graphs, not one per step.
inline constexpr long kStaticSlotBucket = 128;

/// Slots of the static KV cache for prompt + new tokens: rounded up to whole attention spans, so that the
/// last span never runs past the cache.
inline int64_t static_cache_slots(int64_t prompt_and_new_tokens) {
  return (prompt_and_new_tokens + kStaticSlotBucket - 1) / kStaticSlotBucket * kStaticSlotBucket;
}

/// Static/CudaGraph: a batch of at least this many rows is compacted to its live rows once half or more
/// have stopped (below it the recapture would cost more than the finished rows do).
inline constexpr long kStaticCompactMinRows = 16;

}  // namespace pulse::model
