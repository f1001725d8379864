// Full training state for resuming bit-identically: optimizer masters + Adam moments + step (MasterAdam),
// torch's CPU RNG state, the data cursor and the published version. A checkpoint is a folder:
//   DIR/optimizer.safetensors   MasterAdam::save_state
//   DIR/train_state.json        {"format":"pulse-train-state-v1","step":..,"data_cursor":..,
//                                "policy_version":..,"optimizer_step":..,"torch_rng_state":"hex",
//                                "extra":{..}}   ("rng_state", written by earlier versions, is ignored)
// written to DIR.tmp, fsynced, then swapped in by renames (DIR -> DIR.old, DIR.tmp -> DIR, remove DIR.old),
// so a crash leaves either the old or the new checkpoint complete; load falls back to DIR.old when DIR is
// absent.
#pragma once
#include <cstdint>
#include <string>

namespace pulse::rl {

class MasterAdam;

/// Everything beyond the optimizer (and torch's RNG, saved alongside) that a resumed run needs.
struct TrainState {
  int64_t step = 0;               ///< RL steps completed
  uint64_t data_cursor = 0;       ///< position in the training problem stream
  uint64_t policy_version = 0;    ///< weights version last published
  std::string extra_json = "{}";  ///< caller's additional JSON object (kept verbatim; "" = {})
};

/// Writes the checkpoint folder `dir` atomically (see above); also captures torch's default CPU generator
/// state. Throws std::runtime_error naming the path (also when extra_json is not valid JSON). Not thread-safe
/// against other writers of `dir` or of torch's default generator.
void save_train_state(const std::string& dir, const MasterAdam& opt, const TrainState& st);

/// Loads `dir` (or DIR.old, see above) into `opt` (masters cast into the model) and restores torch's default
/// CPU generator state. Throws std::runtime_error naming the file and field on a missing or malformed
/// checkpoint. Same thread-safety as save_train_state.
TrainState load_train_state(const std::string& dir, MasterAdam& opt);

}  // namespace pulse::rl
