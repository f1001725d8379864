// The error of a config that cannot be used, apart from app/config.h so that code which only reports or
// catches it (app/device.cpp, the subcommands) needs none of the settings.
#pragma once
#include <stdexcept>

namespace pulse::app {

/// A config that cannot be used: unknown key, wrong type, out-of-range value. what() names the file
/// (or "--set") and the key, e.g. "configs/x.toml: unknown key 'rl.grup_size' (did you mean 'group_size'?)".
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace pulse::app
