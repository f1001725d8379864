// [multi] settings of the multi-trainer modes (rl/diloco.h runs the outer rounds), apart from the rounds
// so that settings code (app/config.h) needs no LibTorch. validate() is in rl/outer_config.cpp.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "sync/loco_values.h"

namespace pulse::rl {

/// multi.mode: how several trainers combine their work.
enum class MultiMode {
  Single,     ///< one trainer
  Ddp,        ///< gradient all-reduce every step
  Diloco,     ///< dense FP32 pseudo-gradient every multi.inner_steps (DiLoCo, arXiv:2311.08105)
  PulseLoco,  ///< only the entries that change BF16 weights, with error feedback
};

/// The TOML names of MultiMode, in enum order.
inline constexpr std::array<const char*, 4> kMultiModeNames = {"single", "ddp", "diloco", "pulseloco"};

/// The TOML name of `m` ("single" | "ddp" | "diloco" | "pulseloco").
inline const char* name_of(MultiMode m) {
  return kMultiModeNames[static_cast<size_t>(m)];
}

/// diloco | pulseloco: the modes with outer rounds every multi.inner_steps local steps.
inline bool has_outer_rounds(MultiMode m) {
  return m == MultiMode::Diloco || m == MultiMode::PulseLoco;
}

/// [multi] settings.
struct OuterConfig {
  MultiMode mode = MultiMode::Single;
  int64_t inner_steps = 10;     ///< H: local steps per outer round (diloco, pulseloco)
  double outer_lr = 0.7;        ///< outer SGD learning rate (DiLoCo's 0.7)
  double outer_momentum = 0.9;  ///< Nesterov momentum mu (0 = plain SGD)
  bool gate_open = false;       ///< pulseloco: every entry fires (then it sends what diloco sends)
  double timeout_s = 300;  ///< any collective (and the rendezvous) fails after this long, naming the rank
  int zstd_level = 1;      ///< pulseloco: zstd level tried on index/value streams (0 = raw only)

  /// pulseloco: fired values as FP32 (fp32) or as counts of the weight's BF16 step (ulp, kernels/loco_ulp.h)
  sync::LocoValues values = sync::LocoValues::Fp32;

  /// The one range rule of each [multi] key: inner_steps 1..2^20, outer_lr in (0, 10], outer_momentum in
  /// [0, 1), timeout_s in (0, 86400], zstd_level 0..19. Throws std::invalid_argument "multi.KEY: must be
  /// ..." (the TOML key first, then the rule and the value).
  void validate() const;
};

}  // namespace pulse::rl
