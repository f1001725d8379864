// [multi] settings of the multi-trainer modes (rl/diloco.h runs the outer rounds), apart from the rounds
// so that settings code (app/config.h) needs no LibTorch.
#pragma once
#include <cstdint>
#include <string>

#include "sync/loco_values.h"

namespace pulse::rl {

/// [multi] settings.
struct OuterConfig {
  std::string mode = "single";  ///< single | ddp | diloco | pulseloco
  int64_t inner_steps = 10;     ///< H: local steps per outer round (diloco, pulseloco)
  double outer_lr = 0.7;        ///< outer SGD learning rate (DiLoCo's 0.7)
  double outer_momentum = 0.9;  ///< Nesterov momentum mu (0 = plain SGD)
  bool gate_open = false;       ///< pulseloco: every entry fires (then it sends what diloco sends)
  double timeout_s = 300;  ///< any collective (and the rendezvous) fails after this long, naming the rank
  int zstd_level = 1;      ///< pulseloco: zstd level tried on index/value streams (0 = raw only)
  /// pulseloco: fired values as FP32 (fp32) or as counts of the weight's BF16 step (ulp, kernels/loco_ulp.h)
  sync::LocoValues values = sync::LocoValues::Fp32;
  /// Throws std::invalid_argument naming the field.
  void validate() const;
};

}  // namespace pulse::rl
